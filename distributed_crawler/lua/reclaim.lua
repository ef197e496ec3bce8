-- reclaim.lua: return expired leases to the front of their priority, or dead-letter them.
-- KEYS[1] processing zset (score = lease deadline, server time)
-- KEYS[2] queue (zset for "priority", list for "fifo"/"lifo")
-- KEYS[3] failed list (dead letters, JSON)
-- KEYS[4] sequence counter
-- ARGV[1] queue type; ARGV[2] max deliveries; ARGV[3] max leases to reclaim in this call;
-- ARGV[4] failed list cap; ARGV[5] name of the node running the reclaim
-- pending counter (lib/queue.lua pending_open; optional): single queue KEYS[5] when #KEYS is 7;
--   host mode KEYS[6], then the single queue KEYS[7], when #KEYS is 9
-- KEYS[#KEYS - 1] solo hash (lease -> node: a redelivered request its node runs alone), KEYS[#KEYS]
--   deaths hash (sha1 of a payload -> how many nodes died running it alone), in every mode
-- Returns {requeued, dead_lettered} (dead_lettered includes the garbage below).
-- killed_worker: an expired lease found in the solo hash is a node that died (or hung, or closed at
--   MEMUSAGE_LIMIT_MB) while running that request alone, so the request is what killed it: the
--   second such death dead-letters it (reason "killed_worker") instead of handing it to a third
--   node. Deaths of a node running many requests count only as deliveries (SCHEDULER_MAX_DELIVERIES):
--   innocent requests beside a poison one are never blamed. The deaths hash holds at most
--   MAX_DEATHS fields (then it is emptied: those requests start again from no death).
-- Guarantees: each expired lease is moved exactly once (the script is atomic, so two reclaimers
-- running at once split the work and never double it); a request delivered max times goes to
-- the failed list with its payload instead of being redelivered forever (poison protection).
-- The copy is written before the lease is removed: a write refused half-way (maxmemory) leaves
-- the request in two places, never in none.
-- Garbage (anyone can write to Redis): nothing in the processing zset stops the script.
--   * An expired member without a valid "<deliveries>:<priority>:" envelope (no envelope, non-
--     numeric fields, more than 9 digits of deliveries, |priority| > 131071 = envelope.MAX_PRIORITY)
--     goes to the failed list: url "", reason "not a queue entry (...)", attempts 0, source
--     "reclaim", payload = the first 300 bytes of the raw member (invalid UTF-8 replaced by U+FFFD).
--   * A lease whose deadline lies more than a year ahead (+inf included) would never expire:
--     legitimate deadlines are server time + SCHEDULER_LEASE_SECONDS (minutes), so such a member
--     is dead-lettered at once (reason "lease deadline ... ahead"): a valid request keeps its full
--     payload and priority there (`dcrawl failed --requeue` brings it back), garbage as above.
--   * Dead-letter payloads are made valid UTF-8 (cjson copies bytes as they are).
--   * A sequence counter that is not an integer is reset (WRONGTYPE is still raised).
-- A key of the wrong Redis type raises WRONGTYPE: the caller names the key and waits.
-- Host mode (ARGV[1] "host", lib/host.lua): KEYS[2] is the ready zset, KEYS[5] the over-budget
-- zset, ARGV[6] / ARGV[7] the host queue / host hash key prefixes; a requeued member goes to the
-- front of its priority in its host's queue (host from the payload's "slot", else its url; none:
-- host "", where the node dead-letters what does not decode) and the host into ready at once.
-- uses: queue (lib/queue.lua: MAX_PRIORITY, queue_push, make_member)
-- uses: host (lib/host.lua: host_of, host_push, payload_url)
local qtype = ARGV[1]
local max_deliveries = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local t = redis.call("TIME")
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local YEAR = 31536000
local PREVIEW = 300
local SOLO, DEATHS = KEYS[#KEYS - 1], KEYS[#KEYS]
if qtype == "host" and #KEYS == 9 then
  pending_open(KEYS[6], KEYS[7], KEYS[2], KEYS[5], ARGV[6])
elseif qtype ~= "host" and #KEYS == 7 then
  pending_open(KEYS[5], KEYS[2])
end
local MAX_DEATHS = 10000

local expired = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", now, "LIMIT", 0, limit)
local far = {}
if #expired < limit then -- one O(log n) look-up, empty in normal operation
  far = redis.call("ZRANGEBYSCORE", KEYS[1], "(" .. string.format("%.6f", now + YEAR), "+inf",
    "LIMIT", 0, limit - #expired)
end

-- Valid UTF-8, as Python's decode("utf-8", "replace"): each maximal invalid subpart -> U+FFFD.
local function clean(s)
  if not string.find(s, "[\128-\255]") then return s end
  local out, i, n = {}, 1, #s
  while i <= n do
    local j = string.find(s, "[\128-\255]", i)
    if not j then out[#out + 1] = string.sub(s, i) break end
    if j > i then out[#out + 1] = string.sub(s, i, j - 1) end
    local c = string.byte(s, j)
    local len, lo, hi = 0, 128, 191 -- sequence length; range of its second byte
    if c >= 194 and c <= 223 then len = 2
    elseif c >= 224 and c <= 239 then
      len = 3
      if c == 224 then lo = 160 elseif c == 237 then hi = 159 end
    elseif c >= 240 and c <= 244 then
      len = 4
      if c == 240 then lo = 144 elseif c == 244 then hi = 143 end
    end
    local k = 1 -- bytes of the sequence that are valid so far
    while k < len do
      local b = string.byte(s, j + k)
      if not b or b < lo or b > hi then break end
      k, lo, hi = k + 1, 128, 191
    end
    if len > 0 and k == len then
      out[#out + 1] = string.sub(s, j, j + len - 1)
    else
      out[#out + 1] = "\239\191\189"
    end
    i = j + k
  end
  return table.concat(out)
end

-- deliveries, priority, JSON payload and what follows the priority (expiry kept) of a valid
-- envelope; nil and a reason otherwise
local function parse(lease)
  local deliveries, priority, rest = string.match(lease, "^(%d+):(%-?%d+):(.*)$")
  if not deliveries then
    return nil, "not a queue entry (no <deliveries>:<priority>: envelope)"
  end
  local p = tonumber(priority)
  if #deliveries > 9 or #priority > 8 or p > MAX_PRIORITY or p < -MAX_PRIORITY then
    return nil, "not a queue entry (<deliveries>:<priority>: envelope out of range)"
  end
  return tonumber(deliveries), p, string.match(rest, "^%d+:(.*)$") or rest, rest
end

local requeued, dead = 0, 0

local function dead_letter(lease, reason, deliveries, priority, payload)
  local entry
  if deliveries then
    local url = payload_url(payload) -- a payload of ours is kept whole (dcrawl failed --requeue)
    if not url then
      url = ""
      payload = string.sub(payload, 1, PREVIEW)
    end
    entry = {url = clean(url), reason = reason, attempts = deliveries, priority = priority,
             node = ARGV[5], time = now, payload = clean(payload), source = "reclaim"}
  else
    entry = {url = "", reason = reason, attempts = 0, node = ARGV[5], time = now,
             payload = clean(string.sub(lease, 1, PREVIEW)), source = "reclaim"}
  end
  redis.call("LPUSH", KEYS[3], cjson.encode(entry))
  dead = dead + 1
end

-- the second death of a node that ran this request alone: true (its count is then forgotten)
local function killed_twice(lease, payload)
  if redis.call("HDEL", SOLO, lease) == 0 then return false end
  local id = redis.sha1hex(payload)
  if redis.call("HINCRBY", DEATHS, id, 1) < 2 then
    if redis.call("HLEN", DEATHS) > MAX_DEATHS then redis.call("DEL", DEATHS) end
    return false
  end
  redis.call("HDEL", DEATHS, id)
  return true
end

for _, lease in ipairs(expired) do
  local deliveries, priority, payload, rest = parse(lease)
  if not deliveries then
    dead_letter(lease, priority)
  elseif killed_twice(lease, payload) then
    dead_letter(lease, "killed_worker", deliveries, priority, payload)
  elseif deliveries >= max_deliveries then
    dead_letter(lease, "lease expired " .. deliveries .. " times (node died or hung while processing)",
      deliveries, priority, payload)
  else
    local member = make_member(deliveries, priority, rest) -- its expiry, if any, stays
    if qtype == "host" then -- the front of its priority in its host's queue
      host_push(KEYS[2], KEYS[5], ARGV[6], ARGV[7], KEYS[4], host_of(payload), member, priority, true, now)
    else
      queue_push(qtype, KEYS[2], KEYS[4], member, priority, true) -- the front of its priority
    end
    requeued = requeued + 1
  end
  redis.call("ZREM", KEYS[1], lease)
end
for _, lease in ipairs(far) do
  local deliveries, priority, payload = parse(lease)
  local reason = "lease deadline more than a year ahead (never expires; not set by a node)"
  if deliveries then
    dead_letter(lease, reason, deliveries, priority, payload)
  else
    dead_letter(lease, priority .. "; " .. reason)
  end
  redis.call("ZREM", KEYS[1], lease)
end
if dead > 0 then
  redis.call("LTRIM", KEYS[3], 0, tonumber(ARGV[4]) - 1)
end
return {requeued, dead}
