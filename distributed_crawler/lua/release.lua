-- release.lua: give leases back to the queue front at once, without counting a delivery
-- (prefetched requests never started, or a node's in-flight work on a forced stop).
-- KEYS[1] processing zset; KEYS[2] queue; KEYS[3] sequence counter
-- ARGV[1] queue type; ARGV[2..] lease members
-- KEYS[4] (single queue; host mode KEYS[5], then the single queue KEYS[6]) pending counter
--   (optional; lib/queue.lua pending_open)
-- Returns how many were released (a lease already reclaimed or acked is skipped).
-- The copy is written before the lease is removed: a write refused half-way (maxmemory) leaves
-- the request in two places, never in none.
-- Garbage: a lease without a valid "<deliveries>:<priority>:" envelope (none, non-numeric, more
-- than 9 digits of deliveries, |priority| > 131071) is skipped and left in processing, where
-- reclaim.lua dead-letters it once it expires (pop.lua never hands such a lease out). A sequence
-- counter that is not an integer is reset; a key of the wrong Redis type raises WRONGTYPE.
-- Host mode (ARGV[1] "host", lib/host.lua): KEYS[2] is the ready zset, KEYS[4] the over-budget
-- zset, ARGV[2] / ARGV[3] the host queue / host hash key prefixes, leases from ARGV[4]. A lease goes
-- to the front of its priority in its host's queue (host from the payload's "slot", else its url,
-- else host ""), the host into ready at once (NX: a due time set by its interval stands); a lease
-- of a first delivery gives its page back to the host's budget (`pages` - 1).
-- uses: queue (lib/queue.lua: MAX_PRIORITY, queue_push, make_member, member_payload)
-- uses: host (lib/host.lua: host_of, host_push)
local qtype = ARGV[1]
local released = 0
local first_lease, now = 2, nil
if qtype == "host" then
  local t = redis.call("TIME")
  first_lease, now = 4, tonumber(t[1]) + tonumber(t[2]) / 1000000
end
if qtype == "host" then pending_open(KEYS[5], KEYS[6], KEYS[2], KEYS[4], ARGV[2])
else pending_open(KEYS[4], KEYS[2]) end
for i = first_lease, #ARGV do
  local lease = ARGV[i]
  local deliveries, priority, payload = string.match(lease, "^(%d+):(%-?%d+):(.*)$")
  local p = deliveries and #deliveries <= 9 and #priority <= 8 and tonumber(priority)
  if p and p <= MAX_PRIORITY and p >= -MAX_PRIORITY and redis.call("ZSCORE", KEYS[1], lease) then
    local member = make_member(math.max(tonumber(deliveries) - 1, 0), p, payload)
    if qtype == "host" then -- the front of its priority in its host's queue
      local host = host_of(member_payload(lease) or "")
      if tonumber(deliveries) <= 1 then -- a first delivery: its page goes back to the budget
        pcall(redis.call, "HINCRBY", ARGV[3] .. host, "pages", -1)
      end
      host_push(KEYS[2], KEYS[4], ARGV[2], ARGV[3], KEYS[3], host, member, p, true, now)
    else
      queue_push(qtype, KEYS[2], KEYS[3], member, p, true) -- the front of its priority
    end
    redis.call("ZREM", KEYS[1], lease)
    released = released + 1
  end
end
return released
