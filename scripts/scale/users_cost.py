#!/usr/bin/env python3
"""What many users' layers cost: resident memory, snapshot size on disk, start-up time.

Builds an Engine in a temporary state directory (the real Engine, Store and Trainer;
the journal written without fsync for the build) and trains --users users x
--trainings trainings each, interleaved (every user's first, then every user's
second, ...), each naming its user, as `spamctl train --user` does. The messages are
synthetic: --tokens tokens each (about 150 distinct, with repeats), drawn from a
Zipf-like vocabulary of --vocabulary words (rank r with weight 1 / r^1.1), one
ordering for ham and another for spam sharing the 100 commonest words, so that the
layers share their tokens with the shared model and with each other as mail does;
half of each user's trainings are spam. Analysis (parse, tokenize) is skipped: the
tokens are hashed straight into features. It reads no mail, so it skips none.

Then it reports:
  - the layers' resident memory (their arrays, and with Python's per-object overhead),
    and the process's RSS before and after the build (the ledger and the shared model
    grow too: their share is named);
  - the snapshot's size on disk (Engine.snapshot()) and the time to write it;
  - start-up: Engine.open of the state directory in a fresh process (load the
    snapshot, restore the layers), its RSS after; then again with --replay more
    trainings in the journal after the snapshot.

    .venv/bin/python scripts/scale/users_cost.py                          # 10,000 users x 200
    .venv/bin/python scripts/scale/users_cost.py --users 1000 --trainings 200 --dir /var/tmp
    .venv/bin/python scripts/scale/users_cost.py --users 50 --trainings 20 # a quick check
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from spamd.config import Config, UsersConfig  # noqa: E402
from spamd.engine.engine import Engine  # noqa: E402
from spamd.learning.classifier import Analyzed  # noqa: E402
from spamd.model.bayes import Features, Label, featurize  # noqa: E402
from spamd.people.users import UserLayers  # noqa: E402

COMMON_WORDS = 100  # the commonest words are the same for ham and spam ("the", "and", headers' names)


def rss_bytes() -> int:
    """This process's resident set size, from /proc (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def mib(n: float) -> str:
    return f"{n / (1 << 20):,.1f} MiB"


class Vocabulary:
    """Zipf-like draws of bucket ids: a ham ordering and a spam ordering of one word list."""

    def __init__(self, size: int, hash_bits: int, seed: int):
        rng = np.random.default_rng(seed)
        weights = 1.0 / np.arange(1, size + 1) ** 1.1
        self.cumulative = np.cumsum(weights / weights.sum())
        # Every word hashed once, as featurize hashes it; a message is then a gather.
        words = featurize([f"w{i}" for i in range(size)], hash_bits)  # (sorted unique ids; collisions merge)
        ids = np.resize(words.ids, size)
        rng.shuffle(ids)
        spam = ids.copy()
        spam[COMMON_WORDS:] = rng.permutation(ids[COMMON_WORDS:])
        self.by_rank = {Label.HAM: ids, Label.SPAM: spam}
        self.rng = rng

    def message(self, label: Label, tokens: int) -> Features:
        ranks = np.searchsorted(self.cumulative, self.rng.random(tokens))
        ranks = np.minimum(ranks, len(self.cumulative) - 1)
        ids, counts = np.unique(self.by_rank[label][ranks], return_counts=True)
        return Features(ids.astype(np.uint32), counts.astype(np.uint32))


def train_users(
    engine: Engine, vocabulary: Vocabulary, users: int, rounds: range, tokens: int, progress: bool
) -> float:
    """`rounds` of one training per user, interleaved; seconds taken (wall clock)."""
    started = time.perf_counter()
    done = 0
    total = users * len(rounds)
    for t in rounds:
        labels = vocabulary.rng.integers(0, 2, users)
        for u in range(users):
            name = f"user{u:05d}"
            label = Label(int(labels[u]))
            key = hashlib.blake2b(f"{name}/{t}".encode(), digest_size=16).digest()
            engine.trainer.train(Analyzed(key, vocabulary.message(label, tokens)), label, "users_cost", True, name)
            done += 1
            if progress and done % 100_000 == 0:
                rate = done / (time.perf_counter() - started)
                print(f"  {done:,} / {total:,} trainings, {rate:,.0f}/s", file=sys.stderr, flush=True)
    return time.perf_counter() - started


def layer_overhead_bytes(engine: Engine) -> int:
    """The layers with Python's per-object overhead: each UserLayer, its four arrays, its name."""
    assert isinstance(engine.users, UserLayers)  # the embedded store's
    total = 0
    for name, layer in engine.users.layers.items():
        total += sys.getsizeof(layer) + sys.getsizeof(name)
        for array in (layer.ids, layer.counts, layer.token_totals, layer.doc_totals):
            total += sys.getsizeof(array) + (0 if array.base is None else array.nbytes)
    return total


