-- rate.lua: reserve the next free slot of one domain's cluster-wide rate limit (GCRA-style).
-- KEYS[1] the domain's key (DOMAIN_RATE_KEY): a string, the server time at which the next
--   request may start; expires once it lies in the past
-- ARGV[1] interval in seconds between two requests (1 / requests per second)
-- Returns the seconds to wait before starting, as a string ("0" = now): always finite, at most
--   max(3600, interval).
-- Guarantees: slots are handed out one interval apart on Redis server time, whichever node asks;
-- each call reserves its own slot, so waiting nodes never race for the same one (no thundering
-- herd), and no more than one request starts per interval. One key per script: Cluster-safe.
-- Garbage: a value that is not a finite number ("abc", "nan", "inf", "0x10"...) or lies more than
-- max(3600 s, interval) ahead is no reservation: the slot is now, and the key is overwritten
-- with the next one. A key of the wrong Redis type raises WRONGTYPE.
local MAX_WAIT = 3600
local interval = tonumber(ARGV[1])
local t = redis.call("TIME")
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local raw = redis.call("GET", KEYS[1])
local free = raw and #raw <= 32 and string.match(raw, "^%-?%d+%.?%d*$") and tonumber(raw) or now
if free > now + math.max(MAX_WAIT, interval) then free = now end
local slot = math.max(free, now)
local following = slot + interval
redis.call("SET", KEYS[1], string.format("%.6f", following), "PX", math.ceil((following - now) * 1000) + 1000)
return string.format("%.6f", slot - now)
