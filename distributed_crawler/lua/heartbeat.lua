-- heartbeat.lua: record that a node is alive, with its fields and counters, in Redis server time.
-- KEYS[1] nodes zset (node id -> last heartbeat, server time)
-- KEYS[2] this node's hash (its latest fields; expires after ARGV[2] s without a heartbeat)
-- KEYS[3] last-known hash (node id -> JSON of its latest fields; kept after the node hash expires)
-- KEYS[4] alerted hash (node id -> time its death was alerted; a heartbeat clears it)
-- KEYS[5] per-minute history hash (fields p:<minute>, i:<minute>, e:<minute>; the last hour)
-- KEYS[6] cluster stats hash (pages, items, errors since the crawl began)
-- ARGV[1] node id; ARGV[2] node hash TTL (s); ARGV[3] history TTL (s)
-- ARGV[4], ARGV[5], ARGV[6] pages, items, errors since this node's last recorded heartbeat
-- ARGV[7] JSON snapshot of the fields; ARGV[8..] field, value pairs for the node hash
-- Returns the server time ("seconds.millis").
-- Guarantees: every write of one heartbeat happens together, stamped with one server-clock time,
-- so liveness never depends on the clocks of the nodes.
-- Garbage: a counter field of KEYS[5] or KEYS[6] that is not an integer (or would overflow) is
-- reset to this heartbeat's delta (what it held is not a count any more); a key of the wrong
-- Redis type still raises WRONGTYPE (the caller names the key and waits).
local t = redis.call("TIME")
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local stamp = string.format("%.3f", now)
local id = ARGV[1]
redis.call("ZADD", KEYS[1], now, id)
redis.call("HSET", KEYS[2], "last_seen", stamp, unpack(ARGV, 8))
redis.call("EXPIRE", KEYS[2], ARGV[2])
redis.call("HSET", KEYS[3], id, ARGV[7])
redis.call("HDEL", KEYS[4], id)
local minute = math.floor(now / 60)
local function add(key, field, delta)
  if type(redis.pcall("HINCRBY", key, field, delta)) == "table" then
    redis.call("HSET", key, field, delta) -- not an integer: reset (raises WRONGTYPE on a non-hash)
  end
end
local names = {"pages", "items", "errors"}
for i, prefix in ipairs({"p", "i", "e"}) do
  local delta = tonumber(ARGV[3 + i])
  if delta > 0 then
    add(KEYS[5], prefix .. ":" .. minute, delta)
    add(KEYS[6], names[i], delta)
  end
end
-- Drop minutes older than the hour kept (a few back, in case no heartbeat came for a while).
for m = minute - 75, minute - 61 do
  redis.call("HDEL", KEYS[5], "p:" .. m, "i:" .. m, "e:" .. m)
end
redis.call("EXPIRE", KEYS[5], ARGV[3])
return stamp
