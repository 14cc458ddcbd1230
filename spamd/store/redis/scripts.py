"""The Lua scripts the Redis store runs: a training and a score on the model's slot, a user's layer on the user's slot.

Texts only: which keys they get and how their replies are read is spamd.store.redis.state's
and spamd.store.redis.users'. Each script touches the keys of one slot (a cluster runs no other).
"""

from spamd.people.users import TRIM_SLACK
from spamd.store.redis.summary import SUMMARY_LUA

# KEYS: ham, spam, totals, ledger, ledger:order, events, outcomes, users
# ARGV: op ("train" | "untrain"), ledger key, label, user (0/1), source, time,
#       ledger_max_entries, events_max, user name ("" for none), users.max_users,
#       then n bucket ids and n stored counts.
# Returns {outcome, seq, apply, from, ledger value, expired user names}. Mirrors
# spamd.engine.trainer.Trainer and spamd.store.records.apply_record for the shared counts.
#
# A training that names a user also leaves its user's layer a change to apply, which a
# second script does on the user's slot (spamd.store.redis.users). Until that is
# acknowledged the ledger value says so: value = label | 2 (a person decided)
# | 4 (the layer has yet to apply it) | 8 * (1 + the layer's previous label, 0 if none)
# | 32 (untrained: the entry stays, as not held, until its layer forgets it too). `apply`
# is 1 when the layer has a change to apply (new, or left by an attempt that failed),
# `from` that previous label (-1: none). The user is then the most recently trained in
# the sorted set `users` (seq); past max_users the least recently trained leave it and
# are returned, for their keys to be deleted.
TRAIN_LUA = """
local ham, spam, totals, ledger, order, events, outcomes, users = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local op, mkey, label, user = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local source, now = ARGV[5], ARGV[6]
local ledger_max, events_max = tonumber(ARGV[7]), tonumber(ARGV[8])
local uname, max_users = ARGV[9], tonumber(ARGV[10])
local n = (#ARGV - 10) / 2
local rows = {[0] = ham, [1] = spam}

local function learn(cls)
  local row, other = rows[cls], rows[1 - cls]
  local added, fresh = 0, 0
  for i = 1, n do
    local id, c = ARGV[10 + i], tonumber(ARGV[10 + n + i])
    if redis.call('HINCRBY', row, id, c) == c and redis.call('HEXISTS', other, id) == 0 then
      fresh = fresh + 1
    end
    added = added + c
  end
  redis.call('HINCRBY', totals, 'tokens:' .. cls, added)
  redis.call('HINCRBY', totals, 'docs:' .. cls, 1)
  redis.call('HINCRBY', totals, 'distinct', fresh)
end

local function unlearn(cls)
  local row, other = rows[cls], rows[1 - cls]
  local removed_total, gone = 0, 0
  for i = 1, n do
    local id, c = ARGV[10 + i], tonumber(ARGV[10 + n + i])
    local present = tonumber(redis.call('HGET', row, id) or '0')
    local removed = math.min(present, c)
    if present > 0 then
      if present == removed then
        redis.call('HDEL', row, id)
        if redis.call('HEXISTS', other, id) == 0 then gone = gone + 1 end
      else
        redis.call('HINCRBY', row, id, 0 - removed)
      end
    end
    removed_total = removed_total + removed
  end
  redis.call('HINCRBY', totals, 'tokens:' .. cls, 0 - removed_total)
  if tonumber(redis.call('HGET', totals, 'docs:' .. cls) or '0') > 0 then
    redis.call('HINCRBY', totals, 'docs:' .. cls, -1)
  end
  redis.call('HINCRBY', totals, 'distinct', 0 - gone)  -- (not -gone: Lua's -0 is "-0", which HINCRBY refuses)
end

local function count(outcome)
  redis.call('HINCRBY', outcomes, source .. ':' .. outcome, 1)
end

local known = redis.call('HGET', ledger, mkey)
local kv = known and tonumber(known)
if kv and kv >= 32 then known = nil end  -- untrained, its layer not yet told: not held
-- What the user's layer has yet to apply of the entry as found: {apply, from}.
local function pending(v)
  if v and v % 8 >= 4 then return 1, math.floor(v / 8) % 4 - 1 end
  return 0, -1
end
local expired = {}

local function commit(new_label, previous, outcome)
  local seq = redis.call('HINCRBY', totals, 'seq', 1)
  local changed = new_label ~= previous
  local value = ''
  local p_apply, p_from = pending(kv)
  -- The label the user's layer holds before this change: the one it has yet to leave, if any.
  local layer_prev = (previous == nil) and -1 or previous
  if p_apply == 1 then layer_prev = p_from end
  if new_label == nil then
    if uname ~= '' then
      value = 32 + 4 + 8 * (layer_prev + 1)
      redis.call('HSET', ledger, mkey, value)
      redis.call('ZADD', order, seq, mkey)
    else
      redis.call('HDEL', ledger, mkey)
      redis.call('ZREM', order, mkey)
    end
  else
    value = new_label + (user == 1 and 2 or 0)
    if uname ~= '' then
      if changed then value = value + 4 + 8 * (layer_prev + 1) elseif p_apply == 1 then value = value + kv % 32 - kv % 4 end
    end
    redis.call('HSET', ledger, mkey, value)
    redis.call('ZADD', order, seq, mkey)
    -- The oldest entries past the cap are forgotten, a few at a time (O(log n) each).
    local excess = redis.call('ZCARD', order) - ledger_max
    if excess > 0 then
      local old = redis.call('ZRANGE', order, 0, excess - 1)
      for _, k in ipairs(old) do redis.call('HDEL', ledger, k) end
      redis.call('ZREMRANGEBYRANK', order, 0, excess - 1)
    end
  end
  if uname ~= '' and changed then
    -- An untraining only refreshes a listed user: one whose layer expired gets none back (as UserLayers.apply).
    if new_label == nil then redis.call('ZADD', users, 'XX', seq, uname) else redis.call('ZADD', users, seq, uname) end
    local excess = redis.call('ZCARD', users) - max_users
    if excess > 0 then
      expired = redis.call('ZRANGE', users, 0, excess - 1)
      redis.call('ZREMRANGEBYRANK', users, 0, excess - 1)
    end
  end
  if uname == '' then
    redis.call('XADD', events, 'MAXLEN', '~', events_max, '*',
      'seq', seq, 'key', mkey, 'label', new_label == nil and '' or new_label,
      'previous', previous == nil and '' or previous, 'user', user, 'source', source, 'time', now, 'outcome', outcome)
  else
    redis.call('XADD', events, 'MAXLEN', '~', events_max, '*',
      'seq', seq, 'key', mkey, 'label', new_label == nil and '' or new_label,
      'previous', previous == nil and '' or previous, 'user', user, 'source', source, 'time', now, 'outcome', outcome,
      'user_name', uname)
  end
  count(outcome)
  return seq, tostring(value)
end

-- The reply: the outcome, its seq (0: nothing committed), what the layer has to apply.
local function reply(outcome, seq, value, v)
  if uname == '' then return {outcome, seq, 0, -1, '', {}} end
  local a, f = pending(v)
  return {outcome, seq, a, f, value or '', expired}
end

if op == 'untrain' then
  if not known then count('not_trained'); return reply('not_trained', 0, known == nil and kv and tostring(kv), kv) end
  local kl = kv % 2
  unlearn(kl)
  local seq, value = commit(nil, kl, 'unlearned')
  return reply('unlearned', seq, value, tonumber(value))
end
if known then
  local kl, ku = kv % 2, math.floor(kv / 2) % 2
  if kl == label then
    local seq, value = 0, known
    if user == 1 and ku == 0 then seq, value = commit(label, kl, 'skipped_repeat') else count('skipped_repeat') end
    return reply('skipped_repeat', seq, value, tonumber(value))
  end
  if user == 0 and ku == 1 then count('declined'); return reply('declined', 0, '', nil) end
  unlearn(kl)
  learn(label)
  local seq, value = commit(label, kl, 'corrected')
  return reply('corrected', seq, value, tonumber(value))
end
learn(label)
local seq, value = commit(label, nil, 'learned')
return reply('learned', seq, value, tonumber(value))
"""


