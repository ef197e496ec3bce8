-- news_counts.lua: add a node's page counts to the cluster's, and its per-host language skips.
-- KEYS[1] cluster stats hash ({spider}:stats): fields "page_type:<type>:stored", "page_type:<type>:skipped",
--         "language:<code>:skipped"
-- KEYS[2] per-host zset ({spider}:language:skipped): host -> pages not stored for their language
-- ARGV[1] most hosts KEYS[2] keeps (the lowest counts go first); ARGV[2] number n of field pairs
-- ARGV[3 .. 2+2n] field, delta pairs for KEYS[1]; then host, delta pairs for KEYS[2]
-- Returns the number of hosts KEYS[2] holds.
-- Guarantees: one node's counts of one flush land together or not at all, so a caller that retries
-- a refused call never adds a count twice: a key of the wrong Redis type raises WRONGTYPE before
-- anything is written, and so does a full Redis (maxmemory: the first write is refused). Only a
-- field of KEYS[1] that does not hold an integer (garbage) is reset to the delta; any other error
-- of HINCRBY is raised, never taken for garbage. KEYS[2] never holds more than ARGV[1] hosts, so
-- its memory is bounded however many sites are crawled.
local function check_type(key, wanted)
  local kind = redis.call("TYPE", key)["ok"]
  if kind ~= "none" and kind ~= wanted then
    return redis.error_reply("WRONGTYPE Operation against a key holding the wrong kind of value: " .. key)
  end
end
local refused = check_type(KEYS[1], "hash") or check_type(KEYS[2], "zset")
if refused then
  return refused
end
local cap = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
for i = 3, 2 + 2 * n, 2 do
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
for i = 3 + 2 * n, #ARGV, 2 do
  redis.call("ZINCRBY", KEYS[2], ARGV[i + 1], ARGV[i])
end
local size = redis.call("ZCARD", KEYS[2])
if size > cap then
  redis.call("ZREMRANGEBYRANK", KEYS[2], 0, size - cap - 1)
  size = cap
end
return size
