-- refused.lua: count refused requests per host and reason, in bounded memory.
-- KEYS[1]: {spider}:refused (hash "<reason> <host>" -> count)
-- ARGV[1]: most fields kept; then pairs of (field, count to add), field = "<reason> <host>".
-- A field not yet there while the hash is full goes to "<reason> *" (every other host), so a
-- crawl refusing millions of hosts keeps at most ARGV[1] + one field per reason.
-- Garbage: a key of another type raises WRONGTYPE (the caller logs it once and drops the counts).
local cap = tonumber(ARGV[1]) or 0
for i = 2, #ARGV - 1, 2 do
  local field, n = ARGV[i], tonumber(ARGV[i + 1]) or 0
  if redis.call("HEXISTS", KEYS[1], field) == 0 and redis.call("HLEN", KEYS[1]) >= cap then
    field = string.match(field, "^[^ ]*") .. " *"
  end
  redis.call("HINCRBY", KEYS[1], field, n)
end
return 0
