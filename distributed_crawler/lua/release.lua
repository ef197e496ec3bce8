-- release.lua: give leases back to the queue front at once, without counting a delivery
-- (prefetched requests never started, or a node's in-flight work on a forced stop).
-- KEYS[1] processing zset; KEYS[2] queue; KEYS[3] sequence counter
-- ARGV[1] queue type; ARGV[2..] lease members
-- Returns how many were released (a lease already reclaimed or acked is skipped).
-- The copy is written before the lease is removed: a write refused half-way (maxmemory) leaves
-- the request in two places, never in none.
-- Garbage: a lease without a valid "<deliveries>:<priority>:" envelope (none, non-numeric, more
-- than 9 digits of deliveries, |priority| > 131071) is skipped and left in processing, where
-- reclaim.lua dead-letters it once it expires (pop.lua never hands such a lease out). A sequence
-- counter that is not an integer is reset; a key of the wrong Redis type raises WRONGTYPE.
-- uses: queue (lib/queue.lua: MAX_PRIORITY, queue_push)
local qtype = ARGV[1]
local released = 0
for i = 2, #ARGV do
  local lease = ARGV[i]
  local deliveries, priority, payload = string.match(lease, "^(%d+):(%-?%d+):(.*)$")
  local p = deliveries and #deliveries <= 9 and #priority <= 8 and tonumber(priority)
  if p and p <= MAX_PRIORITY and p >= -MAX_PRIORITY and redis.call("ZSCORE", KEYS[1], lease) then
    local member = math.max(tonumber(deliveries) - 1, 0) .. ":" .. p .. ":" .. payload
    queue_push(qtype, KEYS[2], KEYS[3], member, p, true) -- the front of its priority
    redis.call("ZREM", KEYS[1], lease)
    released = released + 1
  end
end
return released
