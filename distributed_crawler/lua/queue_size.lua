-- queue_size.lua: how many requests one spider has waiting in Redis, whatever the queue mode:
-- what `len(scheduler)`, "Resuming crawl (N requests scheduled)" and has_pending_requests report.
-- KEYS[1] single queue of the non-fair modes (SCHEDULER_QUEUE_KEY; list or zset, or absent)
-- KEYS[2] delayed zset (retries waiting for their backoff)
-- KEYS[3] ready zset of host mode (hosts with pending requests, not over budget)
-- KEYS[4] processing zset (leased by any node)
-- ARGV[1] host queue key prefix (prefix .. host = the key; undeclared keys on the same Cluster
--   slot as KEYS, see lib/host.lua), ARGV[2] how many ready hosts to sum at most
-- Returns {queued, delayed, leased, hosts_summed, hosts_ready}: queued = the single queue plus the
--   queues of the first ARGV[2] ready hosts (hosts over budget are kept, not served: not counted).
-- Read-only; a key of another type counts 0, so this script never raises WRONGTYPE.
local function size(key)
  local t = redis.call("TYPE", key)["ok"]
  if t == "list" then return redis.call("LLEN", key) end
  if t == "zset" then return redis.call("ZCARD", key) end
  return 0
end

local queued = size(KEYS[1])
local hosts_ready = 0
local summed = 0
if redis.call("TYPE", KEYS[3])["ok"] == "zset" then
  hosts_ready = redis.call("ZCARD", KEYS[3])
  local limit = tonumber(ARGV[2]) or 0
  if limit > 0 then
    for _, host in ipairs(redis.call("ZRANGE", KEYS[3], 0, limit - 1)) do
      queued = queued + size(ARGV[1] .. host)
      summed = summed + 1
    end
  end
end
return {queued, size(KEYS[2]), size(KEYS[4]), summed, hosts_ready}
