-- seed_take.lua: take a batch of seeds and hold them until the node's requests are in the frontier.
-- KEYS[1] the seed key (list / set / zset: scrapy-redis's start_urls), KEYS[2] its taken zset
-- (hold -> deadline, server time in ms); both in one Cluster slot (queue/seedkey.py).
-- ARGV: kind ("list" | "set" | "zset"), n, lease in ms, hold prefix (node and call, no newline).
-- A hold is "<prefix><i>\n<score>\n<raw seed>": the seed is kept whole, so a reclaim puts back
-- exactly what was taken (a zset seed with its score), and two nodes never share a hold.
-- First up to n holds past their deadline (their node died before it acked) go back to the seed
-- key, in front for a list: any node's next take reclaims them.
-- Returns {reclaimed, hold, hold, ...}. Garbage: a hold without two newlines is dropped.
local clock = redis.call("TIME")
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local kind, n, lease, prefix = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]

local expired = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", now, "LIMIT", 0, n)
for _, hold in ipairs(expired) do
  local a = string.find(hold, "\n", 1, true)
  local b = a and string.find(hold, "\n", a + 1, true)
  if b then
    local score, raw = string.sub(hold, a + 1, b - 1), string.sub(hold, b + 1)
    if kind == "zset" then
      redis.call("ZADD", KEYS[1], tonumber(score) or 0, raw)
    elseif kind == "set" then
      redis.call("SADD", KEYS[1], raw)
    else
      redis.call("LPUSH", KEYS[1], raw)
    end
  end
  redis.call("ZREM", KEYS[2], hold)
end

local seeds, scores = {}, {}
if kind == "zset" then
  local flat = redis.call("ZPOPMAX", KEYS[1], n)
  for i = 1, #flat, 2 do
    seeds[#seeds + 1] = flat[i]
    scores[#scores + 1] = flat[i + 1]
  end
elseif kind == "set" then
  seeds = redis.call("SPOP", KEYS[1], n)
else
  seeds = redis.call("LPOP", KEYS[1], n) or {}
end

local result = {#expired}
for i, raw in ipairs(seeds) do
  local hold = prefix .. i .. "\n" .. (scores[i] or "0") .. "\n" .. raw
  redis.call("ZADD", KEYS[2], now + lease, hold)
  result[#result + 1] = hold
end
return result
