"""The shared request queue: codec, envelope, keys, Lua scripts, enqueue, dead letters."""
