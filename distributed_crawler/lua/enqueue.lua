-- enqueue.lua: dedup check+add and push, for a batch of requests, in one round trip.
-- KEYS[1] queue (zset for "priority", list for "fifo"/"lifo")
-- KEYS[2] dupefilter (set of hex fingerprints)
-- KEYS[3] sequence counter (FIFO order inside one priority)
-- KEYS[4] processing zset (leases handed over by this call are removed from it)
-- ARGV[1] queue type: "priority" | "fifo" | "lifo"
-- ARGV[2] n = number of requests
-- ARGV[3] doorbell channel: PUBLISHed to when something was pushed, so idle nodes wake at once
--         ("" = none); then n triples: fingerprint (hex, "" = no dedup), dont_filter ("1"/"0"), member
--         where member = "<deliveries>:<priority>:<json>"
-- ARGV[4 + 3n ...] lease members to remove from processing (redirect/retry hand-over)
-- Returns a table of n integers: 1 pushed, 0 filtered as a duplicate.
-- Guarantees: a fingerprint is "new" exactly once across all nodes; a handed-over lease disappears
-- in the same atomic step that stores its successor, so the request is never in neither place.
local qtype = ARGV[1]
local n = tonumber(ARGV[2])
local result = {}
local SPAN = 68719476736 -- 2^36 sequence numbers per priority band
for i = 0, n - 1 do
  local fp = ARGV[4 + 3 * i]
  local dont_filter = ARGV[5 + 3 * i] == "1"
  local member = ARGV[6 + 3 * i]
  local new = fp ~= "" and redis.call("SADD", KEYS[2], fp) == 1
  if new or dont_filter then
    if qtype == "priority" then
      local priority = tonumber(string.match(member, "^%d+:(%-?%d+):"))
      local seq = redis.call("INCR", KEYS[3]) % SPAN
      redis.call("ZADD", KEYS[1], -priority * SPAN + seq, member)
    else
      redis.call("LPUSH", KEYS[1], member)
    end
    result[#result + 1] = 1
  else
    result[#result + 1] = 0
  end
end
local pushed = 0
for _, r in ipairs(result) do pushed = pushed + r end
if pushed > 0 and ARGV[3] ~= "" then
  redis.call("PUBLISH", ARGV[3], pushed)
end
local first_ack = 4 + 3 * n
if #ARGV >= first_ack then
  redis.call("ZREM", KEYS[4], unpack(ARGV, first_ack, #ARGV))
end
return result
