-- enqueue.lua: dedup check+add and queue push for a batch of requests, in one round trip.
-- KEYS[1] queue (zset for "priority", list for "fifo"/"lifo")
-- KEYS[2] sequence counter (FIFO order inside one priority)
-- KEYS[3] processing zset (leases handed over by this call are removed from it)
-- KEYS[4] delayed zset: member -> due time (Redis server time); retries wait there (pop.lua
--   moves them back to the queue when due)
-- KEYS[5] dupefilter: a set ("set"), the layer meta hash ("bitmap") or a RedisBloom key
-- KEYS[6..] "bitmap" only: every piece of every layer, layer by layer (see bloom.py)
-- KEYS[6] (optional) pending counter (lib/queue.lua pending_open); with it the bitmap pieces
--   start at KEYS[7] (without it at KEYS[6]); present when KEYS holds one key more than the pieces
--   need (host mode, below: two, the counter and the single queue)
-- KEYS[7] (optional, only after the pending counter; host mode: KEYS[9], after the single queue)
--   the failed list the refused entries' dead letters go to (frontier/deadletters.py); present when
--   KEYS holds one key more than the counter and the pieces need; the pieces then start one later
-- ARGV[1] queue type: "priority" | "fifo" | "lifo"
-- ARGV[2] n = number of requests
-- ARGV[3] doorbell channel, PUBLISHed to when something was pushed ("" = none); the message is
--   "<requests queued> <hash tag of KEYS[3]> <sequence counter KEYS[2] after the push>" (the tag
--   names the shard that has work; a lease that read the counter at or past it saw the push)
-- ARGV[4] dedup mode: "set" | "bitmap" | "redisbloom"
-- ARGV[5] number of bitmap layers the caller passed pieces for
-- ARGV[6] action: "push" (dedup and push) | "add" (dedup only) | "check" (read only)
-- then n quadruples from ARGV[7]: fingerprint (hex, "" = no dedup), dont_filter ("1"/"0"),
--   delay in seconds ("0" = push to the queue now; > 0 = ZADD to delayed, due at server time +
--   delay), member (queue/envelope.py: "[<deliveries>:<priority>:[<expires_at>:]]<payload>"); then lease members to remove
--   from processing.
-- A refused entry (a request admission or a trap rule refused, core/outbox.py) has dont_filter
--   "r", the failed list's cap in place of the delay and its dead letter (JSON) as member: it is
--   never pushed; with a fingerprint the fingerprint is added and the letter LPUSHed to the failed
--   list only if new (a link is dead-lettered once cluster-wide), without one the letter always;
--   the list is trimmed as frontier/deadletters.py trims it (LTRIM 0 cap-1). r = 1 when its letter
--   was written. The leases removed at the end include those handed over to refused entries:
--   removed in the step that writes their letters.
-- Returns {code, r1, ..., rp}: r = 1 new (pushed unless "check"), 0 seen before. code 0: all n
--   done; 1: the newest bitmap layer is full, add a layer (bloom_grow.lua) and send the rest
--   again; 2: the caller's layer list is stale, reread the meta hash and send everything again;
--   3 ("bitmap" only): the dupefilter meta hash KEYS[5] is corrupt (a "layers" or L<i>:m / k /
--   pbits / cap / pieces / n field that is not a decimal integer in range, or pieces that do not
--   cover m bits), nothing was written: reread will not help, an operator must reset the filter
--   (`dcrawl dedup reset SPIDER` or `redis-cli del` the meta hash and its pieces).
-- Guarantees: a fingerprint is "new" exactly once across all nodes; a handed-over lease
-- disappears in the same atomic step that stores its successor (in the queue or in delayed);
-- a fingerprint is marked seen only after its request is stored, so a write refused half-way
-- (WRONGTYPE, maxmemory: Lua does not roll back) never leaves a seen URL that is in no queue.
-- Garbage: the meta hash is checked before anything is written (code 3 above); a sequence
-- counter that is not an integer is reset; a member whose priority field is missing or out of
-- range is pushed with its priority clamped to +-131071 (none = 0). A key of the wrong Redis
-- type raises WRONGTYPE: the caller names the key and waits.
-- Host mode (ARGV[1] "host", lib/host.lua): KEYS[1] is the ready zset (host -> due time) and
--   KEYS[6] the over-budget zset, optionally KEYS[7] the pending counter and KEYS[8] the single
--   queue; the bitmap pieces then start at KEYS[9] (without the counter at KEYS[7]); ARGV[7] host queue key
--   prefix, ARGV[8] host hash key prefix (prefix .. host = the key: undeclared keys on the same
--   Cluster slot, see lib/host.lua); the entries from ARGV[9] are 8-tuples: the four above, then
--   slot ("" = read "slot", else the url's host, from the member's payload), interval in
--   seconds, page budget and in-flight cap (-1 = none; "" = leave the stored value). A request goes
--   to its host's queue (zset scored like "priority"; an https URL of the host stored as its path,
--   lib/host.lua member_local), the host into ready at max(now, until) unless
--   it is there already or over budget; `iv` / `max` / `cap` of the host hash are written only when
--   they change.
-- uses: queue (lib/queue.lua: member_priority, member_payload, queue_push)
-- uses: host (lib/host.lua: host_of, host_push, num)
-- uses: doorbell (lib/doorbell.lua: doorbell_ring)
local qtype, n, doorbell, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local action = ARGV[6]
local host_mode = qtype == "host"
local first_arg, stride, first_piece = 7, 4, 6
if host_mode then first_arg, stride, first_piece = 9, 8, 7 end
local MAX_LAYERS = 64
local MAX_K = 30 -- bloom.MAX_K: keeps (h1 + i*h2) below 2^53, exact in doubles
local MAX_PBITS = 4294967296 -- GETBIT/SETBIT offsets stay below 2^32

