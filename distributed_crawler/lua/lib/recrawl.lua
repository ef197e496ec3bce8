-- lib/recrawl.lua: the revisit state of one URL, shared by recrawl_move.lua, recrawl_record.lua
-- and recrawl_ack.lua.
-- Prepended to every script whose header says "-- uses: recrawl". Local names only.
-- A state is one field of the state hash (fingerprint -> value), the value five parts joined by
-- "\n": timing, content digest, ETag, Last-Modified, queue member
-- (queue/envelope.py: "[0:<priority>:]<payload>", the request a revisit pushes). Header values,
-- URLs and JSON never hold a raw newline, so the member is simply everything after the fourth one.
-- Timing: "interval" (a schedule that never ends, as older releases wrote it) or
-- "interval;born;step;end": server time of the first fetch, revisits recorded since, server time
-- after which the URL leaves the schedule (0 = never; ARTICLE_REVISITS or a rule's horizon).
-- parse_state(value) -> {iv, born, step, ends, digest, etag, lastmod, member} (born nil for the old
-- form) or nil for garbage (not a string, an interval that is not a finite number > 0, timing numbers
-- that are not numbers, a member that is neither "<n>:<n>:<text>" nor a payload: JSON or an http(s) URL).
local function parse_state(value)
  if type(value) ~= "string" then return nil end
  local parts, start = {}, 1
  for _ = 1, 4 do
    local stop = string.find(value, "\n", start, true)
    if not stop then return nil end
    parts[#parts + 1] = string.sub(value, start, stop - 1)
    start = stop + 1
  end
  local ivtext, borntext, steptext, endtext = string.match(parts[1], "^([^;]+);([^;]+);([^;]+);([^;]+)$")
  if not ivtext then ivtext = parts[1] end
  local iv = tonumber(ivtext)
  if not iv or iv ~= iv or iv <= 0 or iv > 1e12 then return nil end
  local born, step, ends = nil, 0, 0
  if borntext then
    born, step, ends = tonumber(borntext), tonumber(steptext), tonumber(endtext)
    if not (born and step and ends) or born ~= born or step ~= step or ends ~= ends then return nil end
  end
  local member = string.sub(value, start)
  if not (string.match(member, "^%d+:%-?%d+:.") or string.match(member, "^{") or string.match(member, "^https?://")) then
    return nil
  end
  return {iv = iv, born = born, step = step, ends = ends, digest = parts[2], etag = parts[3], lastmod = parts[4], member = member}
end

local function format_state(s)
  local timing = string.format("%.3f", s.iv)
  if s.born then timing = timing .. string.format(";%.3f;%d;%.3f", s.born, s.step, s.ends) end
  return timing .. "\n" .. s.digest .. "\n" .. s.etag .. "\n" .. s.lastmod .. "\n" .. s.member
end
-- record_visit(schedule, state_key, a, now): recrawl_record.lua's work for one fetch, `a` its 11
-- arguments (ARGV[1..11] there), `now` the server time; returns its reply. Shared with recrawl_ack.lua.
local function record_visit(schedule, state_key, a, now)
  local fp, low, high, factor = a[1], tonumber(a[2]), tonumber(a[3]), tonumber(a[4])
  local outcome, digest, etag, lastmod, member = a[5], a[6], a[7], a[8], a[9]
  local plan, horizon = a[10] or "", tonumber(a[11] or "0") or 0
  local old = parse_state(redis.call("HGET", state_key, fp))
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
    redis.call("HDEL", state_key, fp)
    redis.call("ZREM", schedule, fp)
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
  redis.call("HSET", state_key, fp, format_state(state))
  redis.call("ZADD", schedule, due, fp)
  return {string.format("%.3f", iv), change, 0}
end
-- end of lib/recrawl.lua
