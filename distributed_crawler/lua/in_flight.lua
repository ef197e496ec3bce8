-- in_flight.lua: the single-queue modes' cluster-wide cap of one domain's requests in flight
-- (DOMAIN_MAX_IN_FLIGHT); host mode caps at lease time instead (host_pop.lua).
-- KEYS[1] the domain's zset (DOMAIN_IN_FLIGHT_KEY): token -> deadline (Redis server time)
-- ARGV[1] "take" or "give"
-- take: ARGV[2] token, ARGV[3] cap (> 0), ARGV[4] seconds the token lives at most (a node that dies
--   holding it frees it then). Expired tokens are dropped first; with fewer than cap tokens left the
--   token is added. Returns 1 when taken, else 0 (the caller looks again shortly).
-- give: ARGV[2] token: removed. Returns the number removed.
-- Guarantees: at most cap live tokens at any time, whichever node asks; one key per script
-- (Cluster-safe); the key expires with its last token. Garbage: a member with a score that is not a
-- number cannot exist in a zset; a cap or lifetime that is not a positive number takes 1 / 300.
-- A key of the wrong Redis type raises WRONGTYPE.
local key, mode = KEYS[1], ARGV[1]
if mode == "give" then
  return redis.call("ZREM", key, ARGV[2] or "")
end
local cap = tonumber(ARGV[3]) or 1
if cap < 1 then cap = 1 end
local life = tonumber(ARGV[4]) or 300
if not (life > 0 and life < 86400) then life = 300 end
local t = redis.call("TIME")
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call("ZREMRANGEBYSCORE", key, "-inf", string.format("%.6f", now))
if redis.call("ZCARD", key) >= cap then return 0 end
redis.call("ZADD", key, string.format("%.6f", now + life), ARGV[2] or "")
redis.call("PEXPIRE", key, math.ceil(life * 1000) + 1000)
return 1
