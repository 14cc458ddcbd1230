"""The Lua scripts the Redis store runs: one training (atomic) and one score (read-only) per call.

Texts only: which keys they get and how their replies are read is spamd.store.redis.state's.
"""

# KEYS: ham, spam, totals, ledger, ledger:order, events, outcomes
# ARGV: op ("train" | "untrain"), message key, label, user (0/1), source, time,
#       ledger_max_entries, events_max, then n bucket ids and n stored counts.
# Returns {outcome, seq}. Mirrors spamd.training.Trainer and spamd.store.records.apply_record.
TRAIN_LUA = """
local ham, spam, totals, ledger, order, events, outcomes = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local op, mkey, label, user = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local source, now = ARGV[5], ARGV[6]
local ledger_max, events_max = tonumber(ARGV[7]), tonumber(ARGV[8])
local n = (#ARGV - 8) / 2
local rows = {[0] = ham, [1] = spam}

local function learn(cls)
  local row, other = rows[cls], rows[1 - cls]
  local added, fresh = 0, 0
  for i = 1, n do
    local id, c = ARGV[8 + i], tonumber(ARGV[8 + n + i])
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
    local id, c = ARGV[8 + i], tonumber(ARGV[8 + n + i])
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

local function commit(new_label, previous, outcome)
  local seq = redis.call('HINCRBY', totals, 'seq', 1)
  if new_label == nil then
    redis.call('HDEL', ledger, mkey)
    redis.call('ZREM', order, mkey)
  else
    redis.call('HSET', ledger, mkey, new_label + (user == 1 and 2 or 0))
    redis.call('ZADD', order, seq, mkey)
    -- The oldest entries past the cap are forgotten, a few at a time (O(log n) each).
    local excess = redis.call('ZCARD', order) - ledger_max
    if excess > 0 then
      local old = redis.call('ZRANGE', order, 0, excess - 1)
      for _, k in ipairs(old) do redis.call('HDEL', ledger, k) end
      redis.call('ZREMRANGEBYRANK', order, 0, excess - 1)
    end
  end
  redis.call('XADD', events, 'MAXLEN', '~', events_max, '*',
    'seq', seq, 'key', mkey, 'label', new_label == nil and '' or new_label,
    'previous', previous == nil and '' or previous, 'user', user, 'source', source, 'time', now, 'outcome', outcome)
  count(outcome)
  return seq
end

local known = redis.call('HGET', ledger, mkey)
if op == 'untrain' then
  if not known then count('not_trained'); return {'not_trained', 0} end
  local kl = tonumber(known) % 2
  unlearn(kl)
  return {'unlearned', commit(nil, kl, 'unlearned')}
end
if known then
  local kv = tonumber(known)
  local kl, ku = kv % 2, math.floor(kv / 2) % 2
  if kl == label then
    local seq = 0
    if user == 1 and ku == 0 then seq = commit(label, kl, 'skipped_repeat') else count('skipped_repeat') end
    return {'skipped_repeat', seq}
  end
  if user == 0 and ku == 1 then count('declined'); return {'declined', 0} end
  unlearn(kl)
  learn(label)
  return {'corrected', commit(label, kl, 'corrected')}
end
learn(label)
return {'learned', commit(label, nil, 'learned')}
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


# KEYS: totals. ARGV: model.hash_bits, the config's count settings (JSON), the defaults'.
# Claims the bucket space and what the counts mean for a new model; a model trained
# before the settings were kept (a seq, no count_settings) was built with the defaults.
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
