-- host_block.lua: block one host for every node (429/503/Retry-After), or reset its backoff level.
-- KEYS[1] the ready zset (SCHEDULER_READY_KEY): host -> server time it may be served next
-- KEYS[2] the host's hash (SCHEDULER_HOST_KEY): fields bo (backoff level), until (blocked until,
--   server time), why (last block reason); the others (iv, cd, pages, max) are left alone
-- ARGV[1] mode: "block" or "reset"
-- block: ARGV[2] host (its member in the ready zset), ARGV[3] seconds ("" = adaptive: no
--   Retry-After), ARGV[4] reason, ARGV[5] base, ARGV[6] cap, ARGV[7] random in [0, 1)
--   Retry-After: delay = min(seconds, cap); bo is left as it is.
--   Adaptive: bo += 1, step = min(cap, base * 2^(bo-1)), delay = step/2 + step/2 * random (equal
--   jitter). A host still blocked (until > now) is not escalated: the 429s of requests that were
--   in flight when the first one came back are one event, not bo of them; the call returns the
--   time left.
--   Then until = max(until, now + delay), why = reason, and the host's ready score is raised to
--   until if it is in the ready zset (ZADD XX GT: a host without pending requests is not added;
--   enqueue adds it at max(now, until)). Returns the seconds the host stays blocked, as a string.
-- unblock: ARGV[2] host, ARGV[3] reason: lift a block set with exactly this reason (robots.txt
--   pending: the fetching node lifts it once the file is cached, so the requests waiting for it
--   are served after one interval instead of after the block's length); until = 0 and the host's
--   ready score set to now + its interval (max of iv, cd, ad: the robots.txt request counts as one
--   of the host's requests), or lowered to now when it has none, if it is in the ready zset. A block for another reason (a 429 that
--   came meanwhile) stands. ARGV[4] doorbell channel ("" = none): rung (lib/doorbell.lua) when lifted, so
--   idle nodes (asleep until the block's end) pop the host's requests now. Returns "1" when
--   lifted, else "0".
-- Any other mode does nothing and returns "0".
-- reset: bo = 0 (a node got a success from a host whose lease said bo > 0); until is kept (a block
--   another node set since stands). A host without a hash gets none. Returns "0".
-- Garbage: bo that is not an integer in [0, 64] counts as 0; until that is not a finite number or
--   lies more than max(cap, 3600) s ahead counts as 0 (no block); ARGV that are not finite numbers
--   take defaults (seconds -> adaptive, base 1, cap 60, random 0.5). A key of the wrong Redis type
--   raises WRONGTYPE. Both keys are in KEYS (one spider's hash tag: one Cluster slot).
-- uses: doorbell (lib/doorbell.lua: doorbell_ring)
local MAX_LEVEL = 64
local function number(raw, default)
  if type(raw) ~= "string" or #raw > 32 or not string.match(raw, "^%-?%d+%.?%d*$") then return default end
  local n = tonumber(raw)
  if n == nil or n ~= n or n == math.huge or n == -math.huge then return default end
  return n
end

local ready, hash = KEYS[1], KEYS[2]
local mode = ARGV[1]
if mode == "reset" then
  if redis.call("EXISTS", hash) == 1 then
    redis.call("HSET", hash, "bo", 0)
  end
  return "0"
elseif mode == "unblock" then
  if redis.call("HGET", hash, "why") ~= (ARGV[3] or "") then return "0" end
  local t = redis.call("TIME")
  local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
  redis.call("HSET", hash, "until", 0)
  -- the host's interval counts from the robots.txt request, which went to the same site
  local gap = 0
  for _, v in ipairs(redis.call("HMGET", hash, "iv", "cd", "ad")) do
    local n = number(v, 0)
    if n > gap and n <= 86400 then gap = n end
  end
  if gap > 0 then
    redis.call("ZADD", ready, "XX", string.format("%.6f", now + gap), ARGV[2] or "")
  else
    redis.call("ZADD", ready, "XX", "LT", string.format("%.6f", now), ARGV[2] or "")
  end
  doorbell_ring(ARGV[4], 1, KEYS[1], -1)
  return "1"
elseif mode ~= "block" then
  return "0" -- an unknown mode does nothing
end

local host, reason = ARGV[2] or "", ARGV[4] or ""
local base = number(ARGV[5], 1)
local cap = number(ARGV[6], 60)
if base <= 0 then base = 1 end
if cap < 0 then cap = 60 end
local rand = number(ARGV[7], 0.5)
if rand < 0 or rand >= 1 then rand = 0.5 end
local t = redis.call("TIME")
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000

local bo = number(redis.call("HGET", hash, "bo"), 0)
if bo < 0 or bo > MAX_LEVEL or bo ~= math.floor(bo) then bo = 0 end
local until_old = number(redis.call("HGET", hash, "until"), 0)
if until_old > now + math.max(cap, 3600) then until_old = 0 end

local seconds = number(ARGV[3], nil)
local delay
if seconds ~= nil and seconds >= 0 then
  delay = math.min(seconds, cap)
elseif until_old > now then
  delay = 0 -- already blocked: one event, no escalation
else
  bo = math.min(bo + 1, MAX_LEVEL)
  local step = math.min(cap, base * 2 ^ (bo - 1))
  delay = step / 2 + step / 2 * rand
end
local blocked = math.max(until_old, now + delay)
redis.call("HSET", hash, "bo", bo, "until", string.format("%.6f", blocked), "why", string.sub(reason, 1, 200))
redis.call("ZADD", ready, "XX", "GT", string.format("%.6f", blocked), host)
return string.format("%.3f", blocked - now)
