-- host_block.lua: block one host for every node (429/503/Retry-After), or reset its backoff level.
-- KEYS[1] the ready zset (SCHEDULER_READY_KEY): host -> server time it may be served next
-- KEYS[2] the host's hash (SCHEDULER_HOST_KEY): fields bo (backoff level), until (blocked until,
--   server time), why (last block reason); the others (iv, cd, pages, max) are left alone
-- ARGV[1] mode: "block" or "reset"
-- block: ARGV[2] host (its member in the ready zset), ARGV[3] seconds ("" = adaptive: no
--   Retry-After), ARGV[4] reason, ARGV[5] base, ARGV[6] cap, ARGV[7] random in [0, 1)
--   Retry-After: delay = min(seconds, cap); bo is left as it is.
--   Adaptive: bo += 1, step = min(cap, base * 2^(bo-1)), delay = step/2 + step/2 * random (equal
--   jitter). A host still blocked (until > now) is not escalated: the 429s of requests that were
--   in flight when the first one came back are one event, not bo of them; the call returns the
--   time left.
--   Then until = max(until, now + delay), why = reason, and the host's ready score is raised to
--   until if it is in the ready zset (ZADD XX GT: a host without pending requests is not added;
--   enqueue adds it at max(now, until)). Returns the seconds the host stays blocked, as a string.
-- unblock: ARGV[2] host, ARGV[3] reason: lift a block set with exactly this reason (robots.txt
--   pending: the fetching node lifts it once the file is cached, so the requests waiting for it
--   are served after one interval instead of after the block's length); until = 0 and the host's
--   ready score set to now + its interval (max of iv, cd, ad: the robots.txt request counts as one
--   of the host's requests), or lowered to now when it has none, if it is in the ready zset. A block for another reason (a 429 that
--   came meanwhile) stands. ARGV[4] doorbell channel ("" = none): rung (lib/doorbell.lua) when lifted, so
--   idle nodes (asleep until the block's end) pop the host's requests now. Returns "1" when
--   lifted, else "0".
-- Any other mode does nothing and returns "0".
-- reset: bo = 0 (a node got a success from a host whose lease said bo > 0); until is kept (a block
--   another node set since stands). A host without a hash gets none. Returns "0".
-- Garbage: bo that is not an integer in [0, 64] counts as 0; until that is not a finite number or
--   lies more than max(cap, 3600) s ahead counts as 0 (no block); ARGV that are not finite numbers
--   take defaults (seconds -> adaptive, base 1, cap 60, random 0.5). A key of the wrong Redis type
--   raises WRONGTYPE. Both keys are in KEYS (one spider's hash tag: one Cluster slot).
-- uses: doorbell (lib/doorbell.lua: doorbell_ring)
-- uses: block (lib/block.lua: block_num, block_now, block_host, unblock_host)
local ready, hash = KEYS[1], KEYS[2]
local mode = ARGV[1]
if mode == "reset" then
  if redis.call("EXISTS", hash) == 1 then
    redis.call("HSET", hash, "bo", 0)
  end
  return "0"
elseif mode == "unblock" then
  -- the host's interval counts from the robots.txt request, which went to the same site
  local lifted = unblock_host(ready, hash, ARGV[2] or "", ARGV[3] or "", ARGV[4] or "", block_now(), 1, false)
  return lifted and "1" or "0"
elseif mode ~= "block" then
  return "0" -- an unknown mode does nothing
end

local base = block_num(ARGV[5], 1)
local cap = block_num(ARGV[6], 60)
if base <= 0 then base = 1 end
if cap < 0 then cap = 60 end
local rand = block_num(ARGV[7], 0.5)
if rand < 0 or rand >= 1 then rand = 0.5 end
local left = block_host(ready, hash, ARGV[2] or "", block_num(ARGV[3], nil), ARGV[4] or "", base, cap, rand, block_now())
return string.format("%.3f", left)
