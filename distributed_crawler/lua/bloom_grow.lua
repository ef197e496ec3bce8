-- bloom_grow.lua: add the next layer to a bitmap Bloom filter, once, whoever asks first.
-- KEYS[1] the layer meta hash; KEYS[2..] the new layer's pieces
-- ARGV[1] number of layers the caller saw (the new layer gets this index)
-- ARGV[2] backend name, ARGV[3] overall capacity, ARGV[4] overall error rate (kept for stats)
-- ARGV[5..5+2p-1] for each piece: its byte length; then the layer's meta fields as name, value
--   pairs (L<i>:cap, L<i>:p, L<i>:m, L<i>:k, L<i>:pbits, L<i>:pieces)
-- Returns 1 if this call added the layer, 0 if another node already had, -1 if the meta hash is
-- corrupt (its "layers" field is not a decimal integer in 0..64; enqueue.lua says code 3):
-- nothing was written, an operator must reset the filter (`dcrawl dedup reset SPIDER`).
-- Guarantees: pieces are created at their final length in one SETRANGE each (exact allocation,
-- no greedy string growth); the layer count only moves when the pieces exist. A meta hash of
-- the wrong Redis type raises WRONGTYPE.
local seen = tonumber(ARGV[1])
local layers = redis.call("HGET", KEYS[1], "layers") or "0"
if #layers > 15 or not string.match(layers, "^%d+$") or tonumber(layers) > 64 then return -1 end
if tonumber(layers) ~= seen then return 0 end
local pieces = #KEYS - 1
for j = 1, pieces do
  if redis.call("EXISTS", KEYS[j + 1]) == 0 then
    redis.call("SETRANGE", KEYS[j + 1], tonumber(ARGV[4 + j]) - 1, "\0")
  end
end
local fields = {}
for i = 5 + pieces, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call("HSET", KEYS[1], "backend", ARGV[2], "capacity", ARGV[3], "error_rate", ARGV[4],
  "L" .. seen .. ":n", 0, unpack(fields))
redis.call("HSET", KEYS[1], "layers", seen + 1)
return 1
