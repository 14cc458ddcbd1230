"""SMTP throughput and latency: one spamd on the embedded store, one on Redis, two on one Redis.

The machinery is scripts/speed/bench_smtp.py's (corpus, pre-training, daemon start, smtplib
clients that reuse a connection, percentiles): the same trec07p-dev replay against each
set-up in turn, same model (the first --train messages), same number of clients in all
(split between the daemons when there are two). A real redis-server runs on a free
loopback port (appendonly yes, appendfsync as --appendfsync) in a temp directory; its
CPU time per round is read from /proc, beside each daemon's.

    .venv/bin/python scripts/speed/bench_redis.py                      # 8 clients, 3,000 messages, 1 round
    .venv/bin/python scripts/speed/bench_redis.py --rounds 3 --limit 2000
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.speed import bench_smtp  # noqa: E402  the SMTP replay machinery
from tests.redis_helpers import RedisServer  # noqa: E402


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def replay(ports: list[int], messages: list[bytes], clients: int) -> tuple[float, list[float], list[str]]:
    """`clients` smtplib threads, spread over `ports`; (seconds, latencies ms, errors)."""
    shares = [messages[i::clients] for i in range(clients)]
    latencies: list[float] = []
    errors: list[str] = []
    threads = [
        threading.Thread(target=bench_smtp.client, args=(ports[i % len(ports)], share, latencies, errors))
        for i, share in enumerate(shares)
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, latencies, errors


def one_round(name: str, work: Path, redis: RedisServer | None, daemons: int, rows, messages, clients: int) -> dict:
    base = work / name
    base.mkdir()
    config_file = base / "spamd.toml"
    text = '[log]\nformat = "json"\n[maildir]\nfsync = true\n[smtp]\nmax_recipients = 10\n'
    if redis is not None:
        redis.client().flushall()
        text += f'[redis]\nurl = "{redis.url}"\n'
    config_file.write_text(text)
    bench_smtp.pretrain(base / "d0", config_file, rows)
    procs = []
    try:
        for i in range(daemons):
            procs.append(bench_smtp.start_daemon(base / f"d{i}", config_file, base / f"spamd{i}.log", None))
        daemon_cpu = [cpu_seconds(p.pid) for p, _ in procs]
        redis_pid = redis.proc.pid if redis is not None and redis.proc is not None else None
        redis_cpu = cpu_seconds(redis_pid) if redis_pid is not None else 0.0
        elapsed, latencies, errors = replay([port for _, port in procs], messages, clients)
        daemon_cpu = [cpu_seconds(p.pid) - before for (p, _), before in zip(procs, daemon_cpu, strict=True)]
        redis_cpu = cpu_seconds(redis_pid) - redis_cpu if redis_pid is not None else 0.0
    finally:
        for proc, _ in procs:
            proc.terminate()
            proc.wait(60)
    return {
        "name": name,
        "msgs_per_s": len(latencies) / elapsed,
        "p50": statistics.median(latencies),
        "p99": bench_smtp.percentile(latencies, 0.99),
        "errors": len(errors),
        "daemon_cpu_ms_per_msg": sum(daemon_cpu) / max(1, len(latencies)) * 1000,
        "redis_cpu_ms_per_msg": redis_cpu / max(1, len(latencies)) * 1000,
        "redis_cpu_share": redis_cpu / elapsed,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=Path, default=bench_smtp.DEFAULT_INDEX)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--train", type=int, default=1000, help="messages trained before each replay")
    parser.add_argument("--limit", type=int, default=3000, help="messages replayed per round")
    parser.add_argument("--rounds", type=int, default=1, help="each set-up this many times, interleaved; medians shown")
    parser.add_argument("--appendfsync", default="always", choices=["always", "everysec", "no"])
    args = parser.parse_args()
    if not args.index.is_file():
        print(f"corpus index not found: {args.index}", file=sys.stderr)
        return 2
    rows = bench_smtp.read_corpus(args.index)
    messages = [bench_smtp.crlf(raw) for _, raw in rows[args.train : args.train + args.limit]]
    work = Path(tempfile.mkdtemp(prefix="spamd-bench-redis-"))
    redis = RedisServer(work / "redis", appendfsync=args.appendfsync).start()
    results: dict[str, list[dict]] = {}
    try:
        for r in range(args.rounds):
            for name, server, daemons in (("embedded", None, 1), ("redis-1", redis, 1), ("redis-2", redis, 2)):
                result = one_round(f"{name}-{r}", work, server, daemons, rows[: args.train], messages, args.clients)
                results.setdefault(name, []).append(result)
                print(
                    f"{name:9s} round {r}: {result['msgs_per_s']:6.0f} msgs/s, p50 {result['p50']:5.1f} ms, "
                    f"p99 {result['p99']:6.1f} ms, errors {result['errors']}, spamd CPU "
                    f"{result['daemon_cpu_ms_per_msg']:.2f} ms/msg, redis CPU {result['redis_cpu_ms_per_msg']:.3f} "
                    f"ms/msg ({result['redis_cpu_share'] * 100:.0f}% of a core)",
                    flush=True,
                )
    finally:
        redis.stop()
        shutil.rmtree(work, ignore_errors=True)
    embedded = statistics.median(r["msgs_per_s"] for r in results["embedded"])
    print(
        f"\n{args.clients} clients, {len(messages)} messages, {args.rounds} round(s), redis appendfsync {args.appendfsync}; medians:"
    )
    for name, rounds in results.items():
        rate = statistics.median(r["msgs_per_s"] for r in rounds)
        p99 = statistics.median(r["p99"] for r in rounds)
        print(f"  {name:9s} {rate:6.0f} msgs/s ({rate / embedded:.2f}x embedded), p99 {p99:.1f} ms")
    return 0 if all(r["errors"] == 0 for rounds in results.values() for r in rounds) else 1


if __name__ == "__main__":
    sys.exit(main())
