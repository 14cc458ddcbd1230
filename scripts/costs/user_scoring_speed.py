#!/usr/bin/env python3
"""Cost of scoring for a user with a layer against the shared model alone, in one process.

Trains the first N messages of a multi-user index (third field: the user; e.g. the
agree.index that scripts/accuracy/multi_user_stream.py writes) into a fresh in-memory Engine,
then scores the next N, each for its user and by the shared model alone, in
interleaved rounds; prints the best round of each in microseconds a message and the
ratio. Analysis (parse, tokenize, hash) is done beforehand and not timed.

    python scripts/costs/user_scoring_speed.py /tmp/users-mus/agree.index --messages 2000 --rounds 5
    python scripts/costs/user_scoring_speed.py /tmp/users-mus/agree.index --redis   # the model in a redis-server on loopback

With --redis, a third figure: the user's scoring with the two reads apart, the model's counts
and then the user's senders' counts (as on a cluster, where they are on different nodes),
against the one round trip that carries both on plain Redis.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

from spamd.config import Config, UsersConfig
from spamd.engine.engine import Engine
from spamd.evaluation.trec import index_messages, read_index


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index", type=Path)
    parser.add_argument("--messages", type=int, default=2000, help="trained, then as many scored")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="cProfile the user rounds instead of timing them")
    parser.add_argument("--redis", action="store_true", help="the model in a redis-server of its own on loopback")
    args = parser.parse_args()
    entries = read_index(args.index)[: 2 * args.messages]
    with tempfile.TemporaryDirectory(prefix="spamd-user-speed-") as tmp, contextlib.ExitStack() as stack:
        config = dataclasses.replace(Config(users=UsersConfig(score_per_user=True)), data_dir=Path(tmp))
        if args.redis:
            sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
            from tests.redis_helpers import RedisServer

            server = RedisServer(Path(tmp) / "redis").start()
            stack.callback(server.stop)
            config = dataclasses.replace(config, redis=dataclasses.replace(config.redis, url=server.url))
        engine = Engine.open(config, durable=False)
        try:
            pairs = list(index_messages(entries, on_skip=lambda entry, reason: None))
            analyzed = engine.classifier.analyze_many([raw for _, raw in pairs])
            both = list(zip([entry for entry, _ in pairs], analyzed, strict=True))
            train, test = both[: args.messages], both[args.messages :]
            for entry, a in train:
                engine.trainer.train(a, entry.label, "eval", True, entry.user)
            score = engine.classifier.score
            if args.profile:
                import cProfile
                import pstats

                with cProfile.Profile() as profile:
                    for _ in range(args.rounds):
                        for entry, a in test:
                            score(a, entry.user)
                pstats.Stats(profile).sort_stats("tottime").print_stats(15)
                return 0
            best = {"shared": float("inf"), "user": float("inf")}
            if args.redis:
                best["apart"] = float("inf")
            for _ in range(args.rounds):
                for name in best:
                    started = time.perf_counter()
                    for entry, a in test:
                        if name == "apart":  # score_and_counts' cluster path (the rule after it untimed)
                            engine.model.score(a.features)
                            if a.senders:
                                engine.senders.counts(entry.user, a.senders)  # type: ignore[attr-defined]  # Redis's
                        else:
                            score(a, entry.user if name == "user" else None)
                    best[name] = min(best[name], (time.perf_counter() - started) / len(test) * 1e6)
        finally:
            engine.close()
    print(f"scoring: {best['user']:.1f} us/msg for its user, {best['shared']:.1f} us/msg shared only "
          f"({best['user'] / best['shared']:.2f}x), {len(test)} messages, best of {args.rounds} rounds")  # fmt: skip
    if "apart" in best:
        print(f"the user's two reads apart (as on a cluster): {best['apart']:.1f} us/msg "
              f"({best['apart'] / best['shared']:.2f}x the shared model's)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
