-- release.lua: give leases back to the queue front at once, without counting a delivery
-- (prefetched requests never started, or a node's in-flight work on a forced stop).
-- KEYS[1] processing zset; KEYS[2] queue; KEYS[3] sequence counter
-- ARGV[1] queue type; ARGV[2..] lease members
-- Returns how many were released (a lease already reclaimed or acked is skipped).
-- The copy is written before the lease is removed: a write refused half-way (maxmemory) leaves
-- the request in two places, never in none.
local qtype = ARGV[1]
local SPAN = 68719476736
local released = 0
for i = 2, #ARGV do
  local lease = ARGV[i]
  if redis.call("ZSCORE", KEYS[1], lease) then
    local deliveries, priority, payload = string.match(lease, "^(%d+):(%-?%d+):(.*)$")
    local member = math.max(tonumber(deliveries) - 1, 0) .. ":" .. priority .. ":" .. payload
    if qtype == "priority" then
      local seq = redis.call("INCR", KEYS[3]) % SPAN
      redis.call("ZADD", KEYS[2], -tonumber(priority) * SPAN - seq, member)
    elseif qtype == "fifo" then
      redis.call("RPUSH", KEYS[2], member)
    else
      redis.call("LPUSH", KEYS[2], member)
    end
    redis.call("ZREM", KEYS[1], lease)
    released = released + 1
  end
end
return released
