"""What each person kept from each sender (spamd/people/kept.py), in Redis: every daemon reads the same profiles.

One key a user, on the user's slot (hash tag `{u:NAME}`, beside their senders' counts):

    <prefix>{u:NAME}:kept   hash sender (signed decimal, as in the senders hash) -> profile (2 bytes a fingerprint)

A person's ham label merges the message's sample into each of its senders' profiles in one
script (the same merge as spamd.people.kept.merged, so both stores hold the same bytes; a retried
training merges nothing new). At most KEPT_PER_USER senders a user (past it, one of the others
goes, at random), and the key expires with the user's senders (their KEEP_S after the last change).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spamd.people.kept import PROFILE_SIZE, resemblance
from spamd.store.redis.connect import Script, user_hash_tag
from spamd.store.redis.sender_fields import sender_id
from spamd.store.redis.state import RedisState

# Senders a user's kept profiles cover at most (128 bytes each at PROFILE_SIZE 64).
KEPT_PER_USER = 64

# KEYS: the kept hash. ARGV: the sample (little-endian 16-bit fingerprints, unique), profile size,
# senders cap, ttl, then the senders' fields.
KEEP_LUA = """
local sample, size, cap = ARGV[1], tonumber(ARGV[2]) * 2, tonumber(ARGV[3])
local inside, mine = {}, {}
for i = 1, #sample, 2 do inside[string.sub(sample, i, i + 1)] = true end
for j = 5, #ARGV do
  mine[ARGV[j]] = true
  local held = redis.call('HGET', KEYS[1], ARGV[j]) or ''
  -- spamd.people.kept.merged: held but not in the sample, the sample's new ones, held and in it again
  local gone, new, again, was = {}, {}, {}, {}
  for i = 1, #held, 2 do
    local fingerprint = string.sub(held, i, i + 1)
    was[fingerprint] = true
    if inside[fingerprint] then again[#again + 1] = fingerprint else gone[#gone + 1] = fingerprint end
  end
  for i = 1, #sample, 2 do
    local fingerprint = string.sub(sample, i, i + 1)
    if not was[fingerprint] then new[#new + 1] = fingerprint end
  end
  local merged = table.concat(gone) .. table.concat(new) .. table.concat(again)
  if #merged > size then merged = string.sub(merged, #merged - size + 1) end
  redis.call('HSET', KEYS[1], ARGV[j], merged)
end
local n = redis.call('HLEN', KEYS[1])
while n > cap do
  local other = redis.call('HRANDFIELD', KEYS[1])
  if not mine[other] then
    redis.call('HDEL', KEYS[1], other)
    n = n - 1
  end
end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]))
return 1
"""


def kept_key(prefix: str, user: str) -> str:
    return prefix + user_hash_tag(user) + ":kept"


class RedisKept:
    """spamd.people.kept.KeptSamples's interface over Redis (RedisSenders.kept)."""

    def __init__(self, state: RedisState, keep_s: int):
        self.state = state
        self.keep_s = keep_s  # the key's time to live: the senders' (spamd.store.redis.senders.KEEP_S)
        self.prefix = state.config.redis.prefix
        self._keep = Script(state.client, KEEP_LUA)

    def kept(self, user: str, senders: tuple[int, ...], sample: np.ndarray) -> None:
        """Part of a person's training: StoreUnavailableError if the user's node is down (the training's reply is
        then a temporary error; a retry merges the same sample again, which changes nothing)."""
        if not len(sample) or not senders:
            return
        key = kept_key(self.prefix, user)
        fields = [sender_id(s) for s in dict.fromkeys(senders)]
        args: list[Any] = [sample.astype("<u2").tobytes(), PROFILE_SIZE, max(KEPT_PER_USER, len(fields)), self.keep_s]
        self.state.call(
            f"keeping the sample of user {user}",
            lambda: self._keep(keys=[key], args=[*args, *fields]),
            where=self.state.node_of(key),
        )

    def resemblance(self, user: str, senders: tuple[int, ...], sample: np.ndarray) -> float:
        """The highest resemblance of the sample to the user's profiles of `senders` (one HMGET)."""
        if not senders:
            return 0.0
        key = kept_key(self.prefix, user)
        profiles = self.state.call(
            f"reading the kept samples of user {user}",
            lambda: self.state.client.hmget(key, [sender_id(s) for s in senders]),
            where=self.state.node_of(key),
        )
        return max((resemblance(profile, sample) for profile in profiles), default=0.0)

    def profiles(self, user: str) -> int:
        key = kept_key(self.prefix, user)
        return int(
            self.state.call(
                f"counting the kept samples of user {user}",
                lambda: self.state.client.hlen(key),
                where=self.state.node_of(key),
            )
        )
