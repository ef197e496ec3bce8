-- acl_probe.lua: which commands and pub/sub channels the calling ACL user may not use; touches no data.
-- KEYS: keys a node uses (Redis refuses the call with NOPERM before it runs when the user may not
--   read and write one of them: the caller then asks key by key); KEYS[1], granted by then, is the
--   key argument each command is checked with (a check without one may be refused for the missing
--   key alone: SET on a user with key patterns)
-- ARGV[1] n = number of commands; ARGV[2..n+1] commands, a subcommand as "script|load";
--   ARGV[n+2..] channels. Never EVAL/EVALSHA (or another command whose keys follow a key count):
--   acl_check_cmd on them with a key argument crashes Redis 7.0.15 for a user with key patterns
--   (getKeysUsingKeySpecs reads past the arguments); the caller checks those by calling them.
-- Returns {denied commands, denied channels}. A command this server does not know (a module's,
--   not loaded) is skipped; a channel is checked only when SUBSCRIBE itself is allowed (else
--   SUBSCRIBE is among the denied commands and the channel cannot be told apart).
-- Guarantees: reads and writes nothing (redis.acl_check_cmd only asks the ACL, Redis >= 7.0).
local n = tonumber(ARGV[1])
local denied_commands, denied_channels = {}, {}
local key = KEYS[1]
for i = 2, n + 1 do
  local name = ARGV[i]
  local bar = string.find(name, "|", 1, true)
  local args = bar and {string.sub(name, 1, bar - 1), string.sub(name, bar + 1)} or {name}
  if key and name ~= "subscribe" and name ~= "publish" then
    args[#args + 1] = key -- publish's and subscribe's argument is a channel: checked below
  end
  local ok, allowed = pcall(redis.acl_check_cmd, unpack(args))
  if ok and not allowed then
    denied_commands[#denied_commands + 1] = name
  end
end
if redis.acl_check_cmd("subscribe") then
  for i = n + 2, #ARGV do
    if not redis.acl_check_cmd("subscribe", ARGV[i]) then
      denied_channels[#denied_channels + 1] = ARGV[i]
    end
  end
end
return {denied_commands, denied_channels}
