"""Where each user's mail from a sender ends up (spamd/people/senders.py), in Redis: every daemon counts into one place.

Keys of one user, on the user's slot (hash tag `{u:NAME}`, as the user's layer):

    <prefix>{u:NAME}:senders      hash sender -> "delivered,filed into Junk,moved in,moved out" (sender_fields.py)
    <prefix>{u:NAME}:senders_at   sorted set sender -> when last counted (the oldest go past the cap)
    <prefix>{u:NAME}:filed        sorted set message key -> 2 x when filed or moved (s) + 1 if in Junk

A delivery and a move are each one script on that slot, so a move retried after a
failure (the training's reply was a temporary error) counts once: the script finds the
message already on the side the move puts it. Scoring reads the message's senders' counts
with one HMGET. Each user keeps at most SENDERS_PER_USER senders and PLACED_PER_USER
delivered messages, and the three keys expire KEEP_S after the user's last delivery or move.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import structlog

from spamd.config import UsersConfig
from spamd.errors import StoreUnavailableError
from spamd.model.bayes import Features, Label, ModelView, Score
from spamd.people.kept import kept_sample
from spamd.people.senders import Way, moved_score, way_of
from spamd.store.redis.connect import Script, sender_keys_of
from spamd.store.redis.kept import RedisKept
from spamd.store.redis.learned import RedisLearned
from spamd.store.redis.listing import summaries
from spamd.store.redis.sender_fields import counts_from, fields_of, sender_args
from spamd.store.redis.state import RedisState
from spamd.store.redis.summary import SUMMARY_LUA, TURNED_FUNCTION, summary_key
from spamd.store.redis.views import RedisModel

log = structlog.get_logger()

SENDERS_PER_USER = 2_000
PLACED_PER_USER = 5_000
KEEP_S = 400 * 86400

# KEYS: senders, senders_at, filed, the summary's hash (spamd.store.redis.summary).
# ARGV: key, 0/1, now (whole seconds), senders cap, filed cap, ttl, sender_moves,
# sender_share, user name, then two names a sender (sender_fields.sender_args: its packed field, and the
# prefix of an older spamd's fields, which the script folds into the packed one).
# `filed` scores a message 2 x when + 1 if in Junk: where it is and how recent in one
# sorted set (MEMORY USAGE of a user with 20 rescued senders, scripts/scale/users_scale.py:
# a hash for the side beside a sorted set for the time, 5,088 -> 3,976 bytes).
# The user's summary line keeps the senders turned each way (way_of, for the senders whose
# counts the script changes or the cap drops; all of them afresh when the line was counted
# by another rule or the keys had expired), the senders and messages held and when they expire.
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
local function way(c)
  local d, f, i, o = c[1], c[2], c[3], c[4]
  if d == 0 or moves == 0 then return 0 end
  local in_junk = math.min(math.max(f - o + i, 0), d)
  if o >= moves and d - in_junk >= share * d then return -1 end
  if i >= moves and in_junk >= share * d then return 1 end
  return 0
end
local function turn(w, sign)
  if w == 1 then sum[4] = sum[4] + sign elseif w == -1 then sum[5] = sum[5] + sign end
end
local function turn_all(sign)  -- the senders of ARGV, before (-1) and after (+1) their counts change
  if recount then return end
  for i = FIRST_SENDER, #ARGV, 2 do turn(way(sender_read(KEYS[1], ARGV[i], ARGV[i + 1])), sign) end
end
local function bound(at, cap, hash)
  local n = redis.call('ZCARD', at)
  if n > cap then
    local gone = redis.call('ZPOPMIN', at, n - cap)
    if hash then
      for j = 1, #gone, 2 do
        local s = gone[j]  -- its fields are in the member's form
        if not recount then turn(way(sender_read(hash, s, s)), -1) end
        sender_delete(hash, s)
      end
    end
  end
end
local function count(add, now)  -- {d, f, i, o} added to each sender of ARGV
  for i = FIRST_SENDER, #ARGV, 2 do sender_add(KEYS[1], KEYS[2], ARGV[i], ARGV[i + 1], add, now) end
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
count({1, filed, 0, 0}, now)
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
  -- never filed for this user: delivered to the other side, and moved
  count({1, 1 - to_junk, to_junk, 1 - to_junk}, now)
else
  if tonumber(score) % 2 == to_junk then return 0 end
  turn_all(-1)
  count({0, 0, to_junk, 1 - to_junk}, now)
end
redis.call('ZADD', KEYS[3], now * 2 + to_junk, key)
finish()
return 1
"""
).replace("FIRST_SENDER", str(FIRST_SENDER))


def recency_now() -> str:
    """The scripts' "when" for the recency sets: whole seconds.

    Redis keeps a whole-number score in a small sorted set as an integer, a fraction as
    its text: MEMORY USAGE of one user's keys with 20 rescued senders (3 moves each,
    scripts/scale/users_scale.py) 6,368 -> 5,088 bytes. Ties within a second go in member order.
    """
    return str(int(time.time()))


