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
    local ok, fields = pcall(cjson.decode, string.sub(payload, #url + 2))
    if ok and type(fields) == "table" then d = fields end
  end
  local slot = d and d["slot"]
  if type(slot) == "string" and #slot <= 300 then return slot end
  return url_host(url)
end

-- A host queue holds an https URL of its own host as the URL's path (the queue key names the
-- host): member_local(member, host) drops "https://<host>" from such a member's compact payload,
-- member_global(member, host) puts it back (at lease, and for any member read from a host queue
-- that leaves it). Anything else is left as it is.
local function split_envelope(member)
  local envelope = string.match(member, "^%d+:%-?%d+:%d+:") or string.match(member, "^%d+:%-?%d+:") or ""
  return envelope, string.sub(member, #envelope + 1)
end

local function member_local(member, host)
  local envelope, payload = split_envelope(member)
  local origin = "https://" .. host
  if host ~= "" and string.sub(payload, 1, #origin + 1) == origin .. "/" then
    return envelope .. string.sub(payload, #origin + 1)
  end
  return member
end

local function member_global(member, host)
  local envelope, payload = split_envelope(member)
  if string.sub(payload, 1, 1) == "/" then return envelope .. "https://" .. host .. payload end
  return member
end

-- A retry or hand-back (the payload's last field "again", queue/codec.py): not a new page.
local function member_again(member)
  local tail = string.sub(member, -11)
  return tail == ',"again":1}' or tail == '{"again":1}'
end

-- Put a host into ready (or keep it in the over-budget zset): called after a push to its queue.
-- In ready already: untouched (its due time stands). Over budget: ZADD over <pending>.
-- Otherwise ZADD ready NX max(now, until).
local function host_schedule(ready, over, qprefix, hprefix, host, now)
  if redis.call("ZSCORE", ready, host) then return end
  local s = host_state(hprefix .. host, now)
  if over_budget(s) then
    local ok, pending = pcall(redis.call, "ZCARD", qprefix .. host)
    redis.call("ZADD", over, ok and pending or 0, host)
    return
  end
  redis.call("ZREM", over, host)
  redis.call("ZADD", ready, "NX", math.max(now, s.till), host)
end

-- Push a member to its host's queue (front of its priority when `front`; an https URL of the host
-- stored as its path), then schedule the host.
-- A host queue of the wrong Redis type raises WRONGTYPE (the member stays where it was).
local function host_push(ready, over, qprefix, hprefix, seq, host, member, priority, front, now)
  queue_push("priority", qprefix .. host, seq, member_local(member, host), priority, front)
  host_schedule(ready, over, qprefix, hprefix, host, now)
end
-- end of lib/host.lua
