"""Each user's summary in Redis, kept by the scripts that change the user's state: what `spamctl users` lists.

One hash holds a line per user (plain Redis and Sentinel: `<prefix>users_summary`; a
cluster: one hash per slot, `<prefix>{s:N}:users_summary` where `s:N` hashes to that slot,
so the user's own scripts write it atomically with the state it sums up):

    user name -> "ham spam tokens junk inbox senders messages expires rule"

ham, spam, tokens: the user's layer (its trainings and tokens; 0 without one); junk, inbox:
the senders the user's moves turned each way, by the rule `rule` ("moves:share"); senders,
messages: the senders and delivered messages held for the user; expires: the Unix second
the sender keys expire (their EXPIRE, by Redis's clock). A listing is then one read per
hash (on a cluster, one pipeline of 16,384 HGETALLs), not a round trip per user: 100,000
users' keys read one by one took about 14 s (docs/redis.md).

It does not hold a user's bytes: MEMORY USAGE per key is what made the old listing slow;
the listing estimates them from the counts, and reads them only when asked (`--memory`).
"""

from __future__ import annotations

import functools

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from spamd.store.redis.sender_fields import SENDER_FIELDS_LUA

SUMMARY_KEY_NAME = "users_summary"
# Users read in one pipeline where a listing reads their own keys (a round trip a key before: see docs/redis.md).
LISTING_BATCH = 1000
# The fields of a summary line, in order.
FIELDS = ("trained_ham", "trained_spam", "tokens", "senders_to_junk", "senders_to_inbox", "senders", "messages",
          "expires")  # fmt: skip


@functools.cache
def slot_tags() -> tuple[str, ...]:
    """For each cluster slot, a hash tag `s:N` that falls in it (the smallest N); about 0.1 s, once."""
    tags: list[str | None] = [None] * REDIS_CLUSTER_HASH_SLOTS
    missing, n = REDIS_CLUSTER_HASH_SLOTS, 0
    while missing:
        tag = f"s:{n}"
        slot = key_slot(tag.encode())
        if tags[slot] is None:
            tags[slot] = tag
            missing -= 1
        n += 1
    return tuple(tag for tag in tags if tag is not None)


def summary_key_of_slot(prefix: str, slot: int) -> str:
    return prefix + "{" + slot_tags()[slot] + "}:" + SUMMARY_KEY_NAME


def summary_key(prefix: str, user_key: str, cluster: bool) -> str:
    """The hash that holds the summary of the user one of whose keys is `user_key` (same slot on a cluster)."""
    if not cluster:
        return prefix + SUMMARY_KEY_NAME
    return summary_key_of_slot(prefix, key_slot(user_key.encode()))


def summary_keys(prefix: str, cluster: bool) -> list[str]:
    """Every hash a listing reads."""
    if not cluster:
        return [prefix + SUMMARY_KEY_NAME]
    return [summary_key_of_slot(prefix, slot) for slot in range(REDIS_CLUSTER_HASH_SLOTS)]


def rule_of(moves: int, share: float) -> str:
    """The turned senders' rule as the sender scripts write it (their ARGV, joined)."""
    return f"{moves}:{share!r}"


# Lua helpers for the scripts that keep the summary (prepended to their text).
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


# way_of over every sender of a user's hash: {to Junk, to the inbox}. Both forms of the fields
# (spamd/store/redis/sender_fields.py), each added to its sender's counts by the field's name.
TURNED_FUNCTION = (
    SENDER_FIELDS_LUA
    + """
local function turned_senders(hash, moves, share)
  local counts = {}
  local flat = redis.call('HGETALL', hash)
  for j = 1, #flat, 2 do
    local sender, which = string.match(flat[j], '^(.*):(%a)$')
    if sender then
      local c = counts[sender]
      if not c then c = {d = 0, f = 0, i = 0, o = 0}; counts[sender] = c end
      if c[which] then c[which] = c[which] + tonumber(flat[j + 1]) end
    else
      local c = counts[flat[j]]
      if not c then c = {d = 0, f = 0, i = 0, o = 0}; counts[flat[j]] = c end
      local n = unpacked(flat[j + 1])
      c.d, c.f, c.i, c.o = c.d + n[1], c.f + n[2], c.i + n[3], c.o + n[4]
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
)


# KEYS: senders. ARGV: moves, share. The senders the user's moves turned {to Junk, to the inbox}:
# way_of a sender (spamd/people/senders.py), counted where the counts are, for a summary line
# counted by another rule than the listing's (the hash read and parsed in Python: 0.6 ms a user
# with 20 senders, 8 s for 10,000 users).
TURNED_LUA = (
    TURNED_FUNCTION
    + """
local turned = turned_senders(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]))
return {turned[1], turned[2]}
"""
)


# ARGV: summary hashes (on a cluster, those of one node's slots: passed as arguments, not KEYS, which a
# cluster holds to one slot; the flag lets the script read keys of several slots of its node).
# Returns two strings, the names and their lines, one a line: parsed in Python a column at a time, not a
# reply a field (redis-py's parser of 200,000 replies is Python).
LINES_LUA = """#!lua flags=no-writes,allow-cross-slot-keys
local names, lines = {}, {}
for k = 1, #ARGV do
  local flat = redis.call('HGETALL', ARGV[k])
  for j = 1, #flat, 2 do
    names[#names + 1] = flat[j]
    lines[#lines + 1] = flat[j + 1]
  end
end
return {table.concat(names, '\\n'), table.concat(lines, '\\n')}
"""
