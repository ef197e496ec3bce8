-- proxy_revive.lua: give dead proxies another chance once they have been dead long enough.
-- KEYS[1] pool zset; KEYS[2] dead hash (proxy -> JSON {error, since, score})
-- ARGV[1] PROXY_REVIVE_SECONDS (> 0); ARGV[2] score a revived proxy starts with
-- Returns a flat list: proxy, last error, proxy, last error, ... of the revived ones.
-- Guarantees: atomic; "dead long enough" is judged on the server clock; an entry that does not
-- decode is revived too (it cannot tell its age). KEYS[1] and KEYS[2] share a hash slot.
local t = redis.call("TIME")
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local after = tonumber(ARGV[1])
local dead = redis.call("HGETALL", KEYS[2])
local revived = {}
for i = 1, #dead, 2 do
  local ok, entry = pcall(cjson.decode, dead[i + 1])
  local since = ok and type(entry) == "table" and tonumber(entry.since) or nil
  if since == nil or now - since >= after then
    redis.call("ZADD", KEYS[1], "NX", ARGV[2], dead[i])
    redis.call("HDEL", KEYS[2], dead[i])
    revived[#revived + 1] = dead[i]
    revived[#revived + 1] = ok and type(entry) == "table" and tostring(entry.error or "") or ""
  end
end
return revived
