-- pop.lua: return due retries to the queue, then take up to N requests and lease them, atomically.
-- KEYS[1] queue (zset for "priority", list for "fifo"/"lifo")
-- KEYS[2] processing zset: member -> lease deadline (Redis server time, seconds)
-- KEYS[3] delayed zset: member -> due time (optional; without it nothing is moved)
-- KEYS[4] sequence counter (with KEYS[3]: orders moved retries inside their priority)
-- KEYS[5] pending counter (optional, with KEYS[3] and KEYS[4]; lib/queue.lua pending_open): counts
--   what leaves and enters the queue
-- KEYS[6] (optional) refused hash: an expired request counts in field "expired <host>"
-- ARGV[1] queue type: "priority" | "fifo" | "lifo"
-- ARGV[2] max number of requests to take (0: only move due retries)
-- ARGV[3] lease length in seconds
-- ARGV[4] max number of due retries to move in this call (default 100)
-- Returns the leased members ("<deliveries>:<priority>:<payload>", deliveries counted up by one); an
--   expired member (its "<expires_at>:" at or before server time, lib/queue.lua) is taken off the
--   queue and never leased: it comes back as "" (the node counts scheduler/expired).
-- Guarantees: a request is always in the queue, in delayed or in processing, never in none and
-- never in two; due times and deadlines come from the server clock, so client clocks never
-- decide when a retry is due or a lease expires. A due retry goes behind the requests already
-- waiting in its priority, like a fresh push, and any node may take it. Every copy is written
-- before its source is removed: a write refused half-way (Redis at maxmemory) leaves a request in
-- two places (fetched twice at worst), never in none.
-- Garbage (anyone can write to Redis) never stops the script:
--   * A queue member without a valid "<deliveries>:<priority>:" envelope (none, non-numeric,
--     more than 9 digits of deliveries, |priority| > 131071 = envelope.MAX_PRIORITY) is leased as
--     "1:0:<member>": a member without an envelope is a new request at priority 0 (lib/queue.lua),
--     anything else the node dead-letters without running it (reclaim.lua if it dies first).
--   * A member of delayed is moved to the queue when due whatever it holds (its priority, read
--     from the envelope if any, is clamped to +-131071 so the score stays finite; none = 0); a due
--     time more than a year ahead (+inf included; retries wait at most minutes) counts as due, so
--     garbage there cannot keep the crawl "not idle" forever.
--   * A sequence counter that is not an integer is reset (WRONGTYPE is still raised).
-- A key of the wrong Redis type raises WRONGTYPE: the caller names the key and waits.
-- uses: queue (lib/queue.lua: MAX_PRIORITY, member_priority, queue_push, expired, count_expired)
-- uses: host (lib/host.lua: host_of)
local qtype = ARGV[1]
local count = tonumber(ARGV[2])
local t = redis.call("TIME")
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local deadline = now + tonumber(ARGV[3])
local YEAR = 31536000
pending_open(KEYS[5], KEYS[1])
if KEYS[3] then
  local limit = tonumber(ARGV[4] or "100")
  local due = redis.call("ZRANGEBYSCORE", KEYS[3], "-inf", now, "LIMIT", 0, limit)
  if #due < limit then -- garbage due "never": one O(log n) look-up, empty in normal operation
    local far = redis.call("ZRANGEBYSCORE", KEYS[3], "(" .. string.format("%.6f", now + YEAR), "+inf",
      "LIMIT", 0, limit - #due)
    for _, member in ipairs(far) do due[#due + 1] = member end
  end
  for _, member in ipairs(due) do
    queue_push(qtype, KEYS[1], KEYS[4], member, member_priority(member), false) -- behind, like a fresh push
    redis.call("ZREM", KEYS[3], member)
  end
end
-- read the requests to take, lease them, then remove them from the queue
local popped
if count < 1 then -- ranges below would read 0..-1: everything
  popped = {}
elseif qtype == "priority" then
  popped = redis.call("ZRANGE", KEYS[1], 0, count - 1)
elseif qtype == "fifo" then -- the oldest is at the tail
  local tail = redis.call("LRANGE", KEYS[1], -count, -1)
  popped = {}
  for i = #tail, 1, -1 do popped[#popped + 1] = tail[i] end
else
  popped = redis.call("LRANGE", KEYS[1], 0, count - 1)
end
local leased = {}
for _, member in ipairs(popped) do
  local deliveries, priority = string.match(member, "^(%d+):(%-?%d+):")
  local lease
  if expired(member, now) then
    count_expired(KEYS[6], host_of(member_payload(member) or ""), EXPIRED_FIELDS_MAX)
    lease = nil
    leased[#leased + 1] = ""
  elseif deliveries and #deliveries <= 9 and #priority <= 8 and math.abs(tonumber(priority)) <= MAX_PRIORITY then
    lease = (tonumber(deliveries) + 1) .. string.sub(member, #deliveries + 1)
  else -- not written by us: lease it as is, the node dead-letters it without running it
    lease = "1:0:" .. member
  end
  if lease then
    redis.call("ZADD", KEYS[2], deadline, lease)
    leased[#leased + 1] = lease
  end
end
if #popped > 0 then
  pending_add(-#popped)
  if qtype == "priority" then
    redis.call("ZREMRANGEBYRANK", KEYS[1], 0, #popped - 1)
  elseif qtype == "fifo" then
    redis.call("LTRIM", KEYS[1], 0, -#popped - 1)
  else
    redis.call("LTRIM", KEYS[1], #popped, -1)
  end
end
return leased
