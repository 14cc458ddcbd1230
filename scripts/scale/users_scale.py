"""What many users' sender state costs in Redis: bytes per user with N rescued senders each, and its bounds.

Starts a redis-server on loopback (tests/redis_helpers.py) and, for --users users, runs
the real move script (spamd.store.redis.senders.MOVE_LUA) --moves times for each of
--senders senders per user: messages from that sender moved out of Junk, so each
sender is "rescued" ([users] sender_moves = 3 by default). The senders' keys are 64-bit,
as spamd.people.senders.sender_key makes them (--sender-bits 63: as runs before the packed
counts, whose text of keys past 2**63 was longer). The scripts are sent in
pipelines of --batch (the daemon sends one per move; the state is the same). Then it
reports Redis's used_memory before and after (per user), MEMORY USAGE of a sample of
users' keys, their TTL, and that no user holds more than the caps.

Then it times `spamctl users` (the control operation, in process, on an Engine opened with
that [redis] url): every user's summary line, kept by the move script, read in one HGETALL
(spamd/store/redis/listing.py); and, with --memory, the same with MEMORY USAGE of each
user's keys, read in pipelines.

Only the sender state: not the token layers (their cost is scripts/scale/users_cost.py's),
not the embedded store (scripts/scale/users_embedded_scale.py).

    .venv/bin/python scripts/scale/users_scale.py                          # 100,000 users x 20 senders
    .venv/bin/python scripts/scale/users_scale.py --users 5000 --senders 20
    .venv/bin/python scripts/scale/users_scale.py --users 5000 --senders 20 --kept --learned   # with what they kept
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from spamd.config import load_config  # noqa: E402
from spamd.engine.engine import Engine  # noqa: E402
from spamd.frontends.control import op_users  # noqa: E402
from spamd.frontends.control_protocol import user_rows  # noqa: E402
from spamd.people.kept import PROFILE_SIZE  # noqa: E402
from spamd.people.learned import PER_USER_IN_REDIS, learning_record  # noqa: E402
from spamd.store.redis.connect import user_hash_tag  # noqa: E402
from spamd.store.redis.kept import KEEP_LUA, KEPT_PER_USER, kept_key  # noqa: E402
from spamd.store.redis.learned import KEEP_S as LEARNED_KEEP_S  # noqa: E402
from spamd.store.redis.sender_fields import sender_args, sender_id  # noqa: E402
from spamd.store.redis.senders import (  # noqa: E402
    KEEP_S,
    MOVE_LUA,
    PLACED_PER_USER,
    SENDERS_PER_USER,
    recency_now,
    sender_keys_of,
)
from spamd.store.redis.summary import summary_key  # noqa: E402
from tests.redis_helpers import RedisServer  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--senders", type=int, default=20, help="rescued senders per user")
    parser.add_argument("--moves", type=int, default=3, help="messages moved out of Junk per sender")
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--sender-bits", type=int, default=64, choices=(63, 64),
                        help="bits of the senders' keys: 64 as sender_key makes them (runs before the packed counts: 63)")  # fmt: skip
    parser.add_argument("--sample", type=int, default=200, help="users whose keys MEMORY USAGE reads")
    parser.add_argument("--memory", action="store_true", help="also time `spamctl users --memory`")
    parser.add_argument("--listings", type=int, default=3, help="times `spamctl users` is timed")
    parser.add_argument("--kept", action="store_true",
                        help="each move also keeps its message's sample for the sender (spamd/store/redis/kept.py), "
                        "--sample-size fingerprints a message")  # fmt: skip
    parser.add_argument(
        "--sample-size", type=int, default=37, help="fingerprints a message's sample (about 300 tokens / 8)"
    )
    parser.add_argument(
        "--learned",
        action="store_true",
        help="each move also leaves its learning record (spamd/store/redis/learned.py)",
    )
    args = parser.parse_args()
    prefix = "spamd:"
    server = RedisServer(Path(tempfile.mkdtemp(prefix="spamd-users-scale-")), appendfsync="no").start()
    client = server.client()
    try:
        sha = client.script_load(MOVE_LUA)
        kept_sha = client.script_load(KEEP_LUA)
        shift = 64 - args.sender_bits
        before = int(client.info("memory")["used_memory"])
        started = time.perf_counter()
        pipe = client.pipeline(transaction=False)
        queued = 0
        for u in range(args.users):
            name = f"user{u}@example.com"
            keys = [*sender_keys_of(prefix, name), summary_key(prefix, sender_keys_of(prefix, name)[0], False)]
            for s in range(args.senders):
                sender = int.from_bytes(hashlib.blake2b(f"{u}:{s}".encode(), digest_size=8).digest(), "big") >> shift
                for m in range(args.moves):
                    key = hashlib.blake2b(f"{u}:{s}:{m}".encode(), digest_size=16).digest()
                    pipe.evalsha(sha, len(keys), *keys, key, 0, recency_now(), SENDERS_PER_USER, PLACED_PER_USER,
                                 KEEP_S, 3, repr(0.8), name, *sender_args([sender]))  # fmt: skip
                    if args.kept:
                        rng = random.Random(f"{u}:{s}:{m}")
                        profile_sample = np.unique(
                            np.array([rng.randrange(65536) for _ in range(args.sample_size)], dtype="<u2")
                        )
                        pipe.evalsha(kept_sha, 1, kept_key(prefix, name), profile_sample.tobytes(), PROFILE_SIZE, KEPT_PER_USER,
                                     KEEP_S, sender_id(sender))  # fmt: skip
                    if args.learned:
                        record = learning_record(key, "learned", user=name, message_id=f"<{key.hex()}@lists.example.org>",
                                                 label="ham", source="maildir", senders=(sender,), moved=True, kept=1)  # fmt: skip
                        learned_key = f"{prefix}{user_hash_tag(name)}:learned"
                        del record["why"]  # as spamd.store.redis.learned stores it
                        pipe.lpush(learned_key, json.dumps(record, separators=(",", ":")))
                        pipe.ltrim(learned_key, 0, PER_USER_IN_REDIS - 1)
                        pipe.expire(learned_key, LEARNED_KEEP_S)
                    queued += 1
                    if queued == args.batch:
                        pipe.execute()
                        queued = 0
        pipe.execute()
        built = time.perf_counter() - started
        after = int(client.info("memory")["used_memory"])
        sample = range(0, args.users, max(1, args.users // args.sample))
        per_user, ttls, senders_held, placed_held = [], [], [], []
        for u in sample:
            keys = sender_keys_of(prefix, f"user{u}@example.com")
            keys += [kept_key(prefix, f"user{u}@example.com")] * args.kept
            keys += [f"{prefix}{user_hash_tag(f'user{u}@example.com')}:learned"] * args.learned
            per_user.append(sum(int(client.memory_usage(k) or 0) for k in keys))
            ttls.append(min(int(client.ttl(k)) for k in keys))
            senders_held.append(int(client.zcard(keys[1])))
            placed_held.append(int(client.zcard(keys[2])))
        moves = args.users * args.senders * args.moves
        print(f"{args.users} users x {args.senders} senders x {args.moves} moves: {moves} move scripts in "
              f"{built:.1f} s ({moves / built:.0f}/s, pipelined)")  # fmt: skip
        print(
            f"used_memory {before / 2**20:.1f} -> {after / 2**20:.1f} MiB: {(after - before) / args.users:.0f} bytes a user"
        )
        print(f"MEMORY USAGE of a user's keys ({len(per_user)} users): median {statistics.median(per_user):.0f} "
              f"bytes, max {max(per_user)}")  # fmt: skip
        print(f"senders held per user max {max(senders_held)} (cap {SENDERS_PER_USER}), messages held max "
              f"{max(placed_held)} (cap {PLACED_PER_USER}); TTL min {min(ttls)} s (expiry {KEEP_S} s after the last move)")  # fmt: skip
        summary_bytes = int(client.memory_usage(summary_key(prefix, "", False)) or 0)
        print(
            f"the users' summary lines: {summary_bytes / 2**20:.1f} MiB ({summary_bytes / args.users:.0f} bytes a user)"
        )
        home = Path(tempfile.mkdtemp(prefix="spamd-users-scale-home-"))
        engine = Engine.open(load_config(data_dir=home, redis_url=server.url), durable=False)
        try:
            for memory in [False] * args.listings + [True] * args.memory:
                started, cpu = time.perf_counter(), time.process_time()
                listed = user_rows(op_users(engine, {"memory": memory})["users"])
                answered, answered_cpu = time.perf_counter() - started, time.process_time() - cpu
                turned = sum(row["senders_to_inbox"] for row in listed)
                estimate = statistics.median(row["bytes"] for row in listed)
                print(f"spamctl users{' --memory' if memory else ''} (op_users in process): {answered:.2f} s ({answered_cpu:.2f} s of CPU here) for "
                      f"{len(listed)} users, {turned} senders turned to the inbox, median bytes {estimate:.0f}")  # fmt: skip
        finally:
            engine.close()
    finally:
        client.close()
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
