-- counts.lua: sizes of one spider's keys in one round trip, whatever their Redis type.
-- KEYS: any keys of one spider (same hash tag), e.g. processing, delayed, failed
-- ARGV[1] (optional) index of a key holding a counter (SCHEDULER_PENDING_KEY): its value is
--   returned instead of its size, -1 when it is missing or not a non-negative integer ("unknown");
--   ARGV[2..] indices of the keys that hold the counted entries (the single queue, and the host
--   mode's ready and over-budget zsets): a missing counter reads 0 when they are all empty (a
--   fresh or flushed frontier has nothing to count; the next script sets the counter)
-- Returns one integer per key (0 for a missing key): LLEN / ZCARD / SCARD / HLEN / STRLEN.
-- Garbage: reads no value but the counter's, only sizes, whatever a key holds; a type with no size
-- here (stream) counts 0, so this script never raises WRONGTYPE.
local counter = tonumber(ARGV[1] or "")
local sizes, missing = {}, false
for i, key in ipairs(KEYS) do
  local t = redis.call("TYPE", key)["ok"]
  if i == counter then
    local v = t == "string" and redis.call("GET", key) or nil
    sizes[i] = (v and #v <= 15 and string.match(v, "^%d+$")) and tonumber(v) or -1
    missing = t == "none"
  elseif t == "list" then sizes[i] = redis.call("LLEN", key)
  elseif t == "zset" then sizes[i] = redis.call("ZCARD", key)
  elseif t == "set" then sizes[i] = redis.call("SCARD", key)
  elseif t == "hash" then sizes[i] = redis.call("HLEN", key)
  elseif t == "string" then sizes[i] = redis.call("STRLEN", key)
  else sizes[i] = 0 end
end
if missing then
  local empty = true
  for j = 2, #ARGV do
    if sizes[tonumber(ARGV[j])] ~= 0 then empty = false end
  end
  if empty and #ARGV > 1 then sizes[counter] = 0 end
end
return sizes
