-- render_verdict.lua: add one PLAYWRIGHT_AUTO sample to the verdict of a host + URL shape.
-- KEYS[1] verdicts hash (field "host|shape" -> "samples:added")
-- ARGV[1] field; ARGV[2] 1 if rendering added content to this page, else 0; ARGV[3] most fields
-- Returns the new value "samples:added".
-- Guarantees: atomic (samples from every node add up); the hash never holds more than ARGV[3]
-- fields (a new field in a full hash evicts a random one: that shape is learnt again);
-- counts stop at 1e9. Garbage: a value that is not "samples:added" with added <= samples starts
-- again at 0:0. A key of the wrong Redis type raises WRONGTYPE.
local field = ARGV[1]
local added = (ARGV[2] == "1") and 1 or 0
local most = tonumber(ARGV[3])
local old = redis.call("HGET", KEYS[1], field)
local samples, hits = 0, 0
if old then
  local a, b = string.match(old, "^(%d+):(%d+)$")
  if a and #a <= 10 and #b <= 10 then
    samples, hits = tonumber(a), tonumber(b)
    if hits > samples then samples, hits = 0, 0 end
  end
elseif redis.call("HLEN", KEYS[1]) >= most then
  local victim = redis.call("HRANDFIELD", KEYS[1])
  if victim then redis.call("HDEL", KEYS[1], victim) end
end
if samples < 1e9 then
  samples = samples + 1
  hits = hits + added
end
local value = string.format("%d:%d", samples, hits)
redis.call("HSET", KEYS[1], field, value)
return value
