"""How one sender's four counts sit in a user's senders hash in Redis, for the scripts (Lua) and the readers (Python).

One field a sender: the field is the sender's 64-bit key as a signed decimal (the two's
complement of xxh3's unsigned value), which Redis's listpack keeps as an 8-byte integer;
the value is "delivered,filed,moved in,moved out" with the trailing zero counts left out
("5" is five deliveries to the inbox, itself an integer to Redis). used_memory a user with
20 rescued senders, 100,000 users (scripts/scale/users_scale.py, 64-bit keys): a field a count,
the key unsigned, 4,472 -> 3,219 bytes (MEMORY USAGE of the senders hash 1,624 -> 536).

Older spamd wrote a field a count, "<unsigned key>:d", ":f", ":i", ":o". The readers add
those to the packed field (a sender holds one form or the other; the sum is exact with
both), and a script that changes a sender's counts folds them into the packed field and
deletes them. The sender's member in `senders_at` is written in the form of its fields
(the unsigned key until a new script touches it), so dropping a sender past the cap
deletes both forms' fields by that one name. Not a format for other programs to read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

Counts = tuple[int, int, int, int]
_TWO_63 = 1 << 63
OLD_KINDS = "dfio"


def sender_id(sender: int) -> str:
    """The sender's field and `senders_at` member: its key as a signed 64-bit decimal (an integer to Redis)."""
    return str(sender - (1 << 64) if sender >= _TWO_63 else sender)


def sender_args(senders: Iterable[int]) -> list[str]:
    """The scripts' ARGV for these senders: the packed field's name, then the older fields' prefix, for each."""
    return [name for sender in senders for name in (sender_id(sender), str(sender))]


def fields_of(sender: int) -> list[str]:
    """The hash fields that may hold the sender's counts: the packed field, then the four of older spamd."""
    return [sender_id(sender), *(f"{sender}:{kind}" for kind in OLD_KINDS)]


def packed(counts: Sequence[int]) -> str:
    """ "d,f,i,o" without its trailing zeros (as the scripts write it)."""
    n = len(counts)
    while n > 1 and counts[n - 1] == 0:
        n -= 1
    return ",".join(str(int(c)) for c in counts[:n])


def unpacked(value: Any) -> list[int]:
    """A packed value (bytes, str or None) as four counts; ValueError if it is not one."""
    counts = [0, 0, 0, 0]
    if value is None:
        return counts
    text = value.decode() if isinstance(value, bytes) else str(value)
    parts = text.split(",")
    if len(parts) > 4:
        raise ValueError(f"sender counts: at most four counts expected, not {text[:40]!r}")
    for k, part in enumerate(parts):
        counts[k] = int(part)
    return counts


def counts_from(values: Sequence[Any]) -> Counts:
    """One sender's counts from the values of its `fields_of` (HMGET's reply: None where absent)."""
    d, f, i, o = unpacked(values[0])
    return (
        d + int(values[1] or 0),
        f + int(values[2] or 0),
        i + int(values[3] or 0),
        o + int(values[4] or 0),
    )


def counts_by_sender(raw: dict[Any, Any]) -> dict[str, list[int]]:
    """Every sender's counts in a user's hash (HGETALL's reply), both forms, by field name."""
    by_sender: dict[str, list[int]] = {}
    for field, value in raw.items():
        name = field.decode() if isinstance(field, bytes) else str(field)
        sender, colon, kind = name.rpartition(":")
        if colon:
            by_sender.setdefault(sender, [0, 0, 0, 0])[OLD_KINDS.index(kind)] += int(value)
        else:
            counts = by_sender.setdefault(name, [0, 0, 0, 0])
            for k, n in enumerate(unpacked(value)):
                counts[k] += n
    return by_sender


# The same in Lua, prepended to the scripts that read or change the counts (spamd/store/redis/senders.py,
# summary.py). `id` is a packed field's name (sender_id), `old` the prefix of older spamd's fields: the two
# names of ARGV (sender_args), or a `senders_at` member twice (the form its fields are in).
SENDER_FIELDS_LUA = """
local function unpacked(v)
  local c = {0, 0, 0, 0}
  if v then
    local k = 1
    for n in string.gmatch(v, '%d+') do c[k] = tonumber(n); k = k + 1 end
  end
  return c
end
local function packed(c)
  local n = 4
  while n > 1 and c[n] == 0 do n = n - 1 end
  local out = {}
  for k = 1, n do out[k] = string.format('%d', c[k]) end
  return table.concat(out, ',')
end
-- {d, f, i, o} of a sender, both forms added; and whether older fields hold some of them.
local function sender_read(hash, id, old)
  local v = redis.call('HMGET', hash, id, old .. ':d', old .. ':f', old .. ':i', old .. ':o')
  local c = unpacked(v[1])
  for k = 1, 4 do c[k] = c[k] + tonumber(v[k + 1] or '0') end
  return c, (v[2] or v[3] or v[4] or v[5]) and true or false  -- a field absent is false in Redis's Lua
end
-- The sender's counts plus `add`, written in the packed field (older fields folded in and deleted).
local function sender_add(hash, at, id, old, add, now)
  local c, had_old = sender_read(hash, id, old)
  for k = 1, 4 do c[k] = c[k] + add[k] end
  redis.call('HSET', hash, id, packed(c))
  if had_old then redis.call('HDEL', hash, old .. ':d', old .. ':f', old .. ':i', old .. ':o') end
  if id ~= old then redis.call('ZREM', at, old) end
  redis.call('ZADD', at, now, id)
end
local function sender_delete(hash, member)
  redis.call('HDEL', hash, member, member .. ':d', member .. ':f', member .. ':i', member .. ':o')
end
"""
