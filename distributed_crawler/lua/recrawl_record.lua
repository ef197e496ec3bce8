-- recrawl_record.lua: a revisitable URL was fetched; adapt its interval and schedule its next visit.
-- KEYS[1] schedule zset: fingerprint -> due time (Redis server time, seconds)
-- KEYS[2] state hash: fingerprint -> revisit state (lib/recrawl.lua)
-- ARGV[1] fingerprint
-- ARGV[2] min seconds, ARGV[3] max seconds (the URL's rule or meta["recrawl"], 0 < min <= max)
-- ARGV[4] factor (>= 1)
-- ARGV[5] outcome: "body" (a 2xx whose content digest is ARGV[6]) | "304" (not modified) |
--   "error" (any other status: the interval is kept)
-- ARGV[6] content digest ("body" only)
-- ARGV[7] ETag, ARGV[8] Last-Modified of the response ("" = none sent)
-- ARGV[9] queue member the next revisit pushes ("[0:<priority>:]<payload>", queue/envelope.py; "" = keep the stored one)
-- Returns {interval as a string, change}: change 1 = changed, 0 = unchanged (or 304), -1 = first
--   visit, -2 = an error status; {"0", -3}: nothing stored (no member given and none stored).
-- Intervals (docs/recrawl.md): first visit min; changed max(min, iv / factor); unchanged or 304
--   min(max, iv * factor); error: iv kept within [min, max]. Next due = server now + interval.
-- Validators: a 2xx stores the ETag / Last-Modified it sent (none = forgotten); a 304 or an error
--   keeps the stored ones unless the response sent new ones.
-- Guarantees: the state and the due time are written together (one ZADD: a URL is in the schedule
--   once, whatever node records it, even twice after a redelivery). Garbage state = first visit.
-- uses: recrawl (lib/recrawl.lua: parse_state, format_state)
local fp, low, high, factor = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local outcome, digest, etag, lastmod, member = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local t = redis.call("TIME")
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local old = parse_state(redis.call("HGET", KEYS[2], fp))
if member == "" then
  if not old then return {"0", -3} end
  member = old.member
end
local iv, change
if not old then
  iv, change = low, -1
elseif outcome == "304" then
  iv, change = old.iv * factor, 0
elseif outcome == "body" then
  if digest ~= old.digest then iv, change = old.iv / factor, 1 else iv, change = old.iv * factor, 0 end
else
  iv, change = old.iv, -2
end
iv = math.min(high, math.max(low, iv))
local state = {iv = iv, digest = "", etag = etag, lastmod = lastmod, member = member}
if outcome == "body" then
  state.digest = digest
elseif old then
  state.digest = old.digest
  if etag == "" then state.etag = old.etag end
  if lastmod == "" then state.lastmod = old.lastmod end
end
redis.call("HSET", KEYS[2], fp, format_state(state))
redis.call("ZADD", KEYS[1], now + iv, fp)
return {string.format("%.3f", iv), change}
