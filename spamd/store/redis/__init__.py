"""The shared store: model counts, class totals, the ledger and training events in one Redis.

Several daemons on one Redis score with one model and learn from every user's move.
Keys (all under `[redis] prefix`, "spamd:" by default; on a Redis Cluster
(`redis+cluster://`) `<p>` is the prefix in braces, `{spamd:}`, one hash tag for them
all, so every script runs on one slot: spamd.store.redis.connect):

    <p>ham, <p>spam     hashes bucket id -> stored count (the embedded model's rows;
                        a bucket at 0 is deleted, so each holds at most 2**hash_bits fields)
    <p>totals           hash: tokens:0/1, docs:0/1, distinct, seq, hash_bits,
                        count_settings (JSON: [model] stored_counts and families), and
                        evidence_since (JSON: mail-evidence family -> [first seq, time on])
    <p>ledger           hash message key (16 bytes; per (user, message) for a user's
                        training) -> label | 2 if a person decided (| 4.. while the
                        user's layer has yet to apply it: spamd.store.redis.scripts)
    <p>ledger:order     sorted set message key -> seq of its last change (oldest trimmed
                        past store.ledger_max_entries, in the training script itself)
    <p>events           stream of training events, trimmed to about redis.events_max
    <p>outcomes         hash "source:outcome" -> count, across every daemon
    <p>users            sorted set user -> seq of their layer's last change ([users] max_users)

and each user's layer on that user's own slot, `<prefix>{u:NAME}:ham`... (spamd.store.redis.users).

A training is one Lua script (EVALSHA): the ledger check, the count changes, the
ledger entry and the event happen atomically, so a message trained through two
daemons counts once and a correction moves it once, whichever daemon sees it (a
training that names a user then runs its layer's script: spamd.store.redis.users). A
score is one round trip (a read-only script: HMGETs of both rows and the totals). Nothing here
scans keys; `export` and `import` read and write whole hashes (admin operations).
This module does not know where a message came from beyond a `source` tag, and
keeps no state of its own that Redis does not hold (the daemon can always restart).
"""

from spamd.store.redis.state import BACKOFF_FIRST_S, BACKOFF_MAX_S, RedisState
from spamd.store.redis.store import RedisStore, open_redis
from spamd.store.redis.views import RedisLedger, RedisModel, RedisTrainer

__all__ = [
    "BACKOFF_FIRST_S", "BACKOFF_MAX_S", "RedisLedger", "RedisModel", "RedisState", "RedisStore", "RedisTrainer",
    "open_redis",
]  # fmt: skip
