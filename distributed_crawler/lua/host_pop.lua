-- host_pop.lua: the "host" queue type's pop (docs/frontier.md): return due retries to their hosts'
-- queues, then lease up to N requests from the hosts that are due, spread across them, atomically.
-- KEYS[1] ready zset: host -> server time (s) at which it may be served next
-- KEYS[2] processing zset: member -> lease deadline (Redis server time, seconds)
-- KEYS[3] delayed zset: member -> due time
-- KEYS[4] sequence counter (orders pushes inside a priority)
-- KEYS[5] over-budget zset: host -> its pending count when it went over budget
-- KEYS[6] (optional) the single-queue key of the non-fair modes (SCHEDULER_QUEUE_KEY): requests
--   left there (a queue from before host mode, or a switch of SCHEDULER_QUEUE_CLASS) move into
--   their hosts' queues, up to ARGV[3] per call, so they are crawled instead of stalling idle-close
-- KEYS[7] (optional, with KEYS[6]) pending counter (lib/queue.lua pending_open)
-- KEYS[8] (optional) refused hash: an expired request counts in field "expired <host>"
-- KEYS[9] (optional) overrides hash (`dcrawl host ... set/block`): host or registered domain -> JSON
--   {"delay", "concurrency", "max_pages", "until", ...}; the closest entry of a due host (itself, then
--   each parent domain) wins over its hash's iv / cap / max, and its "until" blocks it. Read here, on
--   the server, so an override reaches every node at its next pop without a round trip per page.
-- ARGV[1] max number of requests to take (0: only move due retries)
-- ARGV[2] lease length in seconds
-- ARGV[3] max number of due retries to move in this call
-- ARGV[4] host queue key prefix, ARGV[5] host hash key prefix, ARGV[6] (optional) in-flight set key
--   prefix (prefix .. host = the key; undeclared keys on the same Cluster slot as KEYS, see
--   lib/host.lua; without ARGV[6] no in-flight cap is applied); ARGV[7] (optional) doorbell channel:
--   when this call wanted more than it found and no host is due any more, it PUBLISHes
--   "0 <hash tag of KEYS[2]> <sequence>" there ("drained": rings up to that sequence are stale)
-- Returns {lease1, slot1, bo1, lease2, slot2, bo2, ..., next_due}: each leased member
--   ("<deliveries>:<priority>:<payload>", deliveries counted up by one; no envelope counts as 0:0), its host and the host's
--   backoff level; a host dropped from ready because its queue key is of the wrong Redis type
--   comes as the triple ("", host, -1) so the node can name the key; an expired request (its
--   "<expires_at>:" at or before server time, lib/queue.lua) leaves its host's queue unleased and
--   comes as ("", host, -2), counted in the refused hash (KEYS[8]); then the seconds until the
--   next host or delayed retry is due as a string ("-1": none waits); last the sequence counter
--   KEYS[4] (-1: unset or garbage): a doorbell ring naming a sequence up to it announced work this
--   lease already saw.
-- Serving: due hosts (ready score <= now) are served round-robin. A host with an interval
--   (max(iv, cd, ad) > 0) gives ONE request per call and is due again one interval (+ SEND_SPREAD) after now: the
--   interval is a minimum gap between two leases of the host (the site never sees two requests
--   closer than it from the cluster, docs/retries-and-politeness.md); a node's lateness is not
--   made up (a slightly lower rate, never a shorter gap).
--   An emptied one stays in ready until then, so a new request cannot jump its interval; found
--   empty when due, it leaves. A host without interval emptied by this call leaves ready at once
--   (the next push puts it back). A host without interval gives up to its share of what is still wanted, in
--   rounds until N is met or no due host is left. A host blocked until later (`until`) is moved to
--   that time. A host over budget (pages >= max >= 0) leaves ready for the over-budget zset (score
--   = its pending count): its requests stay in its queue, counted, not served. `pages` counts
--   first deliveries (a member with 0 deliveries before this lease) of new pages: a retry or a
--   hand-back (payload ending in '"again":1}', written by the scheduler) is not counted again.
--   A host's requests are taken in its order (lib/host.lua host_peek: its queue zset and its list).
--   A member whose compact payload is a path (a URL of its host, lib/host.lua member_local)
--   is leased with "<scheme>://<host>" put back: a lease always holds the whole URL; a lease equal
--   to one in processing gets an "id" (lease_apart).
--   A served host without interval gets score now: hosts that waited longer come first in the next call.
-- In-flight cap (host hash `cap` > 0, DOMAIN_MAX_IN_FLIGHT): a capped host's leases are also kept
--   in its in-flight set; a member counts while it is in processing with a deadline ahead (an ack,
--   hand-over, release, reclaim or expiry ends it, whichever node or script did it: nothing else
--   has to tell this script), ended members leave the set when it is counted. A host holding `cap`
--   leases gets no more and is looked at again CAP_RECHECK later. The set expires after three
--   lease lengths without a pop of its host.
-- Guarantees (as pop.lua): a request is always in a host queue, in delayed or in processing, never
-- in none and never in two; due times and deadlines come from the server clock; every copy is
-- written before its source is removed.
-- Garbage never stops the script: a delayed member without a host (no "slot", no url host, not
--   JSON) goes to host "" (the node dead-letters what does not decode); a due time or ready score
--   more than a year ahead (+inf included) counts as due; a queue member without a valid envelope
--   is leased as "1:0:<member>" (no envelope: a new request; else the node dead-letters it); a host whose queue key is of the wrong
--   Redis type leaves ready (its key is kept for `dcrawl hosts`); host hash garbage reads as
--   defaults (lib/host.lua). A declared key of the wrong Redis type raises WRONGTYPE.
-- uses: queue (lib/queue.lua: MAX_PRIORITY, member_priority, queue_push, expired, count_expired)
-- uses: host (lib/host.lua: host_of, host_push, host_state, over_budget, member_global, member_again,
--   host_peek, host_take_done, host_size)
-- uses: doorbell (lib/doorbell.lua: doorbell_ring)
local count = tonumber(ARGV[1])
local t = redis.call("TIME")
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local deadline = now + tonumber(ARGV[2])
local qprefix, hprefix, fprefix = ARGV[4], ARGV[5], ARGV[6]
if fprefix == "" then fprefix = nil end -- no in-flight set prefix: caps are not applied
local ready, over = KEYS[1], KEYS[5]
local YEAR = 31536000
-- a rate-limited host is due again this much after its interval (at most 5% of it): what the nodes
-- take between a lease and its request reaching the site varies by some milliseconds, and the site
-- must still see the interval between two requests
local SEND_SPREAD = 0.05
-- a host at its in-flight cap is looked at again this much later (a lease of it may end meanwhile)
local CAP_RECHECK = 0.05
local CAP_TTL = math.ceil(3 * tonumber(ARGV[2]))

