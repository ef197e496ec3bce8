-- domain_hosts.lua: DOMAIN_MAX_HOSTS, hosts allowed per registered domain, for every node at once.
-- KEYS[i] the set of hosts allowed for the registered domain of host i (DOMAIN_HOSTS_KEY); the
--   same key may appear several times (hosts of one domain)
-- ARGV[1] the cap (hosts per domain); ARGV[i + 1] host i
-- Returns one 1 (allowed: a member already, or added while the set had room) or 0 (refused: the
--   set is full) per host, in order.
-- Guarantees: atomic, so no set ever holds more than the cap and two nodes asking about the same
--   new host get the same answer; memory: at most the cap members per domain crawled.
-- Garbage: a key of the wrong Redis type allows its host (the cap is then not applied to that
--   domain; nothing stops the crawl), and is left as it is for the operator.
local cap = tonumber(ARGV[1])
local out = {}
for i, key in ipairs(KEYS) do
  local host = ARGV[i + 1]
  local ok, member = pcall(redis.call, "SISMEMBER", key, host)
  if not ok then
    out[i] = 1
  elseif member == 1 then
    out[i] = 1
  elseif redis.call("SCARD", key) < cap then
    redis.call("SADD", key, host)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
