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
-- Up to n entries of codes low..high, oldest first (an equal time: the lower code first; within a
-- code ZRANGEBYSCORE's order): one read per code, whatever n is, then merged here.
local function oldest(low, high, n)
  local runs, at = {}, {}
  for code = low, high do
    runs[code] = redis.call("ZRANGEBYSCORE", KEYS[1], score(code, 0), "(" .. score(code + 1, 0), "WITHSCORES", "LIMIT", 0, n)
    at[code] = 1
  end
  local picked = {}
  while #picked < n do
    local best, best_time = nil, nil
    for code = low, high do
      local found = runs[code]
      if found[at[code]] then
        local time = tonumber(found[at[code] + 1]) - code * B
        if best_time == nil or time < best_time then best, best_time = code, time end
      end
    end
    if best == nil then break end
    picked[#picked + 1] = runs[best][at[best]]
    at[best] = at[best] + 2
  end
  return picked
end
local function remove(members)
  for i = 1, #members, 1000 do -- ZREM takes many members; unpack's stack holds a thousand
    redis.call("ZREM", KEYS[1], unpack(members, i, math.min(i + 999, #members)))
  end
end
local over = redis.call("ZCARD", KEYS[1]) - cap
if over > 0 then
  -- the oldest unlisted outcomes go first, then the oldest listings
  local unlisted = redis.call("ZCOUNT", KEYS[1], 0, "(" .. score(8, 0))
  local first = math.min(over, unlisted)
  local gone = first > 0 and oldest(1, 6, first) or {}
  remove(gone)
  -- an unlisted count left that codes 1..6 do not hold (a garbage code): nothing more is evicted
  if #gone == first and over > first then
    local evicted = oldest(8, 14, over - first)
    remove(evicted)
    if #evicted > 0 then redis.call("HINCRBY", KEYS[3], "cov_evicted", #evicted) end
  end
end
redis.call("ZADD", KEYS[2], now, ARGV[1])
return 1
