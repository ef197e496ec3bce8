-- source_record.lua: count what one committed batch (or one failed page) means for one news source.
-- KEYS[1] source hash (`{spider}:source:<source>`): bounded fields, never one per article:
--   a:<day> articles stored (new rows) that day, e:<day> errors, r:<day> refusals (day = Unix day,
--   the last SOURCE_DAYS kept), l:<i> publish-to-first-seen lag histogram (fixed buckets),
--   g:<i> gap histogram (seconds between two batches with new articles, log2 buckets), last (server
--   time of the last new article), first (of the first one), n (articles ever), silent (0/1).
-- KEYS[2] index zset: source -> server time of its last activity (sources.py caps its size)
-- ARGV[1] source name, ARGV[2] kind: "article" | "error" | "refusal", ARGV[3] count (>= 1),
-- ARGV[4] days kept (28), ARGV[5..] lag bucket indexes of the new articles that have one
-- Guarantees: one call, one source, its fields stay bounded (old days deleted here); Redis time.
local t = redis.call("TIME")
local now = tonumber(t[1])
local day = math.floor(now / 86400)
local kind, count, days = ARGV[2], tonumber(ARGV[3]) or 1, tonumber(ARGV[4]) or 28
for i, want in ipairs({"hash", "zset"}) do
  local ty = redis.call("TYPE", KEYS[i]).ok
  if ty ~= want and ty ~= "none" then redis.call("DEL", KEYS[i]) end -- garbage in our key: afresh
end
local prefix = ({article = "a:", error = "e:", refusal = "r:"})[kind]
if prefix == nil then return 0 end
redis.call("HINCRBY", KEYS[1], prefix .. day, count)
if kind == "article" then
  local last = tonumber(redis.call("HGET", KEYS[1], "last"))
  if last and now > last then
    local gap = now - last
    local bucket = math.floor(math.log(gap) / math.log(2))
    if bucket < 0 then bucket = 0 end
    if bucket > 24 then bucket = 24 end
    redis.call("HINCRBY", KEYS[1], "g:" .. bucket, 1)
  end
  if not last then redis.call("HSET", KEYS[1], "first", now) end
  redis.call("HSET", KEYS[1], "last", now)
  redis.call("HINCRBY", KEYS[1], "n", count)
  for i = 5, #ARGV do
    redis.call("HINCRBY", KEYS[1], "l:" .. ARGV[i], 1)
  end
end
for _, field in ipairs(redis.call("HKEYS", KEYS[1])) do
  local d = tonumber(string.match(field, "^[aer]:(%d+)$"))
  if d and d <= day - days then redis.call("HDEL", KEYS[1], field) end
end
redis.call("ZADD", KEYS[2], now, ARGV[1])
return 1
