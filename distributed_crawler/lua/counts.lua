-- counts.lua: sizes of one spider's keys in one round trip, whatever their Redis type.
-- KEYS: any keys of one spider (same hash tag), e.g. requests, processing, delayed, failed
-- Returns one integer per key (0 for a missing key): LLEN / ZCARD / SCARD / HLEN / STRLEN.
-- Garbage: reads no value, only sizes, whatever a key holds; a type with no size here (stream)
-- counts 0, so this script never raises WRONGTYPE.
local sizes = {}
for i, key in ipairs(KEYS) do
  local t = redis.call("TYPE", key)["ok"]
  if t == "list" then sizes[i] = redis.call("LLEN", key)
  elseif t == "zset" then sizes[i] = redis.call("ZCARD", key)
  elseif t == "set" then sizes[i] = redis.call("SCARD", key)
  elseif t == "hash" then sizes[i] = redis.call("HLEN", key)
  elseif t == "string" then sizes[i] = redis.call("STRLEN", key)
  else sizes[i] = 0 end
end
return sizes
