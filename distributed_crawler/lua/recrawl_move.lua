-- recrawl_move.lua: due revisits go back into the frontier, atomically (docs/recrawl.md).
-- KEYS[1] schedule zset: fingerprint -> due time (Redis server time, seconds)
-- KEYS[2] state hash: fingerprint -> revisit state (lib/recrawl.lua)
-- KEYS[3] the queue: host mode the ready zset (host -> due time), else the single queue
--   (SCHEDULER_QUEUE_KEY: zset for "priority", list for "fifo"/"lifo")
-- KEYS[4] sequence counter (orders pushes inside a priority)
-- KEYS[5] host mode: the over-budget zset
-- KEYS[6] pending counter, KEYS[7] the single queue (optional; lib/queue.lua pending_open)
-- ARGV[1] queue type: "host" | "priority" | "fifo" | "lifo"
-- ARGV[2] max number of due URLs to move
-- ARGV[3] pending seconds: a moved URL stays in the schedule, due again at now + this, in case
--   its fetch never reports back (dead-lettered, storage never reached); the fetch's result
--   (recrawl_record.lua) sets its real next due time
-- ARGV[4] doorbell channel ("" = none), PUBLISHed to when something was pushed
-- ARGV[5] host queue key prefix, ARGV[6] host hash key prefix (host mode: prefix .. host = the key,
--   undeclared keys on the same Cluster slot, see lib/host.lua)
-- Returns {moved, dropped, next_due, ended}: next_due = seconds until the next URL is due as a string
--   ("-1": the schedule is empty); ended = URLs whose schedule ended (lib/recrawl.lua `ends`) more
--   than twice the pending seconds ago, removed instead of moved: their last visit never reported
--   back even after one more try, so a URL with an end never outlives it by more than that.
-- Guarantees: each due URL's stored member is pushed to its host's queue (behind its priority, like
--   a fresh push; it bypasses the seen-filter on purpose) and its due time pushed back in the same
--   atomic step: a revisit is in the schedule exactly once, never lost, never moved by two nodes.
--   A member still waiting in its host queue (or the "priority" queue) is left where it is, not
--   pushed behind again; the list queues ("fifo"/"lifo") cannot tell, so a revisit still waiting
--   there after the pending seconds is pushed a second time. Due times come from the server clock.
-- Garbage: a fingerprint whose state is missing or unreadable leaves the schedule and the state
--   hash (counted in `dropped`); a key of the wrong Redis type raises WRONGTYPE.
-- uses: queue (lib/queue.lua: member_priority, queue_push)
-- uses: host (lib/host.lua: host_of, host_push)
-- uses: recrawl (lib/recrawl.lua: parse_state)
-- uses: doorbell (lib/doorbell.lua: doorbell_ring)
local qtype, limit, pending, doorbell = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local t = redis.call("TIME")
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local moved, dropped, ended = 0, 0, 0
if qtype == "host" then pending_open(KEYS[6], KEYS[7], KEYS[3], KEYS[5], ARGV[5])
else pending_open(KEYS[6], KEYS[3]) end
local due = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", now, "LIMIT", 0, limit)
for _, fp in ipairs(due) do
  local state = parse_state(redis.call("HGET", KEYS[2], fp))
  if not state then
    redis.call("ZREM", KEYS[1], fp)
    redis.call("HDEL", KEYS[2], fp)
    dropped = dropped + 1
  elseif state.ends > 0 and now > state.ends + 2 * pending then
    redis.call("ZREM", KEYS[1], fp)
    redis.call("HDEL", KEYS[2], fp)
    ended = ended + 1
  else
    local member = state.member
    if qtype == "host" then
      local host = host_of(member_payload(member) or "")
      local here = member_local(member, host)
      local ok, waiting = pcall(redis.call, "ZSCORE", ARGV[5] .. host, here)
      if not (ok and waiting) then -- or in its host's list (lib/host.lua host_list)
        ok, waiting = pcall(redis.call, "LPOS", host_list(ARGV[5] .. host), here)
      end
      if not (ok and waiting) then -- still waiting there (the pending time passed): keeps its place
        host_push(KEYS[3], KEYS[5], ARGV[5], ARGV[6], KEYS[4], host, member, member_priority(member), false, now)
      end
    elseif qtype ~= "priority" or not redis.call("ZSCORE", KEYS[3], member) then
      queue_push(qtype, KEYS[3], KEYS[4], member, member_priority(member), false)
    end
    redis.call("ZADD", KEYS[1], now + pending, fp)
    moved = moved + 1
  end
end
if moved > 0 then doorbell_ring(doorbell, moved, KEYS[1], -1) end
local first = redis.call("ZRANGE", KEYS[1], 0, 0, "WITHSCORES")
local next_due = "-1"
if #first > 0 then next_due = string.format("%.3f", math.max(0, tonumber(first[2]) - now)) end
return {moved, dropped, next_due, ended}