# KEYS: ham, spam, totals. ARGV[1]: the bucket ids in decimal, space-separated.
# Returns the ham counts, the spam counts, then tokens:0, tokens:1, docs:0, docs:1,
# distinct: one space-separated string. One string each way rather than a field per
# bucket: redis-py packs and parses each field in Python (a MULTI of HMGETs: 1.0 ms of
# client CPU per trec07p message of 161 buckets; this way 0.2 ms, and 0.2 ms in Redis;
# little-endian binary instead cost Redis 0.5 ms in struct.pack/unpack). Measured with
# a real redis-server on this machine (README: "Several mail hosts, one model").
SCORE_LUA = """#!lua flags=no-writes
local ids = {}
for id in string.gmatch(ARGV[1], '%d+') do ids[#ids + 1] = id end
local n, out = #ids, {}
for r = 1, 2 do
  local start = 1
  while start <= n do  -- in slices: unpack() has a stack limit
    local stop = math.min(n, start + 3999)
    local values = redis.call('HMGET', KEYS[r], unpack(ids, start, stop))
    for i = 1, #values do out[#out + 1] = values[i] or '0' end
    start = stop + 1
  end
end
local totals = redis.call('HMGET', KEYS[3], 'tokens:0', 'tokens:1', 'docs:0', 'docs:1', 'distinct')
for i = 1, 5 do out[#out + 1] = totals[i] or '0' end
return table.concat(out, ' ')
"""


