-- reclaim.lua: return expired leases to the front of their priority, or dead-letter them.
-- KEYS[1] processing zset (score = lease deadline, server time)
-- KEYS[2] queue (zset for "priority", list for "fifo"/"lifo")
-- KEYS[3] failed list (dead letters, JSON)
-- KEYS[4] sequence counter
-- ARGV[1] queue type; ARGV[2] max deliveries; ARGV[3] max leases to reclaim in this call;
-- ARGV[4] failed list cap; ARGV[5] name of the node running the reclaim
-- Returns {requeued, dead_lettered}.
-- Guarantees: each expired lease is moved exactly once (the script is atomic, so two reclaimers
-- running at once split the work and never double it); a request delivered max times goes to
-- the failed list with its payload instead of being redelivered forever (poison protection).
-- The copy is written before the lease is removed: a write refused half-way (maxmemory) leaves
-- the request in two places, never in none.
local qtype = ARGV[1]
local max_deliveries = tonumber(ARGV[2])
local t = redis.call("TIME")
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local expired = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", now, "LIMIT", 0, tonumber(ARGV[3]))
local SPAN = 68719476736
local requeued, dead = 0, 0
for _, lease in ipairs(expired) do
  local deliveries, priority, payload = string.match(lease, "^(%d+):(%-?%d+):(.*)$")
  deliveries = tonumber(deliveries)
  if deliveries >= max_deliveries then
    local ok, decoded = pcall(cjson.decode, payload)
    local url = (ok and type(decoded) == "table" and decoded["url"]) or ""
    redis.call("LPUSH", KEYS[3], cjson.encode({
      url = url, reason = "lease expired " .. deliveries .. " times (node died or hung while processing)",
      attempts = deliveries, priority = tonumber(priority), node = ARGV[5], time = now,
      payload = payload, source = "reclaim",
    }))
    redis.call("LTRIM", KEYS[3], 0, tonumber(ARGV[4]) - 1)
    dead = dead + 1
  else
    local member = deliveries .. ":" .. priority .. ":" .. payload
    if qtype == "priority" then
      local seq = redis.call("INCR", KEYS[4]) % SPAN
      redis.call("ZADD", KEYS[2], -tonumber(priority) * SPAN - seq, member)
    elseif qtype == "fifo" then
      redis.call("RPUSH", KEYS[2], member)
    else
      redis.call("LPUSH", KEYS[2], member)
    end
    requeued = requeued + 1
  end
  redis.call("ZREM", KEYS[1], lease)
end
return {requeued, dead}
