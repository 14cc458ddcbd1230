"""The shared store: model counts, class totals, the ledger and training events in one Redis.

Several daemons on one Redis score with one model and learn from every user's move.
Keys (all under `[redis] prefix`, "spamd:" by default):

    <p>ham, <p>spam     hashes bucket id -> stored count (the embedded model's rows;
                        a bucket at 0 is deleted, so each holds at most 2**hash_bits fields)
    <p>totals           hash: tokens:0/1, docs:0/1, distinct, seq, hash_bits
    <p>ledger           hash message key (16 bytes) -> label | 2 if a person decided
    <p>ledger:order     sorted set message key -> seq of its last change (oldest trimmed
                        past store.ledger_max_entries, in the training script itself)
    <p>events           stream of training events, trimmed to about redis.events_max
    <p>outcomes         hash "source:outcome" -> count, across every daemon

A training is one Lua script (EVALSHA): the ledger check, the count changes, the
ledger entry and the event happen atomically, so a message trained through two
daemons counts once and a correction moves it once, whichever daemon sees it. A
score is one round trip (a read-only script: HMGETs of both rows and the totals). Nothing here
scans keys; `export` and `import` read and write whole hashes (admin operations).
This module does not know where a message came from beyond a `source` tag, and
keeps no state of its own that Redis does not hold (the daemon can always restart).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, Callable, TypeVar

import numpy as np
import redis
import structlog
from redis.backoff import NoBackoff
from redis.retry import Retry

from spamd.classifier import Analyzed
from spamd.config import Config
from spamd.errors import CorruptStateError, StoreError, StoreUnavailableError
from spamd.model import (
    Contribution,
    Features,
    Label,
    MultinomialNB,
    Score,
    explain_counts,
    featurize,
    score_counts,
    verdict_of,
)
from spamd.store.local import Recovery, Store
from spamd.store.records import Ledger
from spamd.store.snapshot import decode_snapshot, encode_snapshot
from spamd.training import Outcome

log = structlog.get_logger()

T = TypeVar("T")

# Backoff after Redis failed: every call in the meantime fails at once (no stall per
# message), then one call tries again; doubling from 0.1 s up to 5 s.
BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 5.0

_TOTAL_FIELDS = ("tokens:0", "tokens:1", "docs:0", "docs:1", "distinct")

# KEYS: ham, spam, totals, ledger, ledger:order, events, outcomes
# ARGV: op ("train" | "untrain"), message key, label, user (0/1), source, time,
#       ledger_max_entries, events_max, then n bucket ids and n stored counts.
# Returns {outcome, seq}. Mirrors spamd.training.Trainer and spamd.store.records.apply_record.
_TRAIN_LUA = """
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
_SCORE_LUA = """#!lua flags=no-writes
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


def redacted(url: str) -> str:
    """The URL without its password, for logs and messages."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.split("@", 1)[1]
    return f"{scheme}{sep}{rest}"


