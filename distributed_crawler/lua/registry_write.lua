-- registry_write.lua: change the source registry and move its version, all or nothing.
-- KEYS[1] registry hash (`{spider}:registry`: site -> source JSON)
-- KEYS[2] version string (`{spider}:registry:version`: nodes re-read the hash when it moves)
-- ARGV[1] n = entries to set, then n pairs (site, JSON), then the sites to remove
-- Returns the new version. Guarantees: a key of another type (or a version that is not a whole
-- number) changes nothing and is an error naming it; otherwise every entry and the version move
-- together, so a node never sees a registry change without its version.
local kind = redis.call("TYPE", KEYS[1]).ok
if kind ~= "hash" and kind ~= "none" then
  return redis.error_reply("WRONGTYPE " .. KEYS[1] .. " is a " .. kind .. ", not a hash")
end
kind = redis.call("TYPE", KEYS[2]).ok
if kind ~= "string" and kind ~= "none" then
  return redis.error_reply("WRONGTYPE " .. KEYS[2] .. " is a " .. kind .. ", not a string")
end
local version = redis.call("GET", KEYS[2])
if version and not string.match(version, "^%d+$") then
  return redis.error_reply("BADVERSION " .. KEYS[2] .. " is not a whole number")
end
local n = tonumber(ARGV[1]) or 0
for i = 0, n - 1 do
  redis.call("HSET", KEYS[1], ARGV[2 + 2 * i], ARGV[3 + 2 * i])
end
for i = 2 + 2 * n, #ARGV do
  redis.call("HDEL", KEYS[1], ARGV[i])
end
return redis.call("INCR", KEYS[2])
