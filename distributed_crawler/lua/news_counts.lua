-- news_counts.lua: add a node's page counts to the cluster's, and its per-host language skips.
-- KEYS[1] cluster stats hash ({spider}:stats): fields "page_type:<type>:stored", "page_type:<type>:skipped",
--         "language:<code>:skipped"
-- KEYS[2] per-host zset ({spider}:language:skipped): host -> pages not stored for their language
-- KEYS[3] the writer's last applied write ({spider}:stats:applied:<writer>, a string with a TTL)
-- ARGV[1] most hosts KEYS[2] keeps (the lowest counts go first); ARGV[2] number n of field pairs
-- ARGV[3] this write's number, increasing per writer; ARGV[4] how long KEYS[3] is kept (s)
-- ARGV[5 .. 4+2n] field, delta pairs for KEYS[1]; then host, delta pairs for KEYS[2]
-- Returns the number of hosts KEYS[2] holds.
-- Guarantees: a write lands once. It is skipped when KEYS[3] says the writer's write ARGV[3] (or a
-- later one) landed already: a write whose reply was lost (a dropped connection, a timeout, a
-- cancelled call) and that is sent again adds nothing. A refused write writes nothing: a key of the
-- wrong Redis type raises WRONGTYPE before anything is written, and so does a full Redis
-- (maxmemory: the first write is refused). Only a field of KEYS[1] that does not hold an integer
-- (garbage) is reset to the delta; any other error of HINCRBY is raised, never taken for garbage.
-- KEYS[2] never holds more than ARGV[1] hosts, so its memory is bounded however many sites are crawled.
local function check_type(key, wanted)
  local kind = redis.call("TYPE", key)["ok"]
  if kind ~= "none" and kind ~= wanted then
    return redis.error_reply("WRONGTYPE Operation against a key holding the wrong kind of value: " .. key)
  end
end
local refused = check_type(KEYS[1], "hash") or check_type(KEYS[2], "zset") or check_type(KEYS[3], "string")
if refused then
  return refused
end
local cap = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local write = tonumber(ARGV[3])
local last = tonumber(redis.call("GET", KEYS[3]) or "") -- garbage: as if none landed
if last and write <= last then
  return redis.call("ZCARD", KEYS[2])
end
for i = 5, 4 + 2 * n, 2 do
  local added = redis.pcall("HINCRBY", KEYS[1], ARGV[i], ARGV[i + 1])
  if type(added) == "table" and added["err"] then
    local garbage = string.find(added["err"], "not an integer", 1, true)
      or string.find(added["err"], "overflow", 1, true)
    if not garbage then
      return added -- e.g. OOM: nothing was written (a refused first write), the caller retries
    end
    redis.call("HSET", KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
for i = 5 + 2 * n, #ARGV, 2 do
  redis.call("ZINCRBY", KEYS[2], ARGV[i + 1], ARGV[i])
end
redis.call("SET", KEYS[3], write, "EX", ARGV[4])
local size = redis.call("ZCARD", KEYS[2])
if size > cap then
  redis.call("ZREMRANGEBYRANK", KEYS[2], 0, size - cap - 1)
  size = cap
end
return size
