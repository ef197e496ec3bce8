-- near_duplicate.lua: find a stored article whose SimHash is within a Hamming distance of this
-- one; if there is none, store this one (check and add in one step, for every node at once).
-- KEYS, one group per generation read, the current generation first (NEAR_DUPLICATE_WINDOW:
-- the current and the previous one; without a window: one group for ever):
--   urls hash: 8-byte fingerprint (big-endian) -> URL of the article first seen with it
--   one bucket per block of the fingerprint (NEAR_DUPLICATE_DISTANCE + 1 blocks): a string of
--   8-byte fingerprints whose block has this block's value (pigeonhole: two fingerprints within
--   distance d share at least one of d + 1 blocks exactly)
-- ARGV[1] high 32 bits, ARGV[2] low 32 bits of the fingerprint (unsigned decimals);
-- ARGV[3] the article's URL; ARGV[4] the largest distance that counts as a near-duplicate;
-- ARGV[5] keys per generation (1 + blocks); ARGV[6] unix time at which the current
-- generation's keys expire (0 = never)
-- Returns {original URL, distance}: the closest stored article within the distance (the first
-- stored of equals), or {"", -1} when there is none (then this one is stored) or when the
-- closest is this URL itself (a page fetched again: stored again only if it was remembered by
-- the previous generation alone, so it stays remembered).
-- Guarantees: atomic, so of two copies crawled at once by two nodes exactly one is the original;
-- memory per stored article: 8 bytes per bucket + one urls field (docs/news.md), for at most two
-- windows.
-- Garbage: a bucket whose length is not a multiple of 8 is cut to whole entries before this
-- one is appended; an entry without a URL is skipped. A key of the wrong Redis type raises WRONGTYPE.
local hi = tonumber(ARGV[1])
local lo = tonumber(ARGV[2])
local url = ARGV[3]
local limit = tonumber(ARGV[4])
local per_generation = tonumber(ARGV[5])
local expire_at = tonumber(ARGV[6])

local function popcount(x)
  local n = 0
  while x ~= 0 do
    x = bit.band(x, x - 1)
    n = n + 1
  end
  return n
end

local function distance_at(raw, pos)  -- bits between this fingerprint and the entry at pos
  local h, l = struct.unpack(">I4>I4", raw, pos)
  return popcount(bit.bxor(h, hi)) + popcount(bit.bxor(l, lo))
end

-- older generations first, so that of equally close articles the first stored wins
local best, best_distance, best_generation = nil, limit + 1, nil
local current = {}
for first = #KEYS - per_generation + 1, 1, -per_generation do
  for i = first + 1, first + per_generation - 1 do
    local raw = redis.call("GET", KEYS[i]) or ""
    if first == 1 then current[i] = raw end
    for pos = 1, #raw - 7, 8 do
      local d = distance_at(raw, pos)
      if d < best_distance then
        local original = redis.call("HGET", KEYS[first], string.sub(raw, pos, pos + 7))
        if original then
          best, best_distance, best_generation = original, d, first
          if d == 0 then break end
        end
      end
    end
  end
end

local function remembered_now()
  -- this URL within the distance in the current generation (then no second copy is stored)
  for i = 2, per_generation do
    local raw = current[i]
    for pos = 1, #raw - 7, 8 do
      if distance_at(raw, pos) <= limit and redis.call("HGET", KEYS[1], string.sub(raw, pos, pos + 7)) == url then
        return true
      end
    end
  end
  return false
end

if best and best ~= url then return {best, best_distance} end
if best and (best_generation == 1 or remembered_now()) then return {"", -1} end

local entry = struct.pack(">I4>I4", hi, lo)
for i = 2, per_generation do
  local raw = current[i]
  if #raw % 8 ~= 0 then
    redis.call("SET", KEYS[i], string.sub(raw, 1, #raw - #raw % 8))
  end
  redis.call("APPEND", KEYS[i], entry)
end
redis.call("HSET", KEYS[1], entry, url)
if expire_at > 0 then
  for i = 1, per_generation do
    redis.call("EXPIREAT", KEYS[i], expire_at)
  end
end
return {"", -1}
