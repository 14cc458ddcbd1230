"""Replay trec07p-dev over the spamc protocol against a real spamd and report requests/s and latency.

Starts `python -m spamd --spamc 127.0.0.1:0` (temp data dir) after training its
model on the first --train messages, as scripts/speed/bench_smtp.py does. N client
threads each send requests framed as spamc frames them (`CHECK SPAMC/1.5`,
Content-length, the message, shutdown of the write side, the answer read to EOF;
one connection per request, as spamc and Exim open them). Latency is per
request, connect to the last byte of the answer.

    .venv/bin/python scripts/speed/bench_spamc.py                     # 16 clients, CHECK, 9,000 messages
    .venv/bin/python scripts/speed/bench_spamc.py --verb PROCESS --clients 4 --limit 2000
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("bench_smtp", HERE / "bench_smtp.py")
assert _spec is not None and _spec.loader is not None
bench_smtp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_smtp)


def exchange(port: int, verb: str, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"%s SPAMC/1.5\r\nContent-length: %d\r\n\r\n%s" % (verb.encode(), len(raw), raw))
        sock.shutdown(socket.SHUT_WR)
        answer = bytearray()
        while chunk := sock.recv(65536):
            answer += chunk
    return bytes(answer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index", nargs="?", type=Path, default=bench_smtp.DEFAULT_INDEX)
    parser.add_argument("--train", type=int, default=1000)
    parser.add_argument("--limit", type=int, default=9000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--verb", default="CHECK", choices=["CHECK", "SYMBOLS", "REPORT", "PROCESS", "HEADERS"])
    parser.add_argument(
        "--processes", type=int, help="[parser] processes for spamd (default: its own, one per core but one)"
    )
    args = parser.parse_args()
    if not args.index.is_file():
        raise SystemExit(f"{args.index}: no such corpus index (../shared/corpora)")
    rows = bench_smtp.read_corpus(args.index)
    training, replay = rows[: args.train], [raw for _, raw in rows[args.train : args.train + args.limit]]
    work = Path(tempfile.mkdtemp(prefix="bench-spamc-"))
    try:
        config = work / "spamd.toml"
        processes = "" if args.processes is None else f"[parser]\nprocesses = {args.processes}\n"
        config.write_text(f'[log]\nformat = "json"\n{processes}')
        bench_smtp.pretrain(work / "data", config, training)
        proc = start(work, config)
        port = spamc_port(work / "spamd.log")
        latencies: list[float] = []
        errors: list[str] = []
        lock = threading.Lock()
        queue = list(reversed(replay))

        def client() -> None:
            while True:
                with lock:
                    if not queue:
                        return
                    raw = queue.pop()
                started = time.perf_counter()
                try:
                    answer = exchange(port, args.verb, raw)
                    ok = answer.startswith(b"SPAMD/1.1 0 EX_OK\r\n")
                except OSError as e:
                    ok, answer = False, str(e).encode()
                elapsed = time.perf_counter() - started
                with lock:
                    latencies.append(elapsed)
                    if not ok:
                        errors.append(answer[:80].decode("latin-1"))

        began = time.perf_counter()
        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - began
        proc.terminate()
        proc.wait(30)
        ms = sorted(x * 1000 for x in latencies)
        print(
            f"{args.verb}, processes {'default' if args.processes is None else args.processes}: {len(ms)} requests by {args.clients} clients in {wall:.1f} s: {len(ms) / wall:.0f} req/s, "
            f"latency p50 {statistics.median(ms):.1f} ms, p99 {ms[int(0.99 * (len(ms) - 1))]:.1f} ms, errors {len(errors)}"
        )
        if errors:
            print("first errors:", errors[:3])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def start(work: Path, config: Path) -> subprocess.Popen[bytes]:
    with open(work / "spamd.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "spamd", "--config", str(config), "--data-dir", str(work / "data"),
             "--smtp", "127.0.0.1:0", "--spamc", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, cwd=HERE.parents[1],
        )  # fmt: skip


def spamc_port(log: Path) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if '"daemon_started"' in line:
                return json.loads(line)["spamc_port"]
        time.sleep(0.05)
    raise SystemExit("spamd did not start within 60 s:\n" + log.read_text(errors="replace"))


if __name__ == "__main__":
    main()
