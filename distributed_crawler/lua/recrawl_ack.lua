-- recrawl_ack.lua: finished requests acked together with the revisit records of their pages, so a
-- lease is never removed before the record of its page is written (one call per batch of acks).
-- KEYS[1] processing zset (the leases), KEYS[2] schedule zset, KEYS[3] state hash (recrawl_record.lua's
--   KEYS[1] and KEYS[2], on the same hash tag as KEYS[1])
-- ARGV[1] n, the number of records; ARGV[2 .. 1 + 11n] n groups of recrawl_record.lua's 11 ARGV
-- ARGV[2 + 11n ..] the leases to remove (those with a record and any others)
-- Returns {acked, reply 1, ..., reply n}: acked = leases removed; reply i = recrawl_record.lua's reply
--   for record i, or {"err", message} when Redis refused it (a key of another type): the record is
--   lost, as a refused recrawl_record.lua call is, and the ack still happens (the page is done).
-- Guarantees: the records are written before the leases are removed, in one script: either both or
--   neither (a lost connection or NOSCRIPT leaves the leases held and the page is recorded later).
-- uses: recrawl (lib/recrawl.lua: parse_state, format_state, record_visit)
local n = tonumber(ARGV[1]) or 0
local t = redis.call("TIME")
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local replies = {0}
for i = 0, n - 1 do
  local a = {}
  for j = 1, 11 do a[j] = ARGV[2 + 11 * i + j - 1] end
  local ok, reply = pcall(record_visit, KEYS[2], KEYS[3], a, now)
  if not ok then
    reply = {"err", type(reply) == "table" and tostring(reply.err) or tostring(reply)}
  end
  replies[#replies + 1] = reply
end
local acked = 0
for i = 2 + 11 * n, #ARGV do
  acked = acked + redis.call("ZREM", KEYS[1], ARGV[i])
end
replies[1] = acked
return replies
