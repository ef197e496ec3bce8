-- host_purge.lua: drop the pending requests of one host, or of every host of a registered domain
-- (`dcrawl host SPIDER HOST purge`), keeping the pending counter exact.
-- KEYS[1] ready zset, KEYS[2] over-budget zset, KEYS[3] pending counter, KEYS[4] failed list,
-- KEYS[5] the single queue of the non-fair modes (only for pending_open's rebuild)
-- ARGV[1] host queue key prefix, ARGV[2] target (a host, or a domain), ARGV[3] "host" or "domain"
--   (domain: the target and every host ending in "." .. target, any port), ARGV[4] "1" = dead-letter
--   each request (reason "purged"), ARGV[5] failed list cap, ARGV[6] node name, ARGV[7] time (s)
-- Returns the number of requests dropped.
-- Guarantees: one atomic step: the dropped requests leave their queues, their hosts leave ready and
--   over-budget, the pending counter goes down by as many, and (ARGV[4]) each is in the failed list,
--   all or nothing. Leased requests are not touched (they finish or come back through reclaim).
-- Garbage: a member that is not ours is dead-lettered with its raw text; a host queue of the wrong
--   Redis type is skipped (its queue and list both stay). Hosts are found in ready and over-budget (every host with pending work).
-- uses: queue (lib/queue.lua: member_payload, pending_open, pending_add)
local qprefix, target, scope = ARGV[1], ARGV[2], ARGV[3]
local dead, cap, node, now = ARGV[4] == "1", tonumber(ARGV[5]) or 10000, ARGV[6], tonumber(ARGV[7]) or 0
pending_open(KEYS[3], KEYS[5], KEYS[1], KEYS[2], qprefix)

local function bare(slot) -- a slot without its ":port" (IPv6 slots are bracketed)
  local inner = string.match(slot, "^%[(.*)%]:%d+$")
  if inner then return inner end
  return string.match(slot, "^(.*):%d+$") or slot
end

local function matches(slot)
  local h = bare(slot)
  if scope == "domain" then
    return h == target or string.sub(h, -(#target + 1)) == "." .. target
  end
  return slot == target or h == target
end

local hosts, seen = {}, {}
for _, zkey in ipairs({KEYS[1], KEYS[2]}) do
  for _, slot in ipairs(redis.call("ZRANGE", zkey, 0, -1)) do
    if not seen[slot] and matches(slot) then
      seen[slot] = true
      hosts[#hosts + 1] = slot
    end
  end
end

local dropped = 0
for _, slot in ipairs(hosts) do
  local queue = qprefix .. slot
  local list = queue .. "/" -- lib/host.lua host_list (this script does not load lib/host.lua)
  local ok, members = pcall(redis.call, "ZRANGE", queue, 0, -1)
  local ok2, listed = pcall(redis.call, "LRANGE", list, 0, -1)
  if ok and ok2 then
    for _, member in ipairs(listed) do members[#members + 1] = member end
    if dead then
      for _, member in ipairs(members) do
        local payload = member_payload(member) or member
        -- a URL of the host is stored without its origin (lib/host.lua member_local)
        if string.sub(payload, 1, 1) == "/" then payload = "https://" .. slot .. payload
        elseif string.sub(payload, 1, 2) == "~/" then payload = "http://" .. slot .. string.sub(payload, 2) end
        local url = string.match(payload, "^(https?://[^ ]*)")
        if string.sub(payload, 1, 1) == "{" then
          local decoded_ok, d = pcall(cjson.decode, payload)
          url = (decoded_ok and type(d) == "table" and type(d["url"]) == "string") and d["url"] or nil
        end
        redis.call("LPUSH", KEYS[4], cjson.encode({url = url or "", reason = "purged", node = node, time = now,
          attempts = 0, payload = payload}))
      end
    end
    redis.call("DEL", queue, list)
    dropped = dropped + #members
    redis.call("ZREM", KEYS[1], slot)
    redis.call("ZREM", KEYS[2], slot)
  end
end
if dead and dropped > 0 then redis.call("LTRIM", KEYS[4], 0, cap - 1) end
pending_add(-dropped)
return dropped
