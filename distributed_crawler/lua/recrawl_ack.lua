-- recrawl_ack.lua: finished requests acked together with the revisit records of their pages, so a
-- lease is never removed before the record of its page is written (one call per batch of acks).
-- KEYS[1] processing zset (the leases), KEYS[2] schedule zset, KEYS[3] state hash (recrawl_record.lua's
--   KEYS[1] and KEYS[2], on the same hash tag as KEYS[1])
-- ARGV[1] n, the number of records; ARGV[2 .. 1 + 11n] n groups of recrawl_record.lua's 11 ARGV
-- ARGV[2 + 11n ..] the leases to remove (those with a record and any others)
-- Returns {acked, reply 1, ..., reply n}: acked = leases removed; reply i = recrawl_record.lua's reply
--   for record i, or {"err", message} when Redis refused it (a key of another type): the record is
--   lost, as a refused recrawl_record.lua call is, and the ack still happens (the page is done).
--   A full Redis (maxmemory) is no refusal but a wait: the script ends with Redis's OOM error, no
--   lease removed, and the node sends it again once Redis has room (the record is not lost).
-- Guarantees: the records are written before the leases are removed, in one script: either both or
--   neither (a lost connection or NOSCRIPT leaves the leases held and the page is recorded later).
--   Redis refuses a script's write for maxmemory only on its first write, so an OOM error means
--   nothing was written yet.
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
    local message = type(reply) == "table" and tostring(reply.err) or tostring(reply)
    if string.find(message, "^%-?OOM") then
      return redis.error_reply(message)
    end
    reply = {"err", message}
  end
  replies[#replies + 1] = reply
end
local acked = 0
for i = 2 + 11 * n, #ARGV do
  acked = acked + redis.call("ZREM", KEYS[1], ARGV[i])
end
replies[1] = acked
return replies
