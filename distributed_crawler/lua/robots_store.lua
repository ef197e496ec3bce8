-- robots_store.lua: the fetching node shares a host's robots.txt, in one round trip: the cache
-- entry, the lock released, the host's Crawl-delay, and (host mode) the "robots.txt pending" block
-- lifted so the host's requests are served one interval after the robots.txt request.
-- KEYS[1] the host's cache key (ROBOTS_CACHE_KEY), KEYS[2] its lock (<cache key>:lock)
-- KEYS[3], KEYS[4] (host mode only) the ready zset and the host's hash (lib/block.lua)
-- ARGV[1] the entry (JSON), ARGV[2] its TTL in seconds
-- Host mode: ARGV[3] Crawl-delay in seconds for our user agent (field cd; "" = none: removed),
--   ARGV[4] host (its member in ready), ARGV[5] the block reason to lift ("" = lift none: an error
--   entry leaves the block to end by itself), ARGV[6] doorbell channel ("" = none), ARGV[7] "1" when
--   the calling node holds one request of the host that it sends itself one interval from now (the
--   host is then due two intervals from now), else "0".
-- Returns the host's interval in seconds (max of iv, cd, ad; "0" without host mode), as a string:
--   how long after this call the calling node waits before sending the request it holds.
-- Guarantees: the entry is written before the lock is released (a node that finds neither fetches
-- again: at most once more per ROBOTS_LOCK_SECONDS); every key is in KEYS, on the host's shard tag.
-- Garbage: a TTL that is not a positive number is 60; a Crawl-delay that is not a finite number in
-- [0, 86400] removes cd; a cache, lock or hash key of another type raises WRONGTYPE (nothing is
-- written after the failing command; the caller logs it and the lock and block expire by themselves).
-- uses: doorbell (lib/doorbell.lua: doorbell_ring)
-- uses: block (lib/block.lua: block_num, block_now, block_gap, unblock_host)
local ttl = math.floor(block_num(ARGV[2], 60))
if ttl < 1 then ttl = 60 end
redis.call("SET", KEYS[1], ARGV[1], "EX", ttl)
redis.call("DEL", KEYS[2])
if not KEYS[4] then return "0" end
local ready, hash = KEYS[3], KEYS[4]
local host = ARGV[4] or ""
local delay = block_num(ARGV[3], -1)
if delay > 0 and delay <= 86400 then
  redis.call("HSET", hash, "cd", string.format("%.3f", delay))
else
  redis.call("HDEL", hash, "cd")
end
local now = block_now()
local times = ARGV[7] == "1" and 2 or 1
local lifted = (ARGV[5] or "") ~= "" and unblock_host(ready, hash, host, ARGV[5], ARGV[6] or "", now, times, true)
local gap = block_gap(hash)
if not lifted and times == 2 and gap > 0 then
  -- still blocked for another reason (or not blocked): the held request's interval is kept anyway
  redis.call("ZADD", ready, "GT", string.format("%.6f", now + times * gap), host)
end
return string.format("%.3f", gap)
