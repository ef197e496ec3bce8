-- pop.lua: take up to N requests and lease them, atomically.
-- KEYS[1] queue (zset for "priority", list for "fifo"/"lifo")
-- KEYS[2] processing zset: member -> lease deadline (Redis server time, seconds)
-- ARGV[1] queue type: "priority" | "fifo" | "lifo"
-- ARGV[2] max number of requests to take
-- ARGV[3] lease length in seconds
-- Returns the leased members ("<deliveries>:<priority>:<json>", deliveries counted up by one).
-- Guarantees: a request is always in the queue or in processing, never in neither; the deadline
-- comes from the server clock, so client clocks never decide when a lease expires.
local qtype = ARGV[1]
local count = tonumber(ARGV[2])
local t = redis.call("TIME")
local deadline = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[3])
local popped
if qtype == "priority" then
  popped = {}
  local flat = redis.call("ZPOPMIN", KEYS[1], count)
  for i = 1, #flat, 2 do popped[#popped + 1] = flat[i] end
elseif qtype == "fifo" then
  popped = redis.call("RPOP", KEYS[1], count) or {}
else
  popped = redis.call("LPOP", KEYS[1], count) or {}
end
local leased = {}
for _, member in ipairs(popped) do
  local deliveries, rest = string.match(member, "^(%d+):(.*)$")
  local lease
  if deliveries then
    lease = (tonumber(deliveries) + 1) .. ":" .. rest
  else -- not written by us: lease it as is, the node dead-letters it without running it
    lease = "1:0:" .. member
  end
  redis.call("ZADD", KEYS[2], deadline, lease)
  leased[#leased + 1] = lease
end
return leased
