-- proxy_revive.lua: give dead proxies another chance once they have been dead long enough.
-- KEYS[1] pool zset; KEYS[2] dead hash (proxy -> JSON {error, since, score})
-- ARGV[1] PROXY_REVIVE_SECONDS (> 0); ARGV[2] score a revived proxy starts with
-- Returns a flat list: proxy, last error, proxy, last error, ... of the revived ones.
-- Guarantees: atomic; "dead long enough" is judged on the server clock; an entry that does not
-- decode is revived too (it cannot tell its age). KEYS[1] and KEYS[2] share a hash slot.
-- Garbage: an entry that is not a JSON object, or whose "since" is not a finite number (NaN,
-- inf, a string that is no number, a table...) or lies over an hour ahead, cannot tell its age: it is
-- revived. The error returned is the entry's "error" if a string or number (cut at 500 bytes),
-- "" otherwise. A key of the wrong Redis type raises WRONGTYPE.
local t = redis.call("TIME")
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local after = tonumber(ARGV[1])
local dead = redis.call("HGETALL", KEYS[2])
local revived = {}
for i = 1, #dead, 2 do
  local ok, entry = pcall(cjson.decode, dead[i + 1])
  if not (ok and type(entry) == "table") then entry = {} end
  local since = (type(entry.since) == "number" or type(entry.since) == "string") and tonumber(entry.since)
  -- age unknown (not a number, NaN, or more than an hour in the future, +inf included; the hour
  -- allows for a failover to a server whose clock is behind): revive, or it might stay dead forever
  if not since or since ~= since or since > now + 3600 or now - since >= after then
    redis.call("ZADD", KEYS[1], "NX", ARGV[2], dead[i])
    redis.call("HDEL", KEYS[2], dead[i])
    revived[#revived + 1] = dead[i]
    local err = entry.error
    revived[#revived + 1] = (type(err) == "string" or type(err) == "number") and string.sub(tostring(err), 1, 500) or ""
  end
end
return revived
