-- lib/block.lua: blocking a host of the per-host frontier for every node, and lifting the block,
-- shared by host_block.lua, robots_claim.lua and robots_store.lua. Prepended to every script whose
-- header says "-- uses: block" (after lib/doorbell.lua: its "-- uses: doorbell" line comes first).
-- Local names only.
-- Host hash fields used: bo (backoff level), until (blocked until, server time), why (last block
-- reason), iv / cd / ad (the intervals whose max spaces the host's requests).
local BLOCK_MAX_LEVEL = 64

-- a finite number of at most 32 characters, else `default`
local function block_num(raw, default)
  if type(raw) ~= "string" or #raw > 32 or not string.match(raw, "^%-?%d+%.?%d*$") then return default end
  local n = tonumber(raw)
  if n == nil or n ~= n or n == math.huge or n == -math.huge then return default end
  return n
end

local function block_now()
  local t = redis.call("TIME")
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

-- Block `host` (its hash `hash`, its member in `ready`): `seconds` (nil = adaptive backoff: bo += 1,
-- step = min(cap, base * 2^(bo-1)), delay = step/2 + step/2 * rand) capped at `cap`; a host still
-- blocked is not escalated (delay 0). until = max(until, now + delay), why = reason, the ready score
-- raised to until if the host is in ready. Returns the seconds the host stays blocked.
local function block_host(ready, hash, host, seconds, reason, base, cap, rand, now)
  local bo = block_num(redis.call("HGET", hash, "bo"), 0)
  if bo < 0 or bo > BLOCK_MAX_LEVEL or bo ~= math.floor(bo) then bo = 0 end
  local until_old = block_num(redis.call("HGET", hash, "until"), 0)
  if until_old > now + math.max(cap, 3600) then until_old = 0 end
  local delay
  if seconds ~= nil and seconds >= 0 then
    delay = math.min(seconds, cap)
  elseif until_old > now then
    delay = 0 -- already blocked: one event, no escalation
  else
    bo = math.min(bo + 1, BLOCK_MAX_LEVEL)
    local step = math.min(cap, base * 2 ^ (bo - 1))
    delay = step / 2 + step / 2 * rand
  end
  local blocked = math.max(until_old, now + delay)
  redis.call("HSET", hash, "bo", bo, "until", string.format("%.6f", blocked), "why", string.sub(reason, 1, 200))
  redis.call("ZADD", ready, "XX", "GT", string.format("%.6f", blocked), host)
  return blocked - now
end

-- The host's interval: max of iv, cd, ad (each in [0, 86400], garbage = 0).
local function block_gap(hash)
  local gap = 0
  for _, v in ipairs(redis.call("HMGET", hash, "iv", "cd", "ad")) do
    local n = block_num(v, 0)
    if n > gap and n <= 86400 then gap = n end
  end
  return gap
end

-- Lift a block set with exactly `reason` (a block for another reason stands): until = 0 and the
-- host due `times` intervals from now (the robots.txt request counts as one of the host's
-- requests; times = 2 when the lifting node sends one more request of the host itself, one interval
-- from now), or due now when it has no interval; `add` = also when the host is not in ready (an
-- emptied host stays there until due, so a new request cannot jump its interval). PUBLISHes to
-- `doorbell` ("" = none) when lifted (lib/doorbell.lua: declare "-- uses: doorbell" before "block").
-- Returns true when lifted.
local function unblock_host(ready, hash, host, reason, doorbell, now, times, add)
  if redis.call("HGET", hash, "why") ~= reason then return false end
  redis.call("HSET", hash, "until", 0)
  local gap = block_gap(hash)
  if gap > 0 then
    local due = string.format("%.6f", now + times * gap)
    if add then redis.call("ZADD", ready, due, host) else redis.call("ZADD", ready, "XX", due, host) end
  else
    redis.call("ZADD", ready, "XX", "LT", string.format("%.6f", now), host)
  end
  doorbell_ring(doorbell, 1, ready, -1) -- not a push: never stale
  return true
end
-- end of lib/block.lua