-- a field of the meta hash as an integer in [min, max], or nil (missing, garbage, NaN, inf...)
local function int(value, min, max)
  if type(value) ~= "string" or #value > 15 or not string.match(value, "^%d+$") then return nil end
  local v = tonumber(value)
  if v < min or v > max then return nil end
  return v
end

local counter_keys = host_mode and 2 or 1 -- the pending counter (and, host mode, the single queue)
local layers, meta, pieces_total = 0, {}, 0
local L = {} -- layer parameters, read once: m bits, k hashes, bits per piece, capacity, KEYS index of piece 0
if mode == "bitmap" then
  local flat = redis.call("HGETALL", KEYS[5])
  for i = 1, #flat, 2 do meta[flat[i]] = flat[i + 1] end
  layers = int(meta["layers"] or "0", 0, MAX_LAYERS)
  if not layers then return {3} end
  if layers ~= tonumber(ARGV[5]) then return {2} end
  if layers == 0 then return {1} end
  local idx = 0 -- pieces counted from the first one; shifted below when the counter keys come first
  for i = 0, layers - 1 do
    local p = "L" .. i .. ":"
    local layer = {m = int(meta[p .. "m"], 1, 2 ^ 52), k = int(meta[p .. "k"], 1, MAX_K),
                   pbits = int(meta[p .. "pbits"], 1, MAX_PBITS), cap = int(meta[p .. "cap"], 1, 2 ^ 52),
                   first = idx}
    local pieces = int(meta[p .. "pieces"], 1, 1000000)
    if not (layer.m and layer.k and layer.pbits and layer.cap and pieces)
        or layer.m > layer.pbits * pieces then
      return {3}
    end
    L[i] = layer
    idx = idx + pieces
  end
  pieces_total = idx
end
-- the keys between the fixed ones and the pieces: none, or the pending counter (and the single queue)
local extra = #KEYS - (first_piece - 1) - pieces_total
if mode == "bitmap" then
  if extra ~= 0 and extra ~= counter_keys and extra ~= counter_keys + 1 then
    return {2} -- the caller passed another layout's pieces
  end
  for i = 0, layers - 1 do L[i].first = L[i].first + first_piece + extra end
end
local failed = nil -- the failed list of the refused entries' dead letters
if extra == counter_keys + 1 then failed = KEYS[first_piece + counter_keys] end
if extra == counter_keys or failed then
  if host_mode then pending_open(KEYS[7], KEYS[8], KEYS[1], KEYS[6], ARGV[7])
  else pending_open(KEYS[6], KEYS[1]) end
end

-- bit i of a fingerprint in a layer: (h1 + i*h2) mod m by double hashing, exact in doubles
local function bit(layer, h1, h2, i)
  local m = layer.m
  local pos = (h1 + i * h2) % m
  if pos < 0 then pos = pos + m elseif pos >= m then pos = pos - m end
  local piece = math.floor(pos / layer.pbits)
  return KEYS[layer.first + piece], pos - piece * layer.pbits
end

local function hashes(fp)
  local h2 = tonumber(string.sub(fp, 13, 24), 16)
  if h2 == 0 then h2 = 1 end
  return tonumber(string.sub(fp, 1, 12), 16), h2
end

local function bitmap_seen(h1, h2)
  for i = 0, layers - 1 do
    local layer, all = L[i], true
    for j = 0, layer.k - 1 do
      local key, offset = bit(layer, h1, h2, j)
      if redis.call("GETBIT", key, offset) == 0 then all = false break end
    end
    if all then return true end
  end
  return false
end

local cur = layers - 1
local cur_n = 0
if mode == "bitmap" then
  cur_n = int(meta["L" .. cur .. ":n"] or "0", 0, 2 ^ 52)
  if not cur_n then return {3} end
