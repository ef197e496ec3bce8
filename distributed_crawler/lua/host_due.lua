-- host_due.lua: make one host, or every host of a registered domain, due now, after the operator
-- lifted what held it back (`dcrawl host SPIDER HOST unblock | unset`, the dashboard): without it a
-- host stays asleep until the old block or delay would have ended.
-- KEYS[1] the ready zset (SCHEDULER_READY_KEY): host -> server time it may be served next
-- ARGV[1] target (a host, or a registered domain), ARGV[2] "host" or "domain" (domain: the target and
--   every host ending in "." .. target, any port), ARGV[3] doorbell channel ("" = none): PUBLISHed to
--   when a host was made due, so idle nodes pop it now
-- Returns how many hosts were made due.
-- Guarantees: only hosts already in the ready index and due later than now are touched (their score
--   lowered to now, server time); hosts without pending work are not added. Domain scope reads the
--   hosts due later than now, at most 100,000 of them (an operator action; the rest wake at their
--   own time). The ready zset is in KEYS; the doorbell is a channel, not a key.
-- uses: doorbell (lib/doorbell.lua: doorbell_ring)
local ready, target, scope = KEYS[1], ARGV[1] or "", ARGV[2]
local t = redis.call("TIME")
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local stamp = string.format("%.6f", now)

local function bare(slot) -- a slot without its ":port" (IPv6 slots are bracketed)
  local inner = string.match(slot, "^%[(.*)%]:%d+$")
  if inner then return inner end
  return string.match(slot, "^(.*):%d+$") or slot
end

local made = 0
if scope == "domain" then
  local later = redis.call("ZRANGEBYSCORE", ready, "(" .. stamp, "+inf", "LIMIT", 0, 100000)
  for _, slot in ipairs(later) do
    local h = bare(slot)
    if h == target or string.sub(h, -(#target + 1)) == "." .. target then
      redis.call("ZADD", ready, "XX", "LT", stamp, slot)
      made = made + 1
    end
  end
else
  local score = tonumber(redis.call("ZSCORE", ready, target))
  if score and score > now then
    redis.call("ZADD", ready, "XX", "LT", stamp, target)
    made = 1
  end
end
if made > 0 then doorbell_ring(ARGV[3], made, KEYS[1], -1) end
return made