def config_for(state: Path) -> Config:
    return dataclasses.replace(Config(users=UsersConfig(token_moves=True)), data_dir=state)  # layers built


def open_in_fresh_process(state: Path) -> dict[str, float]:
    """Engine.open of `state` in a new Python (as a starting daemon): seconds, and the RSS before and after."""
    done = subprocess.run(
        [sys.executable, __file__, "--open-only", str(state)], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def open_only(state: Path) -> None:
    before = rss_bytes()
    started, cpu_started = time.perf_counter(), time.process_time()
    engine = Engine.open(config_for(state))
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    assert engine.users is not None
    print(json.dumps({
        "seconds": seconds, "cpu_seconds": cpu_seconds, "rss_before": before, "rss_after": rss_bytes(), "users": len(engine.users),
        "replayed": getattr(engine.recovery, "replayed", -1),
    }))  # fmt: skip
    engine.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--trainings", type=int, default=200, help="trainings per user")
    parser.add_argument("--tokens", type=int, default=250, help="tokens drawn per message (about 150 distinct)")
    parser.add_argument("--vocabulary", type=int, default=200_000, help="words in the Zipf-like vocabulary")
    parser.add_argument(
        "--replay", type=int, default=10_000, help="trainings left in the journal for the second start-up"
    )
    parser.add_argument(
        "--dir", type=Path, default=None, help="where the temporary state directory goes (default: TMPDIR)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--open-only", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.open_only is not None:
        open_only(args.open_only)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="spamd-users-cost-", dir=args.dir))
    try:
        state = tmp / "data"
        rss_start = rss_bytes()
        engine = Engine.open(config_for(state), durable=False)
        assert engine.users is not None
        vocabulary = Vocabulary(args.vocabulary, engine.config.model.hash_bits, args.seed)
        rss_before = rss_bytes()
        sample = [len(vocabulary.message(Label(i % 2), args.tokens)) for i in range(1000)]
        print(f"{args.users:,} users x {args.trainings:,} trainings, {args.tokens} tokens a message "
              f"({np.mean(sample):.0f} distinct on average), vocabulary {args.vocabulary:,}", flush=True)  # fmt: skip
        seconds = train_users(engine, vocabulary, args.users, range(args.trainings), args.tokens, progress=True)
        trainings = args.users * args.trainings
        rss_after = rss_bytes()
        layers = engine.users
        assert isinstance(layers, UserLayers)  # the embedded store's
        tokens = sum(len(layer) for layer in layers.layers.values())
        print(f"build: {trainings:,} trainings in {seconds:,.0f} s ({trainings / seconds:,.0f}/s)")
        print(f"layers: {len(layers):,} users, {tokens:,} tokens ({tokens / max(len(layers), 1):,.0f} a user), "
              f"arrays {mib(layers.memory_bytes)} ({layers.memory_bytes / max(len(layers), 1) / 1024:,.1f} KiB a user), "
              f"with Python's objects {mib(layer_overhead_bytes(engine))}")  # fmt: skip
        print(
            f"shared model: {engine.model.distinct:,} distinct buckets; ledger: {len(engine.trainer.ledger):,} entries"
        )
        print(f"process RSS: {mib(rss_start)} at start, {mib(rss_before)} with the Engine open, "
              f"{mib(rss_after)} after the build (+{mib(rss_after - rss_before)}: layers, ledger, journal buffers)")  # fmt: skip
        started = time.perf_counter()
        path = engine.snapshot()
        written = time.perf_counter() - started
        size = path.stat().st_size
        print(f"snapshot: {mib(size)} on disk ({size / trainings:,.0f} bytes a training), written in {written:.1f} s")
        engine.close()

        cold = open_in_fresh_process(state)
        print(f"start-up (Engine.open, snapshot only): {cold['seconds']:.2f} s ({cold['cpu_seconds']:.2f} s CPU), "
              f"RSS {mib(cold['rss_before'])} -> {mib(cold['rss_after'])}")  # fmt: skip
        if args.replay:
            engine = Engine.open(config_for(state), durable=False)
            rounds = -(-args.replay // args.users)  # whole rounds of every user, at least --replay trainings
            train_users(engine, vocabulary, min(args.users, args.replay), range(args.trainings, args.trainings + rounds),
                        args.tokens, progress=False)  # fmt: skip
            journal = engine.store.journal_bytes
            replayed = engine.trainer.seq - engine.store.last_snapshot_seq
            engine.close()
            warm = open_in_fresh_process(state)
            print(f"start-up with {replayed:,} journal records to replay ({mib(journal)}): {warm['seconds']:.2f} s ({warm['cpu_seconds']:.2f} s CPU), "
                  f"RSS {mib(warm['rss_before'])} -> {mib(warm['rss_after'])}")  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
