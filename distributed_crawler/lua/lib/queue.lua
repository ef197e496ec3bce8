-- lib/queue.lua: the queue push shared by enqueue.lua, pop.lua, reclaim.lua and release.lua.
-- Prepended by queue/scripts.py `lua_source` to every script whose header says "-- uses: queue"
-- (still one script text, one SHA, one EVALSHA per call). Local names only:
-- SPAN: 2^36 sequence numbers per priority band.
-- MAX_PRIORITY = envelope.MAX_PRIORITY (131071): |priority| * SPAN stays below 2^53, exact in doubles.
-- member_priority(member): the priority field of "<deliveries>:<priority>:..." (none = 0).
-- queue_push(qtype, queue, seq_key, member, priority, front) pushes member to the queue key:
--   "priority": ZADD, score -priority * SPAN + seq (behind the requests already waiting in its
--     priority, like a fresh push) or -priority * SPAN - seq when front is true (before them);
--     priority is clamped to +-MAX_PRIORITY so the score stays finite.
--   "fifo": LPUSH (behind), RPUSH when front (the oldest is at the tail); "lifo": LPUSH.
--   The sequence counter seq_key is INCRed; one that is not an integer (or overflowed) is reset
--   to 1, a key of another Redis type still raises WRONGTYPE.
local SPAN = 68719476736
local MAX_PRIORITY = 131071

local function member_priority(member)
  return tonumber(string.match(member, "^%d+:(%-?%d+):") or "0")
end

local function next_seq(seq_key)
  local seq = redis.pcall("INCR", seq_key)
  if type(seq) == "table" then -- not an integer (or overflowed): restart the counter
    redis.call("GET", seq_key) -- raises WRONGTYPE for a key of another type instead of masking it
    redis.call("SET", seq_key, 1)
    seq = 1
  end
  return seq % SPAN
end

local function queue_push(qtype, queue, seq_key, member, priority, front)
  if qtype == "priority" then
    if priority > MAX_PRIORITY then priority = MAX_PRIORITY
    elseif priority < -MAX_PRIORITY then priority = -MAX_PRIORITY end
    if front then
      redis.call("ZADD", queue, -priority * SPAN - next_seq(seq_key), member)
    else
      redis.call("ZADD", queue, -priority * SPAN + next_seq(seq_key), member)
    end
  elseif qtype == "fifo" and front then
    redis.call("RPUSH", queue, member)
  else
    redis.call("LPUSH", queue, member)
  end
end
-- end of lib/queue.lua
