"""LMTP throughput beside the SMTP content filter's, in the same run: 16 clients, one recipient a message.

Starts `python -m spamd` afresh for each round (a copy of one pretrained data
directory, fsync on, one Maildir), alternating the way in: "smtp" is the SMTP
listener in deliver mode (what scripts/bench_smtp.py measures), "lmtp" the LMTP
listener with no next hop, filing into the same kind of Maildir. Each client
thread keeps one connection (smtplib.SMTP or smtplib.LMTP) for all its messages,
as Postfix's connection cache does. Prints each round, then the medians and the
ratio LMTP / SMTP of each pair of rounds run one after the other, and spamd's CPU a
message (its analysis and delivery processes included): on a loaded machine the rate
swings with everyone else's work, the CPU a message far less. Every round's
files stay until the end (deleting thousands slows the next round's file creation,
scripts/bench_smtp.py).

    python scripts/speed/bench_lmtp.py                       # 3 rounds each, 3,000 messages a round
    python scripts/speed/bench_lmtp.py --rounds 5 --limit 2000 --clients 16
"""

from __future__ import annotations

import argparse
import os
import shutil
import smtplib
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.speed.bench_smtp import (  # noqa: E402
    DEFAULT_INDEX,
    crlf,
    logged_event,
    percentile,
    pretrain,
    read_corpus,
    wait_for_resting_file_system,
)


def start(data_dir: Path, config_file: Path, log_file: Path, way: str) -> tuple[subprocess.Popen, int]:
    with open(log_file, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "spamd", "--config", str(config_file), "--data-dir", str(data_dir), "--smtp", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, cwd=ROOT,
        )  # fmt: skip
    started = logged_event(log_file, "daemon_started", proc, 60)
    if started is None:
        proc.kill()
        raise SystemExit("spamd did not start within 60 s")
    if logged_event(log_file, "analysis_process_ready", proc, 20) is None:
        print("no analysis_process_ready within 20 s: the loop analyzes the first messages")
    return proc, started["lmtp_port" if way == "lmtp" else "smtp_port"]


def client(way: str, port: int, messages: list[bytes], latencies: list[float], errors: list[str]) -> None:
    connection = smtplib.LMTP if way == "lmtp" else smtplib.SMTP
    try:
        with connection("127.0.0.1", port, timeout=60) as session:
            for raw in messages:
                started = time.perf_counter()
                try:
                    # One recipient: LMTP's one reply after DATA is the one smtplib reads.
                    session.sendmail("sender@example.org", ["user@example.com"], raw)
                except smtplib.SMTPException as e:
                    errors.append(f"{type(e).__name__}: {e}")
                    continue
                latencies.append((time.perf_counter() - started) * 1000)
    except OSError as e:
        errors.append(f"{type(e).__name__}: {e}")


def run_once(way: str, template: Path, work: Path, replay: list[bytes], clients: int) -> tuple[float, float]:
    """One round: (messages/s, spamd's CPU a message in ms, its helper processes' included)."""
    data_dir = work / "data"
    shutil.copytree(template / "data", data_dir)
    proc, port = start(data_dir, template / "spamd.toml", work / "spamd.log", way)
    latencies: list[float] = []
    errors: list[str] = []
    try:
        shares = [replay[i::clients] for i in range(clients)]
        threads = [threading.Thread(target=client, args=(way, port, share, latencies, errors)) for share in shares]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
    finally:
        proc.terminate()
        _, _, usage = os.wait4(proc.pid, 0)  # its helpers' CPU too: they are its children, waited for
        proc.returncode = 0
    cpu_ms = (usage.ru_utime + usage.ru_stime) / max(1, len(latencies)) * 1000
    maildir = data_dir / "Maildir"
    delivered = sum(len(list((maildir / d / "new").iterdir())) for d in ("", ".Junk") if (maildir / d / "new").is_dir())
    rate = len(latencies) / elapsed
    print(
        f"{way}: {len(latencies)} messages, {clients} clients: {rate:.0f} msgs/s, latency p50 "
        f"{statistics.median(latencies):.1f} ms, p99 {percentile(latencies, 0.99):.1f} ms; errors {len(errors)}; "
        f"delivered {delivered}; spamd CPU {cpu_ms:.2f} ms a message (start-up and shutdown included)"
    )
    for error in errors[:5]:
        print("  error:", error)
    if errors or delivered != len(replay):
        raise SystemExit(f"{way}: {len(errors)} errors, {delivered} of {len(replay)} delivered")
    return rate, cpu_ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=Path, default=DEFAULT_INDEX, help="a TREC index (trec07p-dev's by default)")
    parser.add_argument("--train", type=int, default=2000, help="messages the model is trained on first")
    parser.add_argument("--limit", type=int, default=3000, help="messages replayed each round")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each way in, alternating")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    if not args.index.is_file():
        raise SystemExit(f"corpus index not found: {args.index}")
    rows = read_corpus(args.index)
    replay = [crlf(raw) for _, raw in rows[args.train : args.train + args.limit]]
    with tempfile.TemporaryDirectory(prefix="spamd-bench-lmtp-") as top:
        template = Path(top) / "template"
        template.mkdir()
        config = template / "spamd.toml"
        config.write_text('[log]\nformat = "json"\n[lmtp]\nlisten = "127.0.0.1:0"\n[smtp]\nmax_recipients = 10\n')
        pretrain(template / "data", config, rows[: args.train])
        rates: dict[str, list[float]] = {"smtp": [], "lmtp": []}
        cpu: dict[str, list[float]] = {"smtp": [], "lmtp": []}
        ratios = []
        for n in range(args.rounds):
            for way in ("smtp", "lmtp") if n % 2 == 0 else ("lmtp", "smtp"):  # neither always first
                work = Path(top) / f"{way}-{n}"
                work.mkdir()
                cost = wait_for_resting_file_system(
                    Path(top), 120, 60
                )  # (bench_smtp.py: recent deletions slow creation)
                print(f"file creation {cost:.0f} us before the round")
                rate, cpu_ms = run_once(way, template, work, replay, args.clients)
                rates[way].append(rate)
                cpu[way].append(cpu_ms)
            ratios.append(rates["lmtp"][-1] / rates["smtp"][-1])
        print(
            f"medians: smtp {statistics.median(rates['smtp']):.0f} msgs/s, lmtp {statistics.median(rates['lmtp']):.0f} "
            f"msgs/s; lmtp / smtp by round: {', '.join(f'{r:.2f}' for r in ratios)} "
            f"(median {statistics.median(ratios):.2f}); spamd CPU a message, medians: smtp "
            f"{statistics.median(cpu['smtp']):.2f} ms, lmtp {statistics.median(cpu['lmtp']):.2f} ms "
            f"(lmtp / smtp {statistics.median(cpu['lmtp']) / statistics.median(cpu['smtp']):.2f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
