-- proxy_record.lua: record one success or failure of a proxy, shared by every node.
-- KEYS[1] pool zset (score = health); KEYS[2] dead hash (proxy -> JSON {error, since, score})
-- ARGV[1] proxy URL; ARGV[2] delta (+1 success, negative failure); ARGV[3] max score;
-- ARGV[4] PROXY_MIN_SCORE; ARGV[5] error text (failures)
-- Returns {state, score}: state "ok", "failed", "evicted" (this call moved it to dead) or "gone"
-- (not in the pool: removed, or evicted by another node's failure).
-- Guarantees: atomic; exactly one caller sees "evicted" per eviction; the eviction time is the
-- server clock. KEYS[1] and KEYS[2] must share a Redis Cluster hash slot.
-- Garbage: a pool score of +inf or -inf counts as PROXY_MIN_SCORE (the returned and stored
-- scores are always finite; the dead entry is always valid JSON). A key of the wrong Redis type
-- raises WRONGTYPE.
local score = redis.call("ZSCORE", KEYS[1], ARGV[1])
if not score then
  return {"gone", ""}
end
score = tonumber(score)
if score ~= score or score == math.huge or score == -math.huge then score = tonumber(ARGV[4]) end
local new = score + tonumber(ARGV[2])
local max = tonumber(ARGV[3])
if new > max then
  new = max
end
if tonumber(ARGV[2]) >= 0 then
  redis.call("ZADD", KEYS[1], new, ARGV[1])
  return {"ok", tostring(new)}
end
if new < tonumber(ARGV[4]) then
  local t = redis.call("TIME")
  local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
  -- dead entry first, then out of the pool: a write refused at maxmemory never loses the proxy
  redis.call("HSET", KEYS[2], ARGV[1], cjson.encode({error = ARGV[5], since = now, score = new}))
  redis.call("ZREM", KEYS[1], ARGV[1])
  return {"evicted", tostring(new)}
end
redis.call("ZADD", KEYS[1], new, ARGV[1])
return {"failed", tostring(new)}