class RedisState:
    """One Redis connection pool and the keys of one model; every call fails as StoreUnavailableError when Redis does.

    Does not cache anything: each score reads the counts as they are now, so a
    training through any daemon is used by the next score everywhere.
    """

    def __init__(self, config: Config):
        self.config = config
        r = config.redis
        self.url = redacted(r.url)
        p = r.prefix
        self.keys = [f"{p}ham", f"{p}spam", f"{p}totals", f"{p}ledger", f"{p}ledger:order", f"{p}events", f"{p}outcomes"]
        self.ham, self.spam, self.totals, self.ledger, self.order, self.events, self.outcomes = self.keys
        try:
            # One immediate retry on a broken connection (a restarted Redis): it reconnects.
            # A training retried that way is a repeat to the script's ledger check, never double.
            self.client = redis.Redis.from_url(
                r.url, socket_timeout=r.timeout_s, socket_connect_timeout=r.timeout_s,
                retry=Retry(NoBackoff(), 1), retry_on_timeout=False, health_check_interval=0,
            )  # fmt: skip
        except ValueError as e:
            raise StoreError(f"[redis] url {self.url!r}: {e}") from None
        self._train = self.client.register_script(_TRAIN_LUA)
        self._score = self.client.register_script(_SCORE_LUA)
        self._failures = 0
        self._retry_at = 0.0
        self._down_since = 0.0
        self._last_error = ""

    # ---------------------------------------------------------- connection

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """Run one Redis exchange; on failure back off (bounded) and raise StoreUnavailableError."""
        now = time.monotonic()
        if now < self._retry_at:
            raise StoreUnavailableError(
                f"Redis at {self.url} is unreachable ({self._last_error}); {what} not done, retrying by itself"
            )
        try:
            result = fn()
        except (redis.ConnectionError, redis.TimeoutError) as e:
            self._failures += 1
            self._retry_at = now + min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (self._failures - 1))
            self._last_error = f"{type(e).__name__}: {e}"
            if self._failures == 1:
                self._down_since = now
                log.error("redis_unreachable", url=self.url, error=self._last_error, action="answering temporary failures; retrying")
            raise StoreUnavailableError(f"Redis at {self.url} is unreachable ({self._last_error}); {what} not done, retrying by itself") from None
        except redis.ResponseError as e:
            raise StoreError(f"Redis at {self.url} refused {what}: {e}") from None
        if self._failures:
            log.info("redis_reconnected", url=self.url, down_s=round(now - self._down_since, 2), failures=self._failures)
            self._failures = 0
            self._retry_at = 0.0
        return result

    def check_hash_bits(self) -> None:
        """Claim the model's bucket space, or refuse one built with another `model.hash_bits`."""
        bits = self.config.model.hash_bits

        def claim() -> Any:
            pipe = self.client.pipeline(transaction=True)
            pipe.hsetnx(self.totals, "hash_bits", bits)
            pipe.hget(self.totals, "hash_bits")
            return pipe.execute()[1]

        stored = int(self.call("the start-up check", claim))
        if stored != bits:
            raise CorruptStateError(
                f"Redis at {self.url} (prefix {self.config.redis.prefix!r}) holds a model with model.hash_bits = "
                f"{stored}, the config says {bits}; set it back, or use another [redis] prefix"
            )

    def close(self) -> None:
        self.client.close()

    # ---------------------------------------------------------- reads

    def fetch(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """The buckets' counts (2, n) and the class totals, in one atomic round trip (a read-only script)."""
        text = " ".join(map(str, ids.tolist()))
        reply = self.call("scoring", lambda: self._score(keys=self.keys[:3], args=[text]))
        values = np.array(reply.split(), dtype=np.int64)
        n = len(ids)
        return values[: 2 * n].reshape(2, n).astype(np.uint32), values[2 * n : 2 * n + 2], values[2 * n + 2 : 2 * n + 4], int(values[-1])

    def totals_now(self) -> dict[str, int]:
        values = self.call("reading the totals", lambda: self.client.hmget(self.totals, [*_TOTAL_FIELDS, "seq"]))
        return dict(zip([*_TOTAL_FIELDS, "seq"], (int(v) if v else 0 for v in values)))

    # ---------------------------------------------------------- training

    def train(self, op: str, analyzed: Analyzed, label: Label | None, user: bool, source: str) -> tuple[str, int]:
        """Run the training script; (outcome, seq). Acknowledged only once Redis has applied it."""
        features = analyzed.features
        stored = MultinomialNB.stored_counts(features.counts)
        args = [
            op, analyzed.key, 0 if label is None else int(label), int(user), source, repr(time.time()),
            self.config.store.ledger_max_entries, self.config.redis.events_max,
            *features.ids.tolist(), *stored.tolist(),
        ]  # fmt: skip
        outcome, seq = self.call("training", lambda: self._train(keys=self.keys, args=args))
        return outcome.decode(), int(seq)

    # ---------------------------------------------------------- whole state

    def load(self) -> tuple[MultinomialNB, Ledger, int]:
        """The whole model and ledger as embedded objects (for export and tests); one atomic read."""

        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=True)
            pipe.hgetall(self.ham)
            pipe.hgetall(self.spam)
            pipe.hgetall(self.totals)
            pipe.zrange(self.order, 0, -1)
            pipe.hgetall(self.ledger)
            return pipe.execute()

        ham, spam, totals, order, entries = self.call("reading the whole model", read)
        model = MultinomialNB(self.config.model)
        for label, row in ((Label.HAM, ham), (Label.SPAM, spam)):
            if row:
                ids = np.fromiter((int(k) for k in row), dtype=np.int64, count=len(row))
                model.counts[label, ids] = np.fromiter((int(v) for v in row.values()), dtype=np.uint32, count=len(row))
        t = {k.decode(): int(v) for k, v in totals.items()}
        model.token_totals[:] = [t.get("tokens:0", 0), t.get("tokens:1", 0)]
        model.doc_totals[:] = [t.get("docs:0", 0), t.get("docs:1", 0)]
        model.distinct = t.get("distinct", 0)
        ledger = Ledger(self.config.store.ledger_max_entries)
        for key in order:  # oldest first, as the embedded ledger keeps them
            value = entries.get(key)
            if value is not None:
                ledger.set(bytes(key), Label(int(value) & 1), bool(int(value) & 2))
        return model, ledger, t.get("seq", 0)

    def replace(self, model: MultinomialNB, ledger: Ledger, seq: int) -> None:
        """Make Redis hold exactly this model and ledger, in one MULTI/EXEC (other daemons see all or nothing)."""
        chunk = 10_000

        def write() -> None:
            pipe = self.client.pipeline(transaction=True)
            pipe.delete(self.ham, self.spam, self.ledger, self.order)
            for label, key in ((Label.HAM, self.ham), (Label.SPAM, self.spam)):
                row = model.counts[label]
                ids = np.flatnonzero(row)
                for start in range(0, len(ids), chunk):
                    part = ids[start : start + chunk]
                    pipe.hset(key, mapping=dict(zip(part.tolist(), row[part].tolist())))
            pipe.hset(self.totals, mapping={
                "tokens:0": int(model.token_totals[0]), "tokens:1": int(model.token_totals[1]),
                "docs:0": int(model.doc_totals[0]), "docs:1": int(model.doc_totals[1]),
                "distinct": int(model.distinct), "seq": seq, "hash_bits": model.config.hash_bits,
            })  # fmt: skip
            items = list(ledger.as_dict().items())
            for start in range(0, len(items), chunk):
                part = items[start : start + chunk]
                pipe.hset(self.ledger, mapping=dict(part))
                # Recency as in the embedded ledger, oldest first, and all below any seq a
                # training will write from now on (scores < 0), so new entries are the newest.
                pipe.zadd(self.order, {k: start + i - len(items) for i, (k, _) in enumerate(part)})
            pipe.execute()

        self.call("the import", write)