end
local added = 0
local queued = 0 -- pushed to the queue now (not delayed): what the doorbell announces
local failed_cap = nil -- set once a dead letter is written: the failed list is trimmed to it

local function bitmap_add(h1, h2)
  local layer = L[cur]
  for j = 0, layer.k - 1 do
    local key, offset = bit(layer, h1, h2, j)
    redis.call("SETBIT", key, offset, 1)
  end
  cur_n = cur_n + 1
  added = added + 1
end

local function finish(code, result)
  if added > 0 then redis.call("HSET", KEYS[5], "L" .. cur .. ":n", cur_n) end
  if failed_cap then redis.call("LTRIM", failed, 0, failed_cap - 1) end
  if queued > 0 and doorbell ~= "" then
    local ok, seq = pcall(redis.call, "GET", KEYS[2])
    doorbell_ring(doorbell, queued, KEYS[3], ok and seq or -1)
  end
  table.insert(result, 1, code)
  return result
end

local now = nil
local function server_now()
  if not now then
    local t = redis.call("TIME")
    now = tonumber(t[1]) + tonumber(t[2]) / 1000000
  end
  return now
end

-- host mode: write the host's interval / budget / in-flight cap when they differ from the stored ones
local configured = {}
local function configure(host, iv, budget, cap)
  if configured[host] then return end
  configured[host] = true
  local hkey = ARGV[8] .. host
  local ok, stored = pcall(redis.call, "HMGET", hkey, "iv", "max", "cap")
  if not ok then return end -- a hash of the wrong type: left alone (lib/host.lua reads defaults)
  local given = {tonumber(iv), tonumber(budget), tonumber(cap)}
  for i, field in ipairs({"iv", "max", "cap"}) do
    if given[i] and num(stored[i], -1) ~= given[i] then redis.call("HSET", hkey, field, given[i]) end
  end
end

if not failed then -- checked before anything is written: a caller's mistake, not half a batch
  for i = 0, n - 1 do
    if ARGV[first_arg + stride * i + 1] == "r" then
      return redis.error_reply("enqueue.lua: refused entries need the failed list key (KEYS, after the pending counter)")
    end
  end
end

local result = {}
for i = 0, n - 1 do
  local base = first_arg + stride * i
  local fp = ARGV[base]
  local refused = ARGV[base + 1] == "r"
  local dont_filter = ARGV[base + 1] == "1" or (refused and fp == "")
  local delay = tonumber(ARGV[base + 2])
  local member = ARGV[base + 3]
  local new, h1, h2 = false, nil, nil
  if fp ~= "" then -- read first: the fingerprint is remembered only once its request is stored
    if mode == "set" then new = redis.call("SISMEMBER", KEYS[5], fp) == 0
    elseif mode == "redisbloom" then new = redis.call("BF.EXISTS", KEYS[5], fp) == 0
    else
      h1, h2 = hashes(fp)
      new = not bitmap_seen(h1, h2)
      if new and action ~= "check" and cur_n >= L[cur].cap then return finish(1, result) end
    end
  end
  local pushed = false
  if refused then
    if action ~= "check" and (new or dont_filter) then -- its dead letter instead of a push
      redis.call("LPUSH", failed, member)
      failed_cap = math.floor(delay)
      pushed = true
    end
  elseif action == "push" and (new or dont_filter) then
    local host = nil
    if host_mode then
      host = ARGV[base + 4]
      if host == "" then host = host_of(member_payload(member) or member) end
      configure(host, ARGV[base + 5], ARGV[base + 6], ARGV[base + 7])
    end
    if delay > 0 then
      redis.call("ZADD", KEYS[4], server_now() + delay, member)
    elseif host_mode then -- behind its priority in its host's queue
      host_push(KEYS[1], KEYS[6], ARGV[7], ARGV[8], KEYS[2], host, member, member_priority(member), false,
        server_now())
      queued = queued + 1
    else
      queue_push(qtype, KEYS[1], KEYS[2], member, member_priority(member), false) -- behind its priority
      queued = queued + 1
    end
    pushed = true
  end
  -- Only now mark it seen: a push refused half-way (a queue key of the wrong type, maxmemory)
  -- aborts the script with the fingerprint still unseen, so the caller's retry pushes it.
  if new and action ~= "check" then
    if mode == "set" then redis.call("SADD", KEYS[5], fp)
    elseif mode == "redisbloom" then redis.call("BF.ADD", KEYS[5], fp)
    else bitmap_add(h1, h2) end
  end
  new = new or pushed
  result[#result + 1] = new and 1 or 0
end
local first_ack = first_arg + stride * n
if #ARGV >= first_ack then
  redis.call("ZREM", KEYS[3], unpack(ARGV, first_ack, #ARGV))
end
return finish(0, result)
