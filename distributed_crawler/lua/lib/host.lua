-- lib/host.lua: the per-host frontier ("host" queue type, docs/frontier.md) shared by enqueue.lua,
-- pop.lua, reclaim.lua and release.lua. Prepended after lib/queue.lua (uses its queue_push) to
-- every script whose header says "-- uses: host". Local names only.
-- A host's queue (zset, scored like the "priority" queue) and state hash are derived from
-- prefixes passed in ARGV + the host name: they carry the spider's {hash tag}, so they live on
-- the Redis Cluster slot of the declared KEYS (Redis allows same-slot undeclared keys for scripts
-- without flags; a documented exception to "every key in KEYS", docs/architecture.md).
-- Host hash fields (all optional, garbage = default): iv interval s, cd Crawl-delay s, bo backoff
-- level, until blocked until (server time), pages leased on a first delivery, max budget (-1 none),
-- cap leases held at once across the cluster (-1 or 0: none; the leases in the in-flight set), ad
-- adaptive delay s (DOMAIN_DELAY_FACTOR x the host's response time, written by a node).
-- Garbage: a value that is not a finite number reads as its default; a host whose queue or hash
-- key is of the wrong Redis type is skipped (pcall), never fatal.
local HOST_YEAR = 31536000
-- A compact payload's fields may start with this mark (frontier/codec.py START_MARK): a start request,
-- whose defaults (no callback, dont_filter, meta is_start_request) are then left out.
local START_MARK = "S"

-- a finite number, else `default` (nil, non-numeric, NaN, inf, absurd)
local function num(value, default)
  local v = tonumber(value)
  if not v or v ~= v or v == math.huge or v == -math.huge or v > 1e15 or v < -1e15 then return default end
  return v
end

-- {iv, cd, bo, till, pages, max, cap, ad} of a host (defaults for missing/garbage, or a hash of the wrong type)
local function host_state(hkey, now)
  local ok, r = pcall(redis.call, "HMGET", hkey, "iv", "cd", "bo", "until", "pages", "max", "cap", "ad")
  if not ok then r = {} end
  local s = {iv = num(r[1], 0), cd = num(r[2], 0), bo = math.floor(num(r[3], 0)), till = num(r[4], 0),
             pages = math.floor(num(r[5], 0)), max = math.floor(num(r[6], -1)), cap = math.floor(num(r[7], -1)),
             ad = num(r[8], 0)}
  if s.iv < 0 or s.iv > 86400 then s.iv = 0 end
  if s.cd < 0 or s.cd > 86400 then s.cd = 0 end
  if s.ad < 0 or s.ad > 86400 then s.ad = 0 end
  if s.bo < 0 or s.bo > 64 then s.bo = 0 end
  if s.till > now + HOST_YEAR then s.till = 0 end -- "blocked for over a year": garbage
  return s
end

local function over_budget(s)
  return s.max >= 0 and s.pages >= s.max
end

-- The URL of a payload (queue/codec.py): the "url" of a JSON one, else everything before the first
-- space of a compact one; nil when it has none. url_host(url): its lowercased host[:port] or "".
local function payload_url(payload)
  if string.sub(payload, 1, 1) == "{" then
    local ok, d = pcall(cjson.decode, payload)
    if ok and type(d) == "table" and type(d["url"]) == "string" then return d["url"], d end
    return nil
  end
  local url = string.match(payload, "^[^ ]+")
  if url and string.match(url, "^[%a][%w+.-]*://") then return url end
  return nil
end

local function url_host(url)
  local authority = string.match(url, "^[%a][%w+.-]*://([^/?#]*)")
  if not authority then return "" end
  authority = string.gsub(authority, "^.*@", "")
  return string.lower(string.sub(authority, 1, 300))
end

-- The host (slot) of a payload: its "slot" field, else the host[:port] of its url, else "".
local function host_of(payload)
  local url, d = payload_url(payload)
  if not url then return "" end
  if not d and string.find(payload, '"slot":', 1, true) then -- a compact payload's fields
    local rest = string.sub(payload, #url + 2)
    if string.sub(rest, 1, 1) == START_MARK then rest = string.sub(rest, 2) end
    local ok, fields = pcall(cjson.decode, rest)
    if ok and type(fields) == "table" then d = fields end
  end
  local slot = d and d["slot"]
  -- a slot never holds "/" (no URL host does): `<queue key>/` is a host's list (host_list below)
  if type(slot) == "string" and #slot <= 300 and not string.find(slot, "/", 1, true) then return slot end
  return url_host(url)
end

-- A host's queue stores a URL of its own host without "<scheme>://<host>" (the queue key names the
-- host): an https URL as its path ("/a/b"), an http one as "~" and its path ("~/a/b").
-- member_local(member, host) drops the origin from such a member's compact payload, member_global(
-- member, host) puts it back (at lease, and for any member read from a host queue that leaves it).
-- Anything else is left as it is.
local function split_envelope(member)
  local envelope = string.match(member, "^%d+:%-?%d+:%d+:") or string.match(member, "^%d+:%-?%d+:") or ""
  return envelope, string.sub(member, #envelope + 1)
end

local function member_local(member, host)
  if host == "" then return member end
  local envelope, payload = split_envelope(member)
  local https, http = "https://" .. host .. "/", "http://" .. host .. "/"
  if string.sub(payload, 1, #https) == https then return envelope .. string.sub(payload, #https) end
  if string.sub(payload, 1, #http) == http then return envelope .. "~" .. string.sub(payload, #http) end
  return member
end

local function member_global(member, host)
  local envelope, payload = split_envelope(member)
  local head = string.sub(payload, 1, 1)
  if head == "/" then return envelope .. "https://" .. host .. payload end
  if head == "~" and string.sub(payload, 2, 2) == "/" then return envelope .. "http://" .. host .. string.sub(payload, 2) end
  return member
end

-- A retry or hand-back (the payload's last field "again", queue/codec.py): not a new page.
local function member_again(member)
  local tail = string.sub(member, -11)
  return tail == ',"again":1}' or tail == '{"again":1}'
end

-- A host's pending requests live in two keys: its queue (a zset, scored like the "priority" queue)
-- holds what is out of arrival order: a request of another priority than 0, or one pushed to the
-- front (a reclaimed, released or handed-back lease); its list (`<queue key>/`, RPUSH / LPOP) holds
-- the requests of priority 0 in arrival order: nearly every new link and seed. A list costs its
-- members' bytes and ~2 bytes each whatever its length or the members' size, where a zset past
-- zset-max-listpack-entries (128) or -value (64 bytes) costs ~95 bytes more per member (a skiplist
-- node and a dict entry). Order: the zset's requests of priority >= 0 (a front push of priority 0
-- came before the list's), then the list, then the zset's lower priorities. Two equal members are
-- two requests in a list; at lease host_pop.lua keeps their leases apart (lease_apart).
local function host_list(queue)
  return queue .. "/"
end

-- the requests waiting in a host's queue and list; nil when either key is of the wrong Redis type
local function host_size(queue)
  local ok, z = pcall(redis.call, "ZCARD", queue)
  local ok2, l = pcall(redis.call, "LLEN", host_list(queue))
  if not (ok and ok2) then return nil end
  return z + l
end

-- The first `take` requests of a host in its order (above), and how many of them come from the
-- zset and from the list (host_take_done removes them). Raises WRONGTYPE for a key of another type.
local function host_peek(queue, take)
  local z = redis.call("ZRANGE", queue, 0, take - 1)
  local out, zi = {}, 0
  while zi < #z and member_priority(z[zi + 1]) >= 0 do
    zi = zi + 1
    out[zi] = z[zi]
  end
  local l = {}
  if zi < take then l = redis.call("LRANGE", host_list(queue), 0, take - zi - 1) end
  for _, member in ipairs(l) do out[#out + 1] = member end
  while #out < take and zi < #z do
    zi = zi + 1
    out[#out + 1] = z[zi]
  end
  return out, zi, #l
end

-- remove what host_peek gave (from_zset first members of the zset, from_list of the list); the count
local function host_take_done(queue, from_zset, from_list)
  local n = 0
  if from_zset > 0 then n = redis.call("ZREMRANGEBYRANK", queue, 0, from_zset - 1) end
  if from_list > 0 then
    redis.call("LTRIM", host_list(queue), from_list, -1)
    n = n + from_list
  end
  return n
end

-- Put a host into ready (or keep it in the over-budget zset): called after a push to its queue.
-- In ready already: untouched (its due time stands). Over budget: ZADD over <pending>.
-- Otherwise ZADD ready NX max(now, until).
local function host_schedule(ready, over, qprefix, hprefix, host, now)
  if redis.call("ZSCORE", ready, host) then return end
  local s = host_state(hprefix .. host, now)
  if over_budget(s) then
    redis.call("ZADD", over, host_size(qprefix .. host) or 0, host)
    return
  end
  redis.call("ZREM", over, host)
  redis.call("ZADD", ready, "NX", math.max(now, s.till), host)
end

-- Push a member to its host's list (priority 0, behind) or queue (front of its priority when
-- `front`; a URL of the host stored without its origin), then schedule the host.
-- A host queue or list of the wrong Redis type raises WRONGTYPE (the member stays where it was).
local function host_push(ready, over, qprefix, hprefix, seq, host, member, priority, front, now)
  if priority == 0 and not front then -- in arrival order: its host's list
    redis.call("RPUSH", host_list(qprefix .. host), member_local(member, host))
    next_seq(seq) -- a push advances the sequence a doorbell ring names, wherever it went
    pending_add(1)
  else
    queue_push("priority", qprefix .. host, seq, member_local(member, host), priority, front)
  end
  host_schedule(ready, over, qprefix, hprefix, host, now)
end
-- end of lib/host.lua