# KEYS: totals. ARGV: model.hash_bits, the config's count settings (JSON), and those
# of a model stored before they were kept (UNRECORDED_COUNT_SETTINGS).
# Claims the bucket space and what the counts mean for a new model; a model trained
# before the settings were kept (a seq, no count_settings) was built with those.
# Returns {hash_bits, count_settings} as the model holds them.
CLAIM_LUA = """
local totals = KEYS[1]
redis.call('HSETNX', totals, 'hash_bits', ARGV[1])
if redis.call('HEXISTS', totals, 'count_settings') == 0 then
  if redis.call('HEXISTS', totals, 'seq') == 1 then
    redis.call('HSET', totals, 'count_settings', ARGV[3])
  else
    redis.call('HSET', totals, 'count_settings', ARGV[2])
  end
end
return redis.call('HMGET', totals, 'hash_bits', 'count_settings')
"""


# The user's layer, on the user's slot (every key has the hash tag {u:NAME}).
# KEYS: ham, spam, totals, rank, ledger, the summary's hash (spamd.store.redis.summary).
# ARGV: message key, target label ("" for untrain), from (the layer's previous label as
# the model's ledger knows it, -1: none), users.max_tokens, time, user name, then n bucket
# ids and n stored counts. The user's summary line gets the layer's trainings and tokens.
# `ledger` (message key -> label) is what this layer holds: a change already applied is
# not applied again (a retry), and its label, when there, is the one unlearned (`from`
# serves only where the layer has no entry: after an import or an expiry).
# `rank` (a sorted set: total count -> the bucket id as 10 digits, so that equal counts
# sort by id) makes UserLayer._trim's rule exact: past max_tokens (down to 1/TRIM_SLACK below it) the tokens with the
# smallest counts go, the smaller id first among equals. It is built the first time the
# layer passes max_tokens and kept from then on: below the cap a layer needs none, and
# it is two thirds of a layer's memory (docs/redis.md).
# Returns "applied", "unchanged" (nothing to do) or "gone" (nothing left: keys deleted).
USER_LUA = (
    SUMMARY_LUA
    + """
local ham, spam, totals, rank, ledger = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local mkey, target, from, max_tokens, now = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local uname = ARGV[6]
local n = (#ARGV - 6) / 2
local rows = {[0] = ham, [1] = spam}
local ranked = redis.call('EXISTS', rank) == 1
local distinct = tonumber(redis.call('HGET', totals, 'distinct') or '0')

local function member(id) return string.format('%010d', tonumber(id)) end

local function rerank(id)
  if not ranked then return end
  local total = tonumber(redis.call('HGET', ham, id) or '0') + tonumber(redis.call('HGET', spam, id) or '0')
  if total == 0 then redis.call('ZREM', rank, member(id)) else redis.call('ZADD', rank, total, member(id)) end
end

local function learn(cls)
  local added = 0
  for i = 1, n do
    local id, c = ARGV[6 + i], tonumber(ARGV[6 + n + i])
    if redis.call('HINCRBY', rows[cls], id, c) == c and redis.call('HEXISTS', rows[1 - cls], id) == 0 then
      distinct = distinct + 1
    end
    rerank(id)
    added = added + c
  end
  redis.call('HINCRBY', totals, 'tokens:' .. cls, added)
  redis.call('HINCRBY', totals, 'docs:' .. cls, 1)
end

local function unlearn(cls)
  local removed_total = 0
  for i = 1, n do
    local id, c = ARGV[6 + i], tonumber(ARGV[6 + n + i])
    local present = tonumber(redis.call('HGET', rows[cls], id) or '0')
    local removed = math.min(present, c)
    if present > 0 then
      if present == removed then
        redis.call('HDEL', rows[cls], id)
        if redis.call('HEXISTS', rows[1 - cls], id) == 0 then distinct = distinct - 1 end
      else
        redis.call('HINCRBY', rows[cls], id, 0 - removed)
      end
      rerank(id)
    end
    removed_total = removed_total + removed
  end
  redis.call('HINCRBY', totals, 'tokens:' .. cls, 0 - removed_total)
  if tonumber(redis.call('HGET', totals, 'docs:' .. cls) or '0') > 0 then
    redis.call('HINCRBY', totals, 'docs:' .. cls, -1)
  end
end

local function build_rank()
  local total = {}
  for cls = 0, 1 do
    local flat = redis.call('HGETALL', rows[cls])
    for i = 1, #flat, 2 do total[flat[i]] = (total[flat[i]] or 0) + tonumber(flat[i + 1]) end
  end
  local args = {}
  for id, t in pairs(total) do
    args[#args + 1] = t
    args[#args + 1] = member(id)
    if #args >= 2000 then redis.call('ZADD', rank, unpack(args)); args = {} end  -- unpack() has a stack limit
  end
  if #args > 0 then redis.call('ZADD', rank, unpack(args)) end
  ranked = true
end

local function trim()
  local excess = distinct - max_tokens
  if excess <= 0 then return end
  excess = excess + math.floor(max_tokens / __TRIM_SLACK__)  -- down to 1/TRIM_SLACK below the cap, as UserLayer
  if not ranked then build_rank() end
  local dropped = {[0] = 0, [1] = 0}
  for _, m in ipairs(redis.call('ZRANGE', rank, 0, excess - 1)) do
    local id = tostring(tonumber(m))
    for cls = 0, 1 do
      local c = tonumber(redis.call('HGET', rows[cls], id) or '0')
      if c > 0 then
        redis.call('HDEL', rows[cls], id)
        dropped[cls] = dropped[cls] + c
      end
    end
  end
  redis.call('ZREMRANGEBYRANK', rank, 0, excess - 1)
  distinct = distinct - excess
  redis.call('HINCRBY', totals, 'tokens:0', 0 - dropped[0])
  redis.call('HINCRBY', totals, 'tokens:1', 0 - dropped[1])
end

local mine = redis.call('HGET', ledger, mkey)
local previous = mine and tonumber(mine) or (from >= 0 and from or nil)
if target == '' then
  if previous == nil then return 'unchanged' end
  unlearn(previous)
  redis.call('HDEL', ledger, mkey)
else
  local t = tonumber(target)
  if mine and tonumber(mine) == t then return 'unchanged' end
  if previous ~= nil then unlearn(previous) end
  learn(t)
  trim()
  redis.call('HSET', ledger, mkey, t)
end
redis.call('HSET', totals, 'distinct', distinct, 'trained_at', now)
local docs = redis.call('HMGET', totals, 'docs:0', 'docs:1')
local s = summary_read(KEYS[6], uname)
if distinct == 0 and tonumber(docs[1] or '0') == 0 and tonumber(docs[2] or '0') == 0 then
  redis.call('DEL', ham, spam, totals, rank, ledger)
  s[1], s[2], s[3] = 0, 0, 0
  summary_write(KEYS[6], uname, s)
  return 'gone'
end
s[1], s[2], s[3] = tonumber(docs[1] or '0'), tonumber(docs[2] or '0'), distinct
summary_write(KEYS[6], uname, s)
return 'applied'
""".replace("__TRIM_SLACK__", str(TRIM_SLACK))
)


# On the model's slot, once the user's layer has applied a change: the ledger entry no
# longer says "pending" (an untrained one goes). Only if it is still the value the
# training left (another training since keeps its own). KEYS: ledger, ledger:order.
# ARGV: ledger key, the value the training script returned.
ACK_LUA = """
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v ~= ARGV[2] then return 0 end
local n = tonumber(v)
if n >= 32 then
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], n % 4)
end
return 1
"""


# A user's layer goes (past [users] max_users, or before an import without it), with its
# summary's layer part. KEYS: the layer's five keys, the summary's hash. ARGV: user name.
FORGET_LUA = (
    SUMMARY_LUA
    + """
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
local s = summary_read(KEYS[6], ARGV[1])
s[1], s[2], s[3] = 0, 0, 0
summary_write(KEYS[6], ARGV[1], s)
return 1
"""
)

# An imported layer's summary. KEYS: the summary's hash. ARGV: user name, ham, spam, tokens.
LAYER_SUMMARY_LUA = (
    SUMMARY_LUA
    + """
local s = summary_read(KEYS[1], ARGV[1])
s[1], s[2], s[3] = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
summary_write(KEYS[1], ARGV[1], s)
return 1
"""
)