# ---------------------------------------------------------------- the Engine's parts over RedisState


class RedisModel:
    """The model as the Engine and Classifier use it (score, explain, totals), read from Redis on each call.

    Does not learn: training goes through RedisTrainer's script. Scores with the
    embedded model's own functions (spamd.model.score_counts), so the numbers are the same.
    """

    def __init__(self, state: RedisState, config: Any):
        self.state = state
        self.config = config  # ModelConfig; Engine.reconfigure replaces it

    def score(self, features: Features) -> Score:
        if len(features) == 0:
            return verdict_of(self.config, 0.0)
        counts, token_totals, doc_totals, distinct = self.state.fetch(features.ids)
        if not (doc_totals[0] and doc_totals[1]):
            return verdict_of(self.config, 0.0)
        return score_counts(self.config, counts, token_totals, distinct)

    def explain(self, tokens: list[str], limit: int = 20) -> tuple[Score, list[Contribution]]:
        features = featurize(tokens, self.config.hash_bits)
        counts, token_totals, doc_totals, distinct = self.state.fetch(features.ids)
        return explain_counts(self.config, tokens, features, counts, token_totals, doc_totals, distinct, limit)

    @property
    def doc_totals(self) -> np.ndarray:
        t = self.state.totals_now()
        return np.array([t["docs:0"], t["docs:1"]], dtype=np.int64)

    @property
    def token_totals(self) -> np.ndarray:
        t = self.state.totals_now()
        return np.array([t["tokens:0"], t["tokens:1"]], dtype=np.int64)

    @property
    def distinct(self) -> int:
        return self.state.totals_now()["distinct"]

    @property
    def memory_bytes(self) -> int:
        return 0  # held by Redis (see its INFO memory), not by this process

    def state_equals(self, other: MultinomialNB) -> bool:
        return self.state.load()[0].state_equals(other)


class RedisLedger:
    """The ledger as the trainer's callers read it (get, len, counts); the script alone writes it."""

    def __init__(self, state: RedisState):
        self.state = state

    def get(self, key: bytes) -> tuple[Label, bool] | None:
        value = self.state.call("reading the ledger", lambda: self.state.client.hget(self.state.ledger, key))
        if value is None:
            return None
        v = int(value)
        return Label(v & 1), bool(v & 2)

    def __len__(self) -> int:
        return int(self.state.call("reading the ledger", lambda: self.state.client.hlen(self.state.ledger)))

    def counts(self) -> dict[str, int]:
        return self.state.load()[1].counts()

    def as_dict(self) -> dict[bytes, int]:
        return self.state.load()[1].as_dict()


