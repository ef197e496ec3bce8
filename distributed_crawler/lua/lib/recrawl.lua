-- lib/recrawl.lua: the revisit state of one URL, shared by recrawl_move.lua and recrawl_record.lua.
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
-- end of lib/recrawl.lua
