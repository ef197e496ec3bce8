-- robots_claim.lua: a node's first look at a host's robots.txt, in one round trip: the cluster's
-- cached copy, or the claim to fetch it, or word that another node fetches it.
-- KEYS[1] the host's cache key (ROBOTS_CACHE_KEY): JSON {"status", "body", "fetched_at"}
-- KEYS[2] its lock (<cache key>:lock): the fetching node holds it for ARGV[1] seconds
-- KEYS[3], KEYS[4] (host mode only) the ready zset and the host's hash (lib/block.lua)
-- ARGV[1] lock seconds, ARGV[2] host (its member in ready), ARGV[3] block seconds, ARGV[4] reason
-- Returns {"hit", entry} when cached; else {"claimed"} when this call took the lock (the caller
--   fetches and then runs robots_store.lua), {"pending"} when another node holds it. Host mode, on
--   a miss: the host is blocked for ARGV[3] seconds with reason ARGV[4] (until = max(until, now +
--   seconds), ready score raised: lib/block.lua block_host), so no node leases its requests before
--   robots.txt is cached; robots_store.lua lifts it.
-- Guarantees: one host's robots.txt is fetched by one node at a time across the cluster (SET NX EX);
-- every key is in KEYS, on the host's shard tag (one Cluster slot).
-- Garbage: a cached value that is not a JSON object (or a key of another type) counts as absent
-- (the fetch overwrites it); a lock key of another type counts as held (it expires, or an operator
-- deletes it).
-- uses: doorbell (lib/doorbell.lua: doorbell_ring)
-- uses: block (lib/block.lua: block_num, block_now, block_host)
local ok, raw = pcall(redis.call, "GET", KEYS[1])
if ok and type(raw) == "string" and string.sub(raw, 1, 1) == "{" then
  local parsed, entry = pcall(cjson.decode, raw)
  if parsed and type(entry) == "table" then return {"hit", raw} end
end
local lock_seconds = math.floor(block_num(ARGV[1], 30))
if lock_seconds < 1 then lock_seconds = 30 end
local claimed = redis.call("SET", KEYS[2], "1", "NX", "EX", lock_seconds) ~= false
if KEYS[4] then
  local seconds = block_num(ARGV[3], 1)
  if seconds < 0 then seconds = 1 end
  block_host(KEYS[3], KEYS[4], ARGV[2] or "", seconds, ARGV[4] or "", 1, math.max(seconds, 60), 0.5, block_now())
end
if claimed then return {"claimed"} end
return {"pending"}
