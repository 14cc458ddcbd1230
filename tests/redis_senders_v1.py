"""The sender scripts of the spamd before the packed sender counts (one hash field a count, "<sender>:d|f|i|o"),
verbatim: they write the state a running site holds at the upgrade, for the tests that the new scripts and
readers take it over (tests/test_redis_senders_packed.py). Not used by spamd.
"""

# ruff: noqa: E501

# Lua helpers (spamd/store/redis/summary.py then) for the scripts that keep the summary (prepended to their text).
SUMMARY_LUA = """
local function summary_read(key, name)
  local s = {0, 0, 0, 0, 0, 0, 0, 0, '-'}
  local line = redis.call('HGET', key, name)
  if line then
    local i = 1
    for w in string.gmatch(line, '%S+') do
      if i < 9 then s[i] = tonumber(w) else s[i] = w end
      i = i + 1
    end
  end
  return s
end
local function summary_write(key, name, s)
  if s[1] == 0 and s[2] == 0 and s[3] == 0 and s[6] == 0 and s[7] == 0 then
    redis.call('HDEL', key, name)
  else
    redis.call('HSET', key, name, string.format('%d %d %d %d %d %d %d %d %s',
      s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9]))
  end
end
"""


# way_of over every sender of a user's hash: {to Junk, to the inbox}.
TURNED_FUNCTION = """
local function turned_senders(hash, moves, share)
  local counts = {}
  local flat = redis.call('HGETALL', hash)
  for j = 1, #flat, 2 do
    local sender, which = string.match(flat[j], '^(.*):(%a)$')
    if sender then
      local c = counts[sender]
      if not c then c = {d = 0, f = 0, i = 0, o = 0}; counts[sender] = c end
      c[which] = tonumber(flat[j + 1])
    end
  end
  local junk, inbox = 0, 0
  if moves > 0 then
    for _, c in pairs(counts) do
      if c.d > 0 then
        local in_junk = math.min(math.max(c.f - c.o + c.i, 0), c.d)
        if c.o >= moves and c.d - in_junk >= share * c.d then
          inbox = inbox + 1
        elseif c.i >= moves and in_junk >= share * c.d then
          junk = junk + 1
        end
      end
    end
  end
  return {junk, inbox}
end
"""


FIRST_SENDER = 10
_BOUNDS = (
    SUMMARY_LUA
    + """
local moves, share, uname, skey = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9], KEYS[4]
local rule = ARGV[7] .. ':' .. ARGV[8]
local sum = summary_read(skey, uname)
if redis.call('EXISTS', KEYS[2]) == 0 then sum[4], sum[5] = 0, 0 end  -- new, or expired: nothing turned
local recount = sum[9] ~= rule
-- way_of (spamd/people/senders.py) of one sender's counts: 1 to Junk, -1 to the inbox, 0 neither.
local function way(d, f, i, o)
  if d == 0 or moves == 0 then return 0 end
  local in_junk = math.min(math.max(f - o + i, 0), d)
  if o >= moves and d - in_junk >= share * d then return -1 end
  if i >= moves and in_junk >= share * d then return 1 end
  return 0
end
local function way_of_sender(sender)
  local c = redis.call('HMGET', KEYS[1], sender .. ':d', sender .. ':f', sender .. ':i', sender .. ':o')
  return way(tonumber(c[1] or '0'), tonumber(c[2] or '0'), tonumber(c[3] or '0'), tonumber(c[4] or '0'))
end
local function turn(w, sign)
  if w == 1 then sum[4] = sum[4] + sign elseif w == -1 then sum[5] = sum[5] + sign end
end
local function turn_all(sign)  -- the senders of ARGV, before (-1) and after (+1) their counts change
  if recount then return end
  for i = FIRST_SENDER, #ARGV do turn(way_of_sender(ARGV[i]), sign) end
end
local function bound(at, cap, hash)
  local n = redis.call('ZCARD', at)
  if n > cap then
    local gone = redis.call('ZPOPMIN', at, n - cap)
    if hash then
      for j = 1, #gone, 2 do
        local s = gone[j]
        if not recount then turn(way_of_sender(s), -1) end
        redis.call('HDEL', hash, s .. ':d', s .. ':f', s .. ':i', s .. ':o')
      end
    end
  end
end
local function count(sender, field, now)
  redis.call('HINCRBY', KEYS[1], sender .. field, 1)
  redis.call('ZADD', KEYS[2], now, sender)
end
local function finish()
  turn_all(1)
  bound(KEYS[2], tonumber(ARGV[4]), KEYS[1])
  bound(KEYS[3], tonumber(ARGV[5]), false)
  for i = 1, 3 do redis.call('EXPIRE', KEYS[i], tonumber(ARGV[6])) end
  if recount then
    local turned = turned_senders(KEYS[1], moves, share)
    sum[4], sum[5], sum[9] = turned[1], turned[2], rule
  end
  sum[6], sum[7] = redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3])
  sum[8] = tonumber(redis.call('TIME')[1]) + tonumber(ARGV[6])
  summary_write(skey, uname, sum)
end
"""
)

DELIVER_LUA = (
    TURNED_FUNCTION
    + _BOUNDS
    + """
local key, filed, now = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
turn_all(-1)
for i = FIRST_SENDER, #ARGV do
  count(ARGV[i], ':d', now)
  if filed == 1 then count(ARGV[i], ':f', now) end
end
redis.call('ZADD', KEYS[3], now * 2 + filed, key)
finish()
return 1
"""
).replace("FIRST_SENDER", str(FIRST_SENDER))

MOVE_LUA = (
    TURNED_FUNCTION
    + _BOUNDS
    + """
local key, to_junk, now = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local score = redis.call('ZSCORE', KEYS[3], key)
if not score then
  if #ARGV < FIRST_SENDER then return 0 end
  turn_all(-1)
  local place = 1 - to_junk  -- never filed for this user: delivered to the other side
  for i = FIRST_SENDER, #ARGV do
    count(ARGV[i], ':d', now)
    if place == 1 then count(ARGV[i], ':f', now) end
  end
else
  if tonumber(score) % 2 == to_junk then return 0 end
  turn_all(-1)
end
redis.call('ZADD', KEYS[3], now * 2 + to_junk, key)
for i = FIRST_SENDER, #ARGV do
  if to_junk == 1 then count(ARGV[i], ':i', now) else count(ARGV[i], ':o', now) end
end
finish()
return 1
"""
).replace("FIRST_SENDER", str(FIRST_SENDER))
