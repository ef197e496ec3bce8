-- lib/queue.lua: the queue push shared by enqueue.lua, pop.lua, reclaim.lua and release.lua.
-- Prepended by queue/scripts.py `lua_source` to every script whose header says "-- uses: queue"
-- (still one script text, one SHA, one EVALSHA per call). Local names only:
-- SPAN: 2^36 sequence numbers per priority band.
-- MAX_PRIORITY = envelope.MAX_PRIORITY (131071): |priority| * SPAN stays below 2^53, exact in doubles.
-- A member is "[<deliveries>:<priority>:[<expires_at>:]]<payload>" (queue/envelope.py): the
--   envelope is left out when it would be "0:0:" (a new request, priority 0, no expiry); an expiry
--   is Unix seconds (REQUEST_TTL / meta expires_at). A payload (queue/codec.py: a URL, or JSON
--   starting with "{") never starts with a digit, so a member written before expiry existed
--   ("<deliveries>:<priority>:<json>") reads as "never".
-- member_priority(member): the priority field of the envelope (none = 0).
-- member_payload(member): the payload after the envelope (the member itself without one);
--   member_expires(member): its expiry (nil = never).
-- make_member(deliveries, priority, rest): the member of "<rest>" = "[<expires_at>:]<payload>",
--   its envelope left out when it is "0:0:" and rest does not start with a digit. expired(member, now): true when it expired at server time `now`;
--   count_expired(key, host, cap) adds one to field "expired <host>" of the refused hash (the
--   per-host refusals `dcrawl hosts` shows, bounded like lua/refused.lua: a new field while the hash
--   holds `cap` goes to "expired *").
-- queue_push(qtype, queue, seq_key, member, priority, front) pushes member to the queue key:
--   "priority": ZADD, score -priority * SPAN + seq (behind the requests already waiting in its
--     priority, like a fresh push) or -priority * SPAN - seq when front is true (before them);
--     priority is clamped to +-MAX_PRIORITY so the score stays finite.
--   "fifo": LPUSH (behind), RPUSH when front (the oldest is at the tail); "lifo": LPUSH.
--   The sequence counter seq_key is INCRed; one that is not an integer (or overflowed) is reset
--   to 1, a key of another Redis type still raises WRONGTYPE.
-- The pending counter (SCHEDULER_PENDING_KEY, docs/frontier.md "Counting"): the number of
--   requests waiting in the queue(s) of one spider (single queue and host queues; not delayed, not
--   leased). Every script that moves an entry in or out of a queue calls pending_open once before
--   changing anything; queue_push then counts what it adds and the pops call pending_add(-n) for
--   what they take, in the same atomic script, so the counter cannot drift. A counter that is
--   missing (a frontier written before it existed, or flushed) or not a non-negative integer is
--   rebuilt exactly by pending_open when that is cheap: the single queue (LLEN / ZCARD), plus in
--   host mode the queues of the hosts in ready and over budget if they are at most
--   PENDING_RECOUNT_MAX_HOSTS; more hosts: the counter stays missing and readers report "unknown"
--   until the frontier has drained to that many hosts. A counter key of another Redis type is left
--   alone (not kept; readers report "unknown").
local SPAN = 68719476736
local MAX_PRIORITY = 131071

local function member_priority(member)
  return tonumber(string.match(member, "^%d+:(%-?%d+):") or "0")
end

local function member_payload(member)
  local rest = string.match(member, "^%d+:%-?%d+:(.*)$")
  if not rest then return member end
  return string.match(rest, "^%d+:(.*)$") or rest
end

local function make_member(deliveries, priority, rest)
  if tonumber(deliveries) == 0 and tonumber(priority) == 0 and not string.match(rest, "^%d") then return rest end
  return deliveries .. ":" .. priority .. ":" .. rest
end

local function member_expires(member)
  return tonumber(string.match(member, "^%d+:%-?%d+:(%d+):") or "")
end

local function expired(member, now)
  local at = member_expires(member)
  return at ~= nil and at <= now
end

local EXPIRED_FIELDS_MAX = 10000 -- core/refusals.py COUNTED_FIELDS_MAX: the refused hash's bound

local function count_expired(key, host, cap)
  if not key then return end
  local field = "expired " .. (host ~= "" and host or "?")
  local ok, known = pcall(redis.call, "HEXISTS", key, field)
  if not ok then return end -- a refused key of another type: the count is dropped (the stat stays)
  if known == 0 and redis.call("HLEN", key) >= cap then field = "expired *" end
  redis.call("HINCRBY", key, field, 1)
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

local PENDING = nil -- the counter key once pending_open found (or rebuilt) it; nil: not kept in this call
local PENDING_RECOUNT_MAX_HOSTS = 10000

local function pending_add(n)
  if PENDING and n ~= 0 then redis.call("INCRBY", PENDING, n) end
end

local function queue_size(key)
  local t = redis.call("TYPE", key)["ok"]
  if t == "list" then return redis.call("LLEN", key) end
  if t == "zset" then return redis.call("ZCARD", key) end
  return 0
end

-- The pending requests counted entry by entry, without writing: single: the single queue (or
-- nil); ready, over, qprefix: host mode (or nil). nil when the host mode has more than
-- PENDING_RECOUNT_MAX_HOSTS hosts (too many lookups for one script: "unknown").
local function pending_recount(single, ready, over, qprefix)
  local n = single and queue_size(single) or 0
  if ready then
    local hosts, seen = {}, {}
    for _, zkey in ipairs({ready, over}) do
      if redis.call("TYPE", zkey)["ok"] == "zset" then
        if #hosts + redis.call("ZCARD", zkey) > PENDING_RECOUNT_MAX_HOSTS then return nil end
        for _, host in ipairs(redis.call("ZRANGE", zkey, 0, -1)) do
          if not seen[host] then
            seen[host] = true
            hosts[#hosts + 1] = host
          end
        end
      end
    end
    -- each host's queue and its list (lib/host.lua host_list: the queue key and "/")
    for _, host in ipairs(hosts) do n = n + queue_size(qprefix .. host) + queue_size(qprefix .. host .. "/") end
  end
  return n
end

-- key: the counter (nil: not kept); single: the single queue; ready, over, qprefix: host mode (or nil)
local function pending_open(key, single, ready, over, qprefix)
  if not key then return end
  local ok, value = pcall(redis.call, "GET", key)
  if not ok then return end -- another Redis type: not kept, readers report unknown
  if value and #value <= 15 and string.match(value, "^%d+$") then
    PENDING = key
    return
  end
  local n = pending_recount(single, ready, over, qprefix)
  if not n then return end -- unknown
  redis.call("SET", key, n)
  PENDING = key
end

local function queue_push(qtype, queue, seq_key, member, priority, front)
  local added = 1
  if qtype == "priority" then
    if priority > MAX_PRIORITY then priority = MAX_PRIORITY
    elseif priority < -MAX_PRIORITY then priority = -MAX_PRIORITY end
    if front then
      added = redis.call("ZADD", queue, -priority * SPAN - next_seq(seq_key), member)
    else
      added = redis.call("ZADD", queue, -priority * SPAN + next_seq(seq_key), member)
    end
  elseif qtype == "fifo" and front then
    redis.call("RPUSH", queue, member)
  else
    redis.call("LPUSH", queue, member)
  end
  pending_add(added) -- a member already queued (ZADD updates its score) is not counted twice
end
-- end of lib/queue.lua
