-- coverage_counts.lua: the coverage counts of many sources in one call (events/coverage.py reads
-- them for `dcrawl sources` and the coverage_low check: one call per 1,000 sources, not 9 commands
-- each). Read only.
-- KEYS[2i-1] source i's coverage zset (`{spider}:coverage:<source>`, lua/coverage_record.lua's
--   score layout: code * 2^34 + time, code = 8 + state for a listed URL), KEYS[2i] its hash
--   (`{spider}:source:<source>`). All keys share the spider's hash tag: one slot on a Cluster.
-- ARGV[1] now (server seconds), ARGV[2] window (s), ARGV[3] grace (s)
-- Returns per source 10 integers: listed URLs in the window per state 0..6, those not fetched and
-- listed within the grace, cov_evicted, coverage_low (0/1). A key of another type reads as zeros.
local B = 17179869184
local now, window, grace = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local since = math.max(0, math.floor(now - window))
local fresh_since = math.max(0, math.floor(now - grace))
local function count(key, code, from)
  local ok, n = pcall(redis.call, "ZCOUNT", key, string.format("%.0f", code * B + from), string.format("(%.0f", (code + 1) * B))
  if ok and type(n) == "number" then return n end
  return 0
end
local function field(key, name)
  local ok, v = pcall(redis.call, "HGET", key, name)
  if ok and v then return math.max(0, math.floor(tonumber(v) or 0)) end
  return 0
end
local out = {}
for i = 1, #KEYS - 1, 2 do
  for state = 0, 6 do out[#out + 1] = count(KEYS[i], 8 + state, since) end
  out[#out + 1] = count(KEYS[i], 8, fresh_since)
  out[#out + 1] = field(KEYS[i + 1], "cov_evicted")
  out[#out + 1] = field(KEYS[i + 1], "coverage_low") == 1 and 1 or 0
end
return out
