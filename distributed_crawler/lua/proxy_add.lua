-- proxy_add.lua: put proxies into the shared pool.
-- KEYS[1] pool zset; KEYS[2] dead hash
-- ARGV[1] mode: "load" (a node's PROXY_LIST/PROXY_FILE at start: a dead proxy stays dead) or
--         "add" (an operator's `dcrawl proxies add`: a dead proxy comes back);
-- ARGV[2] initial score; ARGV[3..] proxy URLs
-- Returns how many proxies entered the pool.
-- Guarantees: a proxy already in the pool keeps its score (ZADD NX); atomic; KEYS[1] and KEYS[2]
-- share a hash slot.
-- Garbage: reads no value (only whether a proxy is dead); a key of the wrong Redis type raises
-- WRONGTYPE.
local added = 0
for i = 3, #ARGV do
  local skip = false
  if redis.call("HEXISTS", KEYS[2], ARGV[i]) == 1 then
    if ARGV[1] == "add" then
      redis.call("HDEL", KEYS[2], ARGV[i])
    else
      skip = true
    end
  end
  if not skip then
    added = added + redis.call("ZADD", KEYS[1], "NX", ARGV[2], ARGV[i])
  end
end
return added
