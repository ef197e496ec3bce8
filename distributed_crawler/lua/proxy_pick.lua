-- proxy_pick.lua: weighted random pick of one proxy from the shared pool.
-- KEYS[1] pool zset (member = proxy URL, score = health)
-- ARGV[1] a random number in [0, 1) from the caller (Redis seeds Lua's math.random the same way
--         on every call, so the randomness comes from the client)
-- ARGV[2] PROXY_MIN_SCORE: weight = score - min + 1, so every pooled proxy keeps a chance and a
--         healthier one is picked more often
-- Returns the proxy URL, or false when the pool is empty.
-- Guarantees: read-only; one key (any Redis Cluster slot).
-- Garbage: a score of +inf or -inf counts as PROXY_MIN_SCORE (weight 1), a weight stays within
-- [0.001, 1e15], so the total and the target stay finite; a member is returned as it is (the
-- caller checks that it is a proxy URL). A pool of the wrong Redis type raises WRONGTYPE.
local entries = redis.call("ZRANGE", KEYS[1], 0, -1, "WITHSCORES")
if #entries == 0 then
  return false
end
local min = tonumber(ARGV[2])
local function weight(score)
  local w = tonumber(score) - min + 1
  if w ~= w or w == math.huge or w == -math.huge then return 1 end
  return math.min(math.max(w, 0.001), 1e15)
end
local total = 0
for i = 2, #entries, 2 do
  total = total + weight(entries[i])
end
local target = tonumber(ARGV[1]) * total
for i = 2, #entries, 2 do
  target = target - weight(entries[i])
  if target < 0 then
    return entries[i - 1]
  end
end
return entries[#entries - 1]
