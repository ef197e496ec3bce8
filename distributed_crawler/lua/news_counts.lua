-- news_counts.lua: add a node's page counts to the cluster's, and its per-host language skips.
-- KEYS[1] cluster stats hash ({spider}:stats): fields "page_type:<type>:stored", "page_type:<type>:skipped",
--         "language:<code>:skipped"
-- KEYS[2] per-host zset ({spider}:language:skipped): host -> pages not stored for their language
-- ARGV[1] most hosts KEYS[2] keeps (the lowest counts go first); ARGV[2] number n of field pairs
-- ARGV[3 .. 2+2n] field, delta pairs for KEYS[1]; then host, delta pairs for KEYS[2]
-- Returns the number of hosts KEYS[2] holds.
-- Guarantees: one node's counts of one flush land together; KEYS[2] never holds more than ARGV[1]
-- hosts, so its memory is bounded however many sites are crawled. A field of KEYS[1] that is not
-- an integer (garbage) is reset to the delta; a key of the wrong Redis type raises WRONGTYPE.
local cap = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
for i = 3, 2 + 2 * n, 2 do
  if type(redis.pcall("HINCRBY", KEYS[1], ARGV[i], ARGV[i + 1])) == "table" then
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
