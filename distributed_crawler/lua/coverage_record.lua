-- coverage_record.lua: what one node saw of one news source's URLs: listed by a sitemap or feed,
-- and what became of each page (events/coverage.py decides the states; this script keeps them).
-- KEYS[1] coverage zset (`{spider}:coverage:<source>`): member = canonical URL, score =
--   code * 2^34 + time (server seconds). code = state (1..6) for a URL no listing named yet, 8 +
--   state (0..6) for a listed URL; state 0 not fetched, 1 failed, 2 refused, 3 skipped, 4 not an
--   article, 5 near-duplicate, 6 stored. time = when first listed (listed URLs), else of the last
--   outcome. So each state of listed URLs is one score range: ZCOUNT counts it without a scan.
-- KEYS[2] index zset `{spider}:sources` (source -> last activity: the source is shown and trimmed)
-- KEYS[3] source hash `{spider}:source:<source>`: cov_evicted += listed URLs dropped over the cap
-- ARGV[1] source name, ARGV[2] window (s), ARGV[3] cap (URLs kept), ARGV[4..] pairs: URL, what
--   ("L" = listed, or a state 1..6 = an outcome)
-- Guarantees: a state only rises (stored > near-duplicate > not an article > skipped > refused >
-- failed > not fetched), so nodes' writes in any order give one result; a URL listed twice keeps
-- its first listing time; entries older than the window are deleted here; at most ARGV[3] URLs
-- are kept: the oldest unlisted outcomes go first, then the oldest listings. Redis time.
local B = 17179869184 -- 2^34: a time in seconds fits below it until the year 2514
local t = redis.call("TIME")
local now = tonumber(t[1])
local window, cap = tonumber(ARGV[2]) or 86400, tonumber(ARGV[3]) or 1000
for i, want in ipairs({"zset", "zset", "hash"}) do
  local ty = redis.call("TYPE", KEYS[i]).ok
  if ty ~= want and ty ~= "none" then redis.call("DEL", KEYS[i]) end -- garbage in our key: afresh
end
local function score(code, time) return string.format("%.0f", code * B + time) end
for i = 4, #ARGV - 1, 2 do
  local url, what = ARGV[i], ARGV[i + 1]
  local old = tonumber(redis.call("ZSCORE", KEYS[1], url))
  local code, time = nil, now
  if old then
    code = math.floor(old / B)
    time = old - code * B
    if code < 0 or code > 14 then code = nil; time = now end -- garbage score: afresh
  end
  if what == "L" then
    if code == nil then
      redis.call("ZADD", KEYS[1], score(8, now), url)
    elseif code < 8 then -- an outcome seen before any listing named the URL: listed now
      redis.call("ZADD", KEYS[1], score(8 + code, now), url)
    end
  else
    local state = tonumber(what)
    if state and state >= 1 and state <= 6 then
      if code == nil then
        redis.call("ZADD", KEYS[1], score(state, now), url)
      elseif code >= 8 then
        if state > code - 8 then redis.call("ZADD", KEYS[1], score(8 + state, time), url) end
      else
        redis.call("ZADD", KEYS[1], score(math.max(state, code), now), url)
      end
    end
  end
end
local cutoff = now - window
for code = 0, 14 do
  redis.call("ZREMRANGEBYSCORE", KEYS[1], score(code, 0), "(" .. score(code, cutoff))
end
local over = redis.call("ZCARD", KEYS[1]) - cap
if over > 0 then
  local unlisted = redis.call("ZCOUNT", KEYS[1], 0, "(" .. score(8, 0))
  local evicted = 0
  while over > 0 do
    -- the oldest entry of the unlisted codes (while any), else of the listed ones
    local low, high = 1, 6
    if unlisted == 0 then low, high = 8, 14 end
    local best, best_time = nil, nil
    for code = low, high do
      local found = redis.call("ZRANGEBYSCORE", KEYS[1], score(code, 0), "(" .. score(code + 1, 0), "WITHSCORES", "LIMIT", 0, 1)
      if found[1] then
        local time = tonumber(found[2]) - code * B
        if best_time == nil or time < best_time then best, best_time = found[1], time end
      end
    end
    if best == nil then break end
    redis.call("ZREM", KEYS[1], best)
    if unlisted > 0 then unlisted = unlisted - 1 else evicted = evicted + 1 end
    over = over - 1
  end
  if evicted > 0 then redis.call("HINCRBY", KEYS[3], "cov_evicted", evicted) end
end
redis.call("ZADD", KEYS[2], now, ARGV[1])
return 1