class RedisTrainer:
    """spamd.training.Trainer's interface, each training one atomic script in Redis (learned once, across daemons).

    Keeps no ledger of its own: every daemon on the same Redis sees the same one.
    """

    def __init__(self, state: RedisState, model: RedisModel):
        self.state = state
        self.model = model
        self.ledger = RedisLedger(state)
        self.seq = 0  # the seq of this process's last committed training
        # (source, outcome) -> count since start, for `spamctl stats` (<p>outcomes has every daemon's).
        self.events: Counter[tuple[str, str]] = Counter()

    def train(self, analyzed: Analyzed, label: Label, source: str, user: bool = True) -> Outcome:
        return self._run("train", analyzed, label, user, source)

    def untrain(self, analyzed: Analyzed, source: str) -> Outcome:
        return self._run("untrain", analyzed, None, True, source)

    def label_of(self, key: bytes) -> Label | None:
        known = self.ledger.get(key)
        return None if known is None else known[0]

    def _run(self, op: str, analyzed: Analyzed, label: Label | None, user: bool, source: str) -> Outcome:
        outcome, seq = self.state.train(op, analyzed, label, user, source)
        if seq:
            self.seq = seq
        self.events[(source, outcome)] += 1
        return Outcome(outcome)


class RedisStore:
    """What the Engine asks of a store, for the Redis one: the local lock, no snapshots, export/import.

    Holds the state directory's lock only so that two processes do not share one
    data directory (its Maildir index and control socket); the model is in Redis.
    """

    keeps_snapshots = False

    def __init__(self, config: Config, state: RedisState):
        self.config = config
        self.state = state
        self.local = Store(config.state_dir, config.model, config.store)
        self.state_dir = config.state_dir
        self.last_snapshot_seq = 0
        self.last_snapshot_time: float | None = None
        self.journal_records = 0
        self.journal_bytes = 0

    def lock(self) -> None:
        self.local.lock()

    def close(self) -> None:
        self.local.close()
        self.state.close()

    def export_snapshot(self, counters: dict[str, int]) -> bytes:
        model, ledger, seq = self.state.load()
        return encode_snapshot(model, ledger, seq, counters)

    def import_snapshot(self, data: bytes, where: str) -> dict[str, object]:
        try:
            imported = decode_snapshot(data, self.config.model, self.config.store.ledger_max_entries, where)
        except CorruptStateError as e:
            raise StoreError(f"import refused, nothing changed: {e}") from None
        seq = self.state.totals_now()["seq"] + 1
        self.state.replace(imported.model, imported.ledger, seq)
        return {
            "redis": self.state.url,
            "seq": seq,
            "trained_ham": int(imported.model.doc_totals[Label.HAM]),
            "trained_spam": int(imported.model.doc_totals[Label.SPAM]),
            "ledger_entries": len(imported.ledger),
        }

    def stats(self) -> dict[str, object]:
        info = self.state.call("reading INFO", lambda: self.state.client.info("memory"))
        outcomes = self.state.call("reading outcomes", lambda: self.state.client.hgetall(self.state.outcomes))
        return {
            "store": "redis",
            "redis_url": self.state.url,
            "redis_prefix": self.config.redis.prefix,
            "redis_used_memory_bytes": info.get("used_memory"),
            "training_events_all_daemons": {k.decode(): int(v) for k, v in outcomes.items()},
        }


def open_redis(config: Config) -> tuple[RedisStore, RedisTrainer, Recovery]:
    """Connect, check the bucket space, lock the local data directory: the Engine's parts for Redis."""
    state = RedisState(config)
    store = RedisStore(config, state)
    try:
        state.check_hash_bits()
    except StoreUnavailableError as e:
        state.close()
        raise StoreError(f"{e}; start Redis or check [redis] url / --redis") from None
    except BaseException:
        state.close()
        raise
    try:
        store.lock()
    except BaseException:
        state.close()
        raise
    model = RedisModel(state, config.model)
    trainer = RedisTrainer(state, model)
    trainer.seq = state.totals_now()["seq"]
    return store, trainer, Recovery()

