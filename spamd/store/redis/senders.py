"""Where each user's mail from a sender ends up (spamd/people/senders.py), in Redis: every daemon counts into one place.

Keys of one user, on the user's slot (hash tag `{u:NAME}`, as the user's layer):

    <prefix>{u:NAME}:senders      hash "<sender>:d|f|i|o" -> delivered, filed into Junk, moved in, moved out
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
from typing import Any

import structlog
from redis.exceptions import NoScriptError

from spamd.config import UsersConfig
from spamd.errors import StoreUnavailableError
from spamd.model.bayes import Label, Score
from spamd.people.senders import Way, moved_score, way_of
from spamd.store.redis.connect import Script, user_hash_tag
from spamd.store.redis.state import RedisState
from spamd.store.redis.users import LISTING_BATCH

log = structlog.get_logger()

SENDERS_PER_USER = 2_000
PLACED_PER_USER = 5_000
KEEP_S = 400 * 86400

# KEYS: senders, senders_at, filed. ARGV: key, 0/1, now (whole seconds), senders cap, filed cap, ttl, senders...
# `filed` scores a message 2 x when + 1 if in Junk: where it is and how recent in one
# sorted set (MEMORY USAGE of a user with 20 rescued senders, scripts/users_scale.py:
# a hash for the side beside a sorted set for the time, 5,088 -> 3,976 bytes).
_BOUNDS = """
local function bound(at, cap, hash)
  local n = redis.call('ZCARD', at)
  if n > cap then
    local gone = redis.call('ZPOPMIN', at, n - cap)
    if hash then
      for j = 1, #gone, 2 do
        local s = gone[j]
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
  bound(KEYS[2], tonumber(ARGV[4]), KEYS[1])
  bound(KEYS[3], tonumber(ARGV[5]), false)
  for i = 1, 3 do redis.call('EXPIRE', KEYS[i], tonumber(ARGV[6])) end
end
"""

DELIVER_LUA = (
    _BOUNDS
    + """
local key, filed, now = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
for i = 7, #ARGV do
  count(ARGV[i], ':d', now)
  if filed == 1 then count(ARGV[i], ':f', now) end
end
redis.call('ZADD', KEYS[3], now * 2 + filed, key)
finish()
return 1
"""
)

MOVE_LUA = (
    _BOUNDS
    + """
local key, to_junk, now = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local score = redis.call('ZSCORE', KEYS[3], key)
local place
if not score then
  if #ARGV < 7 then return 0 end
  place = 1 - to_junk  -- never filed for this user: delivered to the other side
  for i = 7, #ARGV do
    count(ARGV[i], ':d', now)
    if place == 1 then count(ARGV[i], ':f', now) end
  end
else
  place = tonumber(score) % 2
end
if place == to_junk then
  return 0
end
redis.call('ZADD', KEYS[3], now * 2 + to_junk, key)
for i = 7, #ARGV do
  if to_junk == 1 then count(ARGV[i], ':i', now) else count(ARGV[i], ':o', now) end