class RedisSenders:
    """spamd.people.senders.SenderReputation's interface over Redis (the Engine's `senders` with `[redis] url`)."""

    def __init__(self, state: RedisState, config: UsersConfig):
        self.state = state
        self.prefix = state.config.redis.prefix
        self.moves = config.sender_moves
        self.share = config.sender_share
        self.changes = 0
        self._deliver = Script(state.client, DELIVER_LUA)
        self.kept = RedisKept(state, KEEP_S)  # what each person kept from each sender (spamd/people/kept.py)
        self.learned = RedisLearned(state)  # what spamd learned from each move (spamd/people/learned.py)
        self._move = Script(state.client, MOVE_LUA)

    def _run(self, script: Script, what: str, user: str, key: bytes, side: int, senders: tuple[int, ...]) -> Any:
        keys = sender_keys_of(self.prefix, user)
        keys.append(summary_key(self.prefix, keys[0], self.state.cluster))
        args = [key, side, recency_now(), SENDERS_PER_USER, PLACED_PER_USER, KEEP_S, self.moves, repr(self.share),
                user, *sender_args(senders)]  # fmt: skip
        return self.state.call(
            f"{what} of user {user}", lambda: script(keys=keys, args=args), where=self.state.node_of(keys[0])
        )

    def delivered(self, user: str, key: bytes, senders: tuple[int, ...], filed_spam: bool) -> None:
        """Counted after the message was delivered: a Redis failure is logged, not raised (the message is safe)."""
        if not senders or not self.moves:
            return
        try:
            self._run(self._deliver, "counting a delivery", user, key, int(filed_spam), tuple(senders))
            self.changes += 1
        except StoreUnavailableError as e:
            log.warning("sender_delivery_not_counted", user_name=user, error=str(e))

    def moved(self, key: bytes, label: Label, user: str | None = None, senders: tuple[int, ...] = ()) -> bool:
        """A person's label (StoreUnavailableError if the user's node is down: the training's reply is a
        temporary error, and the retry counts the move once)."""
        if user is None or not self.moves:
            return False
        self.state.check_replicas_connected("counting a move")
        moved = self._run(self._move, "counting a move", user, key, int(label == Label.SPAM), tuple(senders)) == 1
        self.state.confirm_replicated("counting a move", user)  # a retry (moved == False) waits too
        self.changes += moved
        return moved

    def counts(self, user: str, senders: tuple[int, ...]) -> list[tuple[int, int, int, int] | None]:
        """One HMGET: each sender's packed field and the four fields an older spamd wrote, added."""
        key = sender_keys_of(self.prefix, user)[0]
        fields = sender_fields(senders)
        values = self.state.call(
            f"reading the senders of user {user}",
            lambda: self.state.client.hmget(key, fields),
            where=self.state.node_of(key),
        )
        return counts_of(values, len(senders))

    def score_and_counts(
        self, model: ModelView, features: Features, user: str, senders: tuple[int, ...]
    ) -> tuple[Score, list[tuple[int, int, int, int] | None]]:
        """`model`'s score and `counts(user, senders)`: in one round trip where the user's keys are on the
        model's server (plain Redis, Sentinel); on a cluster, one after the other, each failing alone (the
        user's node down: StoreUnavailableError, the message's temporary error)."""
        if self.state.cluster or not isinstance(model, RedisModel):
            return model.score(features), self.counts(user, senders)
        score, values = model.score_beside(features, sender_keys_of(self.prefix, user)[0], sender_fields(senders))
        return score, counts_of(values, len(senders))

    def direction(self, user: str, senders: tuple[int, ...], authenticated: int | None = None) -> Way:
        if not senders:
            return Way.NONE
        return way_of(self.counts(user, tuple(senders)), self.moves, self.share, authenticated)

    def adjust(
        self,
        score: Score,
        user: str | None,
        senders: tuple[int, ...],
        config: Any,
        authenticated: int = 0,
        features: Features | None = None,
    ) -> Score:
        if user is None or not senders or not self.moves:
            return score
        return moved_score(
            score, self.direction(user, senders, authenticated), config, self.similar(user, senders, features)
        )

    def similar(self, user: str, senders: tuple[int, ...], features: Features | None) -> Callable[[], float] | None:
        """The resemblance of a message to what `user` kept from `senders`: one HMGET, only when asked."""
        if features is None:
            return None
        return lambda: self.kept.resemblance(user, senders, kept_sample(features))

    def summary(self) -> dict[str, dict[str, int]]:
        """Per user: the senders their moves turned each way (those with any), from the users' summary lines."""
        lines = summaries(self.state, self.moves, self.share)
        junk, inbox = lines.column("senders_to_junk"), lines.column("senders_to_inbox")
        return {
            lines.names[i]: {"senders_to_junk": int(junk[i]), "senders_to_inbox": int(inbox[i])}
            for i in np.flatnonzero(junk + inbox).tolist()
        }

    def pairs(self) -> int | None:
        return None  # counting them would read every user's keys at each scrape

    def export(self) -> dict[str, Any]:
        return {}  # in Redis, not in the daemon's snapshot

    def restore(self, data: dict[str, Any]) -> None:
        pass


def sender_fields(senders: tuple[int, ...]) -> list[str]:
    """The hash fields that may hold `senders`' counts (sender_fields.fields_of), sender after sender."""
    return [field for s in senders for field in fields_of(s)]


def counts_of(values: list[Any], senders: int) -> list[tuple[int, int, int, int] | None]:
    """HMGET's values of `sender_fields` as each sender's four counts (None: never heard of)."""
    per = len(fields_of(0))
    quads = [counts_from(values[i : i + per]) for i in range(0, per * senders, per)]
    return [quad if any(quad) else None for quad in quads]
