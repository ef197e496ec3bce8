-- counts.lua: sizes of one spider's keys in one round trip, whatever their Redis type.
-- uses: queue (pending_recount)
-- KEYS: any keys of one spider (same hash tag), e.g. processing, delayed, failed
-- ARGV (optional, all or none): [1] index of the key holding the pending counter
--   (SCHEDULER_PENDING_KEY): its value is returned instead of its size; [2] index of the single
--   queue, [3] / [4] indices of the host mode's ready / over-budget zsets, [5] the host queue key
--   prefix. A counter that is missing or not a non-negative integer (a frontier written by older
--   code, garbage) is recounted entry by entry without writing (the next script that changes the
--   frontier writes it): -1 ("unknown") when the host mode has more hosts than a script recounts.
-- Returns one integer per key (0 for a missing key): LLEN / ZCARD / SCARD / HLEN / STRLEN.
-- Garbage: reads no value but the counter's, only sizes, whatever a key holds; a type with no size
-- here (stream) counts 0, so this script never raises WRONGTYPE.
local counter = tonumber(ARGV[1] or "")
local sizes, unusable = {}, false
for i, key in ipairs(KEYS) do
  local t = redis.call("TYPE", key)["ok"]
  if i == counter then
    local v = t == "string" and redis.call("GET", key) or nil
    sizes[i] = (v and #v <= 15 and string.match(v, "^%d+$")) and tonumber(v) or -1
    unusable = sizes[i] < 0
  elseif t == "list" then sizes[i] = redis.call("LLEN", key)
  elseif t == "zset" then sizes[i] = redis.call("ZCARD", key)
  elseif t == "set" then sizes[i] = redis.call("SCARD", key)
  elseif t == "hash" then sizes[i] = redis.call("HLEN", key)
  elseif t == "string" then sizes[i] = redis.call("STRLEN", key)
  else sizes[i] = 0 end
end
if unusable then
  local single, ready, over = KEYS[tonumber(ARGV[2])], KEYS[tonumber(ARGV[3])], KEYS[tonumber(ARGV[4])]
  sizes[counter] = pending_recount(single, ready, over, ARGV[5]) or -1
end
return sizes
