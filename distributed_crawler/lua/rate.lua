-- rate.lua: reserve the next free slot of one domain's cluster-wide rate limit (GCRA-style).
-- KEYS[1] the domain's key (DOMAIN_RATE_KEY): a string, the server time at which the next
--   request may start; expires once it lies in the past
-- ARGV[1] interval in seconds between two requests (1 / requests per second)
-- Returns the seconds to wait before starting, as a string ("0" = now).
-- Guarantees: slots are handed out one interval apart on Redis server time, whichever node asks;
-- each call reserves its own slot, so waiting nodes never race for the same one (no thundering
-- herd), and no more than one request starts per interval. One key per script: Cluster-safe.
local interval = tonumber(ARGV[1])
local t = redis.call("TIME")
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local free = tonumber(redis.call("GET", KEYS[1]) or "0")
local slot = math.max(free, now)
local following = slot + interval
redis.call("SET", KEYS[1], string.format("%.6f", following), "PX", math.ceil((following - now) * 1000) + 1000)
return string.format("%.6f", slot - now)
