-- source_record.lua: count what one committed batch (or one failed page) means for one news source.
-- KEYS[1] source hash (`{spider}:source:<source>`): bounded fields, never one per article:
--   a:<day> articles stored (new rows) that day, e:<day> errors, r:<day> refusals (day = Unix day,
--   the last SOURCE_DAYS kept), l:<i> publish-to-first-seen lag histogram (fixed buckets),
--   g:<i> gap histogram (seconds between two batches with new articles, log2 buckets), last (server
--   time of the last new article), first (of the first one), n (articles ever), silent (0/1);
--   extraction quality of new articles: q:<f>:fast / q:<f>:slow, moving shares (alpha 0.2 and 0.02
--   per article) of articles with a date (f = date), authors (authors), main text of normal length
--   (text), q:n articles judged; drift (the fields the check found drifting: their slow share, the
--   baseline, is frozen while they drift, so a lasting break never becomes the new normal).
--   x:<reason> requests of the source this crawler refused itself (robots.txt, admission, a trap or
--   scope rule: core/refusals.py), per reason, at most REASONS_MAX reasons (then x:other).
-- KEYS[2] index zset: source -> server time of its last activity (sources.py caps its size)
-- ARGV[1] source name, ARGV[2] kind: "article" | "error" | "refusal" (the site refused us: 401,
-- 403, 429, 451) | "refused" (we refused it: ARGV[5] the reason), ARGV[3] count (>= 1),
-- ARGV[4] days kept (28), ARGV[5] "dated,authored,full" counts of the new articles ("" = not judged),
-- ARGV[6..] lag bucket indexes of the new articles that have one
-- Guarantees: one call, one source, its fields stay bounded (old days deleted here); Redis time.
local t = redis.call("TIME")
local now = tonumber(t[1])
local day = math.floor(now / 86400)
local kind, count, days = ARGV[2], tonumber(ARGV[3]) or 1, tonumber(ARGV[4]) or 28
for i, want in ipairs({"hash", "zset"}) do
  local ty = redis.call("TYPE", KEYS[i]).ok
  if ty ~= want and ty ~= "none" then redis.call("DEL", KEYS[i]) end -- garbage in our key: afresh
end
if kind == "refused" then
  local REASONS_MAX = 32
  local reason = (string.gsub(string.sub(ARGV[5] or "", 1, 40), "[^%w_%-%.]", "_"))
  local field = "x:" .. (reason ~= "" and reason or "other")
  if redis.call("HEXISTS", KEYS[1], field) == 0 then
    local reasons = 0
    for _, name in ipairs(redis.call("HKEYS", KEYS[1])) do
      if string.sub(name, 1, 2) == "x:" then reasons = reasons + 1 end
    end
    if reasons >= REASONS_MAX then field = "x:other" end
  end
  redis.call("HINCRBY", KEYS[1], field, count)
  redis.call("ZADD", KEYS[2], now, ARGV[1])
  return 1
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
  for i = 6, #ARGV do
    redis.call("HINCRBY", KEYS[1], "l:" .. ARGV[i], 1)
  end
  local good = {}
  for n in string.gmatch(ARGV[5] or "", "%d+") do good[#good + 1] = tonumber(n) end
  if #good == 3 and count > 0 then
    local drift = redis.call("HGET", KEYS[1], "drift") or ""
    for i, f in ipairs({"date", "authors", "text"}) do
      local share = math.min(good[i], count) / count
      for _, speed in ipairs({{"fast", 0.2}, {"slow", 0.02}}) do
        local name = "q:" .. f .. ":" .. speed[1]
        local frozen = speed[1] == "slow" and string.find("," .. drift .. ",", "," .. f .. ",", 1, true)
        if not frozen then
          local old = tonumber(redis.call("HGET", KEYS[1], name))
          local keep = (1 - speed[2]) ^ count
          local new = old and (old * keep + share * (1 - keep)) or share
          redis.call("HSET", KEYS[1], name, string.format("%.4f", new))
        end
      end
    end
    redis.call("HINCRBY", KEYS[1], "q:n", count)
  end
end
for _, field in ipairs(redis.call("HKEYS", KEYS[1])) do
  local d = tonumber(string.match(field, "^[aer]:(%d+)$"))
  if d and d <= day - days then redis.call("HDEL", KEYS[1], field) end
end
redis.call("ZADD", KEYS[2], now, ARGV[1])
return 1
