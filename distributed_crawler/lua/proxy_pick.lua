-- proxy_pick.lua: weighted random pick of one proxy from the shared pool.
-- KEYS[1] pool zset (member = proxy URL, score = health)
-- ARGV[1] a random number in [0, 1) from the caller (Redis seeds Lua's math.random the same way
--         on every call, so the randomness comes from the client)
-- ARGV[2] PROXY_MIN_SCORE: weight = score - min + 1, so every pooled proxy keeps a chance and a
--         healthier one is picked more often
-- ARGV[3..] proxies to pass over: the first 12 hex digits of each one's SHA-1 (the proxies that
--         already failed this request: its retry goes through another one); when every pooled
--         proxy is passed over, all of them count again
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
local avoid = {}
for i = 3, #ARGV do
  avoid[ARGV[i]] = true
end
local passed = {}
local total = 0
if #ARGV >= 3 then
  for i = 1, #entries, 2 do
    if avoid[string.sub(redis.sha1hex(entries[i]), 1, 12)] then passed[i] = true end
  end
end
for i = 2, #entries, 2 do
  if not passed[i - 1] then total = total + weight(entries[i]) end
end
if total == 0 then  -- every proxy failed this request already: any of them
  passed = {}
  for i = 2, #entries, 2 do
    total = total + weight(entries[i])
  end
end
local target = tonumber(ARGV[1]) * total
local last = nil
for i = 2, #entries, 2 do
  if not passed[i - 1] then
    last = entries[i - 1]
    target = target - weight(entries[i])
    if target < 0 then
      return last
    end
  end
end
return last