-- the operator's override of a host (KEYS[9]): its own entry, else its closest parent domain's
local function apply_override(s)
  if not KEYS[9] then return end
  local name = string.match(s.host, "^%[(.*)%]:%d+$") or string.match(s.host, "^(.*):%d+$") or s.host
  local names = {s.host}
  if name ~= s.host then names[#names + 1] = name end
  local rest = name
  while true do
    local dot = string.find(rest, ".", 1, true)
    if not dot then break end
    rest = string.sub(rest, dot + 1)
    if rest ~= "" then names[#names + 1] = rest end
  end
  local ok, found = pcall(redis.call, "HMGET", KEYS[9], unpack(names))
  if not ok then return end
  for _, raw in ipairs(found) do
    if raw then
      local decoded, o = pcall(cjson.decode, raw)
      if decoded and type(o) == "table" then
        local delay, conc, max, till = tonumber(o["delay"]), tonumber(o["concurrency"]), tonumber(o["max_pages"]),
          tonumber(o["until"])
        if delay and delay >= 0 and delay <= 86400 then s.iv = delay; s.ad = 0 end
        if conc and conc >= 1 then s.cap = math.floor(conc) end
        if max and max >= 0 then s.max = math.floor(max) end
        if till and till > s.till and till < now + 100 * YEAR then s.till = till end
      end
      return
    end
  end
end

-- the leases a capped host holds now (in processing, deadline ahead); ended ones leave its set
local function held_leases(host)
  local key = fprefix .. host
  local ok, leases = pcall(redis.call, "SMEMBERS", key)
  if not ok then return 0 end -- a set key of the wrong type: counted as none (the key is kept)
  local held = 0
  for _, lease in ipairs(leases) do
    local lease_deadline = tonumber(redis.call("ZSCORE", KEYS[2], lease))
    if lease_deadline and lease_deadline > now then held = held + 1 else redis.call("SREM", key, lease) end
  end
  return held
end

pending_open(KEYS[7], KEYS[6], ready, over, qprefix)

-- due retries back into their hosts' queues, behind their priority like a fresh push
local limit = tonumber(ARGV[3] or "100")
local due = redis.call("ZRANGEBYSCORE", KEYS[3], "-inf", now, "LIMIT", 0, limit)
if #due < limit then
  local far = redis.call("ZRANGEBYSCORE", KEYS[3], "(" .. string.format("%.6f", now + YEAR), "+inf",
    "LIMIT", 0, limit - #due)
  for _, member in ipairs(far) do due[#due + 1] = member end
end
for _, member in ipairs(due) do
  host_push(ready, over, qprefix, hprefix, KEYS[4], host_of(member_payload(member) or member), member,
    member_priority(member), false, now)
  redis.call("ZREM", KEYS[3], member)
end

-- the single queue of the non-fair modes (zset or list), drained into the host queues
if KEYS[6] then
  local kind = redis.call("TYPE", KEYS[6])["ok"]
  local legacy = {}
  if kind == "zset" then
    legacy = redis.call("ZRANGE", KEYS[6], 0, limit - 1)
  elseif kind == "list" then
    legacy = redis.call("LRANGE", KEYS[6], -limit, -1)
  end
  for _, member in ipairs(legacy) do
    host_push(ready, over, qprefix, hprefix, KEYS[4], host_of(member_payload(member) or member), member,
      member_priority(member), false, now)
  end
  if #legacy > 0 then -- copies first, then the sources (a refused write never loses a request)
    if kind == "zset" then redis.call("ZREMRANGEBYRANK", KEYS[6], 0, #legacy - 1)
    else redis.call("LTRIM", KEYS[6], 0, -#legacy - 1) end
    pending_add(-#legacy) -- host_push counted their copies
  end
end

local out = {}
local function lease_of(member, host)
  member = member_global(member, host)
  local deliveries, priority = string.match(member, "^(%d+):(%-?%d+):")
  if deliveries and #deliveries <= 9 and #priority <= 8 and math.abs(tonumber(priority)) <= MAX_PRIORITY then
    -- a new page: first delivery, and not a retry / hand-back ("again", our payload's last field)
    local fresh = tonumber(deliveries) == 0 and not member_again(member)
    return (tonumber(deliveries) + 1) .. string.sub(member, #deliveries + 1), fresh
  end
  if not string.match(member, "^%d") then -- no envelope: "0:0:" (a new page if it is a URL of ours)
    return "1:0:" .. member, payload_url(member) ~= nil and not member_again(member)
  end
  return "1:0:" .. member, false -- not written by us: the node dead-letters it without running it
end

-- A lease equal to one held already (two equal requests that skip the dedup filter, queued side by
-- side in a list without an id: codec.py) gets an "id" field first in its compact payload's fields,
-- so each delivery keeps its own lease, ack and reclaim. The JSON format carries a random id.
-- Only a request that skips the filter (a start request's mark, dont_filter) or comes again (a
-- retry, a hand-back, a revisit) can have an equal one leased: a new filtered link is unique and
-- costs no look-up.
local function lease_apart(lease)
  if not (string.find(lease, " " .. START_MARK, 1, true) or string.find(lease, '"dont_filter":true', 1, true)
      or member_again(lease)) then
    return lease -- (plain finds: a URL holds no space, so " S" is the mark or inside the fields)
  end
  if not redis.call("ZSCORE", KEYS[2], lease) then return lease end
  local envelope, payload = split_envelope(lease)
  if string.sub(payload, 1, 1) == "{" then return lease end
  local url, rest = string.match(payload, "^([^ ]*) ?(.*)$")
  local mark = ""
  if string.sub(rest, 1, 1) == START_MARK then mark, rest = START_MARK, string.sub(rest, 2) end
  if rest == "{}" then rest = "" end
  for n = 1, 1000 do
    local field = '"id":"' .. n .. '"'
    local fields = rest == "" and "{" .. field .. "}" or "{" .. field .. "," .. string.sub(rest, 2)
    local apart = envelope .. url .. " " .. mark .. fields
    if not redis.call("ZSCORE", KEYS[2], apart) then return apart end
  end
  return lease
end

-- the due hosts, with their state
local active = {}
if count > 0 then
  local hosts = redis.call("ZRANGEBYSCORE", ready, "-inf", now, "LIMIT", 0, count)
  if #hosts < count then
    local far = redis.call("ZRANGEBYSCORE", ready, "(" .. string.format("%.6f", now + YEAR), "+inf",
      "LIMIT", 0, count - #hosts)
    for _, host in ipairs(far) do hosts[#hosts + 1] = host end
  end
  for _, host in ipairs(hosts) do
    local s = host_state(hprefix .. host, now)
    s.host = host
    apply_override(s)
    s.interval = math.max(s.iv, s.cd, s.ad)
    if s.till > now then
      redis.call("ZADD", ready, s.till, host) -- blocked: due when the block ends
    elseif over_budget(s) then
      redis.call("ZADD", over, host_size(qprefix .. host) or 0, host)
      redis.call("ZREM", ready, host)
    else
      if not fprefix then s.cap = -1 end
      s.held = s.cap > 0 and held_leases(host) or 0
      if s.cap > 0 and s.held >= s.cap then
        redis.call("ZADD", ready, now + CAP_RECHECK, host) -- at its cap: looked at again shortly
      else
        active[#active + 1] = s
      end
    end
  end
end

-- serve them round-robin
local wanted = count
while wanted > 0 and #active > 0 do
  local share = math.max(1, math.floor(wanted / #active))
  local still = {}
  for _, s in ipairs(active) do
    if wanted <= 0 then break end
    local queue = qprefix .. s.host
    local take = 1
    if s.interval <= 0 then take = math.min(share, wanted) end
    if s.max >= 0 then take = math.min(take, s.max - s.pages) end
    if s.cap > 0 then take = math.min(take, s.cap - s.held) end
    local ok, members, from_zset, from_list = pcall(host_peek, queue, take)
    if not ok then -- a host queue of the wrong type: the host leaves ready, its key stays, the node names it
      redis.call("ZREM", ready, s.host)
      out[#out + 1] = ""
      out[#out + 1] = s.host
      out[#out + 1] = -1
      members = nil
    elseif #members == 0 then
      redis.call("ZREM", ready, s.host)
    end
    if members and #members > 0 then
      local first, dropped = 0, 0
      for _, member in ipairs(members) do
        if expired(member, now) then -- never fetched: off the queue, counted for the host
          count_expired(KEYS[8], s.host, EXPIRED_FIELDS_MAX)
          out[#out + 1] = ""
          out[#out + 1] = s.host
          out[#out + 1] = -2
          dropped = dropped + 1
        else
          local lease, fresh = lease_of(member, s.host)
          lease = lease_apart(lease)
          redis.call("ZADD", KEYS[2], deadline, lease)
          if s.cap > 0 then pcall(redis.call, "SADD", fprefix .. s.host, lease) end
          out[#out + 1] = lease
          out[#out + 1] = s.host
          out[#out + 1] = s.bo
          if fresh then first = first + 1 end
        end
      end
      if s.cap > 0 then s.held = s.held - dropped end -- counted below as held: expired ones are not
      pending_add(-host_take_done(queue, from_zset, from_list))
      wanted = wanted - #members
      if s.cap > 0 then
        pcall(redis.call, "EXPIRE", fprefix .. s.host, CAP_TTL)
        s.held = s.held + #members
      end
      if first > 0 then
        s.pages = s.pages + first
        if not pcall(redis.call, "HINCRBY", hprefix .. s.host, "pages", first) then -- garbage count
          pcall(redis.call, "HSET", hprefix .. s.host, "pages", s.pages)
        end
      end
      if s.interval > 0 then
        -- one per call, due again one interval (plus the send spread allowance) after now
        redis.call("ZADD", ready, now + s.interval + math.min(SEND_SPREAD, s.interval * 0.05), s.host)
      elseif over_budget(s) then
        redis.call("ZADD", over, host_size(queue) or 0, s.host)
        redis.call("ZREM", ready, s.host)
      elseif s.cap > 0 and s.held >= s.cap then
        redis.call("ZADD", ready, now + CAP_RECHECK, s.host) -- at its cap: looked at again shortly
      elseif #members < take or host_size(queue) == 0 then -- fewer than asked: both keys ran out
        redis.call("ZREM", ready, s.host) -- emptied: out now (a push puts it back), no empty lease later
      else
        redis.call("ZADD", ready, now, s.host) -- behind the hosts waiting longer: the next call serves them first
        if #members == take then still[#still + 1] = s end -- gave its full share: may give more this call
      end
    end
  end
  active = still
end

-- seconds until the next host or retry is due (the idle feeder sleeps until then)
local next_due = nil
for _, key in ipairs({ready, KEYS[3]}) do
  local first = redis.call("ZRANGE", key, 0, 0, "WITHSCORES")
  if #first > 0 and (not next_due or tonumber(first[2]) < next_due) then next_due = tonumber(first[2]) end
end
if not next_due then
  out[#out + 1] = "-1"
else
  out[#out + 1] = string.format("%.3f", math.max(0, next_due - now))
end
local ok, seq = pcall(redis.call, "GET", KEYS[4])
seq = ok and tonumber(seq) or -1
out[#out + 1] = seq -- the pushes this lease saw (a doorbell ring up to it is stale)
if count > 0 and wanted > 0 and seq >= 0 and ARGV[7] and ARGV[7] ~= ""
  and #redis.call("ZRANGEBYSCORE", ready, "-inf", now, "LIMIT", 0, 1) == 0 then
  -- drained: no due host left after the pushes up to seq; other nodes need not lease for their rings
  doorbell_ring(ARGV[7], 0, KEYS[2], seq)
end
return out
