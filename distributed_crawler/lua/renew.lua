-- renew.lua: extend the leases this node still holds.
-- KEYS[1] processing zset
-- ARGV[1] lease length in seconds; ARGV[2..] lease members
-- Returns how many leases were extended.
-- Guarantees: ZADD XX never re-creates a lease that was reclaimed or acked meanwhile; GT never
-- shortens one. The deadline comes from the server clock.
-- Garbage: reads no value from Redis (a garbage member or a +inf score in processing is left as it
-- is, reclaim.lua deals with it); a key of the wrong Redis type raises WRONGTYPE.
local t = redis.call("TIME")
local deadline = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[1])
local renewed = 0
for i = 2, #ARGV do
  renewed = renewed + redis.call("ZADD", KEYS[1], "XX", "GT", "CH", deadline, ARGV[i])
end
return renewed