end
finish()
return 1
"""
)


# KEYS: senders. ARGV: moves, share. The senders the user's moves turned {to Junk, to the inbox}:
# way_of a sender (spamd/people/senders.py), counted where the counts are, for `spamctl users`
# (the hash read and parsed in Python: 0.6 ms a user with 20 senders, 8 s for 10,000 users).
TURNED_LUA = """
local moves, share = tonumber(ARGV[1]), tonumber(ARGV[2])
local counts = {}
local flat = redis.call('HGETALL', KEYS[1])
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
"""


def recency_now() -> str:
    """The scripts' "when" for the recency sets: whole seconds.

    Redis keeps a whole-number score in a small sorted set as an integer, a fraction as
    its text: MEMORY USAGE of one user's keys with 20 rescued senders (3 moves each,
    scripts/users_scale.py) 6,368 -> 5,088 bytes. Ties within a second go in member order.
    """
    return str(int(time.time()))


def sender_keys_of(prefix: str, user: str) -> list[str]:
    head = prefix + user_hash_tag(user) + ":"
    return [head + name for name in ("senders", "senders_at", "filed")]


class RedisSenders:
    """spamd.people.senders.SenderReputation's interface over Redis (the Engine's `senders` with `[redis] url`)."""

    def __init__(self, state: RedisState, config: UsersConfig):
        self.state = state
        self.prefix = state.config.redis.prefix
        self.moves = config.sender_moves
        self.share = config.sender_share
        self.changes = 0
        self._deliver = Script(state.client, DELIVER_LUA)
        self._move = Script(state.client, MOVE_LUA)
        self._turned = Script(state.client, TURNED_LUA)

    def _run(self, script: Script, what: str, user: str, key: bytes, side: int, senders: tuple[int, ...]) -> Any:
        keys = sender_keys_of(self.prefix, user)
        args = [key, side, recency_now(), SENDERS_PER_USER, PLACED_PER_USER, KEEP_S, *map(str, senders)]
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
        key = sender_keys_of(self.prefix, user)[0]
        fields = [f"{s}:{f}" for s in senders for f in "dfio"]
        values = self.state.call(
            f"reading the senders of user {user}",
            lambda: self.state.client.hmget(key, fields),
            where=self.state.node_of(key),
        )
        n = [int(v) if v is not None else 0 for v in values]
        quads = [(n[i], n[i + 1], n[i + 2], n[i + 3]) for i in range(0, 4 * len(senders), 4)]
        return [quad if any(quad) else None for quad in quads]

    def direction(self, user: str, senders: tuple[int, ...], authenticated: int | None = None) -> Way:
        if not senders:
            return Way.NONE
        return way_of(self.counts(user, tuple(senders)), self.moves, self.share, authenticated)

    def adjust(
        self, score: Score, user: str | None, senders: tuple[int, ...], config: Any, authenticated: int = 0
    ) -> Score:
        if user is None or not senders or not self.moves:
            return score
        return moved_score(score, self.direction(user, senders, authenticated), config)

    def summary(self) -> dict[str, dict[str, int]]:
        """Per user in `<p>users` (those with a layer): the senders their moves turned each way."""
        names = [
            n.decode() if isinstance(n, bytes) else str(n)
            for n in self.state.call("listing users", lambda: self.state.client.zrange(self.state.users, 0, -1))
        ]
        out: dict[str, dict[str, int]] = {}
        for start in range(0, len(names), LISTING_BATCH):  # one pipeline a batch, not a round trip a user
            batch = names[start : start + LISTING_BATCH]

            def read(batch: list[str] = batch) -> list[Any]:
                if self.state.cluster:  # a cluster pipeline runs no scripts: the hashes, read here
                    pipe = self.state.client.pipeline(transaction=False)
                    for user in batch:
                        pipe.hgetall(sender_keys_of(self.prefix, user)[0])
                    return [self._turned_of(raw) for raw in pipe.execute()]
                for sha in (True, False):  # EVAL where a node lacks the script (restarted, failed over)
                    pipe = self.state.client.pipeline(transaction=False)
                    for user in batch:
                        key = sender_keys_of(self.prefix, user)[0]
                        if sha:
                            pipe.evalsha(self._turned.sha, 1, key, self.moves, repr(self.share))
                        else:
                            pipe.eval(TURNED_LUA, 1, key, self.moves, repr(self.share))
                    replies = list(pipe.execute(raise_on_error=not sha))
                    if not any(isinstance(r, NoScriptError) for r in replies):
                        for reply in replies:
                            if isinstance(reply, Exception):
                                raise reply
                        return replies
                raise AssertionError("unreachable: EVAL replies or raises")

            for user, (junk, inbox) in zip(batch, self.state.call("reading the users' senders", read), strict=True):
                if junk or inbox:
                    out[user] = {"senders_to_junk": int(junk), "senders_to_inbox": int(inbox)}
        return out

    def _turned_of(self, raw: dict[Any, Any]) -> tuple[int, int]:
        """TURNED_LUA's answer from a user's senders hash, read."""
        by_sender: dict[str, list[int]] = {}
        for field, value in raw.items():
            name = field.decode() if isinstance(field, bytes) else str(field)
            sender, _, which = name.rpartition(":")
            by_sender.setdefault(sender, [0, 0, 0, 0])["dfio".index(which)] = int(value)
        ways = [way_of([tuple(counts)], self.moves, self.share) for counts in by_sender.values()]  # type: ignore[list-item]
        return sum(way > 0 for way in ways), sum(way < 0 for way in ways)

    def pairs(self) -> int | None:
        return None  # counting them would read every user's keys at each scrape

    def export(self) -> dict[str, Any]:
        return {}  # in Redis, not in the daemon's snapshot

    def restore(self, data: dict[str, Any]) -> None:
        pass
