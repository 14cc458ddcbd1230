"""What `[redis] replicas_acked` costs a training: its latency with 0 and with 1 replica confirming, interleaved.

A redis-server primary and one replica on loopback (AOF, appendfsync always on both,
tests/redis_helpers.py); an Engine on the primary trains trec07p-dev messages one at a
time (`Engine.train`, as `spamctl train` and a Maildir move do), each setting in turn for
--rounds rounds on a fresh prefix, and the per-training wall time is reported. The
scoring path is not measured: it never waits for replicas (scripts/speed/bench_smtp.py
--replicas-acked measures SMTP).

    .venv/bin/python scripts/costs/bench_replicas_acked.py                    # 300 trainings, 3 rounds
    .venv/bin/python scripts/costs/bench_replicas_acked.py --messages 1000 --rounds 5
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.speed import bench_smtp  # noqa: E402  the corpus reader
from spamd.config import Config, ModelConfig  # noqa: E402
from spamd.engine.engine import Engine  # noqa: E402
from spamd.model.bayes import Label  # noqa: E402
from tests.daemon_helpers import wait_until_sync  # noqa: E402
from tests.redis_helpers import RedisServer  # noqa: E402


def one_round(url: str, prefix: str, acked: int, rows: list[tuple[str, bytes]], work: Path) -> list[float]:
    """Each training's wall time in ms, on a fresh prefix."""
    config = Config(data_dir=work / prefix, model=ModelConfig())
    config = dataclasses.replace(
        config, redis=dataclasses.replace(config.redis, url=url, prefix=prefix, replicas_acked=acked)
    )
    engine = Engine.open(config)
    times = []
    try:
        for label, raw in rows:
            started = time.perf_counter()
            engine.train(raw, Label.SPAM if label == "spam" else Label.HAM, "bench")
            times.append((time.perf_counter() - started) * 1000)
    finally:
        engine.close()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=Path, default=bench_smtp.DEFAULT_INDEX)
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = bench_smtp.read_corpus(args.index)[: args.messages]
    work = Path(tempfile.mkdtemp(prefix="spamd-replicas-"))
    primary = RedisServer(work / "primary").start()
    replica = RedisServer(work / "replica").start(replica_of=primary.port)
    results: dict[int, list[float]] = {0: [], 1: []}
    try:
        wait_until_sync(lambda: "master_link_status:up" in replica.info("replication"), timeout=60)
        for round_number in range(args.rounds):
            for acked in (0, 1):
                times = one_round(primary.url, f"r{round_number}a{acked}:", acked, rows, work)
                results[acked] += times
                print(f"round {round_number} replicas_acked {acked}: {len(times)} trainings, "
                      f"p50 {statistics.median(times):.2f} ms, mean {statistics.fmean(times):.2f} ms, "
                      f"p99 {bench_smtp.percentile(times, 0.99):.2f} ms", flush=True)  # fmt: skip
    finally:
        replica.stop()
        primary.stop()
    for acked, times in results.items():
        print(f"replicas_acked {acked}: {len(times)} trainings, p50 {statistics.median(times):.2f} ms, "
              f"mean {statistics.fmean(times):.2f} ms, p99 {bench_smtp.percentile(times, 0.99):.2f} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
