-- lib/doorbell.lua: the one message shape of the doorbell channel (queue/doorbell.py `Ring`),
-- prepended to every script whose header says "-- uses: doorbell". Local names only:
-- doorbell_ring(channel, queued, tagged_key, seq): PUBLISH "<queued> <hash tag> <sequence>" to
--   `channel` ("" or nil = ring none). queued > 0: that much work was pushed or made due on the
--   shard whose hash tag `tagged_key` carries; seq = the push sequence counter after a push (a
--   lease that read the counter at or past it saw the push), -1 when the ring is not a push (a
--   host unblocked or made due, revisits moved): never stale. queued 0 ("drained", host_pop.lua):
--   a lease left no due host after the pushes up to seq.
local function doorbell_ring(channel, queued, tagged_key, seq)
  if channel == nil or channel == "" then return end
  local tag = string.match(tagged_key, "{([^}]*)}") or ""
  redis.call("PUBLISH", channel, queued .. " " .. tag .. " " .. (tonumber(seq) or -1))
end
