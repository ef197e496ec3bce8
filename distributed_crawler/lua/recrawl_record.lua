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
-- ARGV[10] plan: "" = none (the interval rules below), or "plan:<s1>,<s2>,..." (ARTICLE_REVISITS:
--   the next visit is due at first fetch + s(k+1) after k revisits; after the last one the URL
--   leaves the schedule; "plan:" alone ends it at this record)
-- ARGV[11] horizon seconds ("0" = none): a visit whose next due time would fall later than first
--   fetch + horizon is the last one (the URL leaves the schedule)
-- Returns {interval as a string, change, ended}: change 1 = changed, 0 = unchanged (or 304), -1 = first
--   visit, -2 = an error status; ended 1 = the URL left the schedule (state and due time removed);
--   {"0", -3, 0}: nothing stored (no member given and none stored).
-- Intervals (docs/recrawl.md): first visit min; changed max(min, iv / factor); unchanged or 304
--   min(max, iv * factor); error: iv kept within [min, max]. Next due = server now + interval.
--   With a plan, the next due time is the plan's (iv = the time until then, at least 1 ms). A state
--   older than the first-fetch time (an older release's) counts its next record as its first fetch.
-- Validators: a 2xx stores the ETag / Last-Modified it sent (none = forgotten); a 304 or an error
--   keeps the stored ones unless the response sent new ones.
-- Guarantees: the state and the due time are written together (one ZADD: a URL is in the schedule
--   once, whatever node records it, even twice after a redelivery). Garbage state = first visit.
-- uses: recrawl (lib/recrawl.lua: parse_state, format_state)
local fp, low, high, factor = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local outcome, digest, etag, lastmod, member = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local plan, horizon = ARGV[10] or "", tonumber(ARGV[11] or "0") or 0
local t = redis.call("TIME")
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local old = parse_state(redis.call("HGET", KEYS[2], fp))
if member == "" then
  if not old then return {"0", -3, 0} end
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
local born, step, ends = now, 0, 0
if old and old.born then born, step = old.born, old.step + 1 end
local due = now + iv
if string.sub(plan, 1, 5) == "plan:" then
  local offsets = {}
  for n in string.gmatch(string.sub(plan, 6), "[^,]+") do offsets[#offsets + 1] = tonumber(n) end
  if step >= #offsets then due = nil else
    due, ends = born + offsets[step + 1], born + offsets[#offsets]
    iv = math.max(0.001, due - now)
  end
elseif horizon > 0 then
  ends = born + horizon
  if due > ends then due = nil end
end
if not due then
  redis.call("HDEL", KEYS[2], fp)
  redis.call("ZREM", KEYS[1], fp)
  return {string.format("%.3f", iv), change, 1}
end
local state = {iv = iv, born = born, step = step, ends = ends, digest = "", etag = etag, lastmod = lastmod, member = member}
if outcome == "body" then
  state.digest = digest
elseif old then
  state.digest = old.digest
  if etag == "" then state.etag = old.etag end
  if lastmod == "" then state.lastmod = old.lastmod end
end
redis.call("HSET", KEYS[2], fp, format_state(state))
redis.call("ZADD", KEYS[1], due, fp)
return {string.format("%.3f", iv), change, 0}
