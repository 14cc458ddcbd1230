"""Throughput while the DNS server is down against while it answers: spamd over SMTP, our own DNS server switched.

    python scripts/robustness/dns_outage.py                       # never answers (UDP and TCP) for 40 s
    python scripts/robustness/dns_outage.py --state servfail      # SERVFAIL for every name for 40 s
    python scripts/robustness/dns_outage.py --before 20 --outage 40 --after 40 --clients 16 --budget 2

Our loopback DNS server (spamd_lab.loopback_dns), in a process of its own,
publishes a test key for bench.example and its DMARC policy. The messages are
trec07p-dev's, half signed with that key (From bench.example), half unsigned under
a From domain of their own (sN.bench.example); each comes from a MAIL FROM domain
of its own, with [auth] spf on: each asks DNS for names nobody asked before (SPF,
and DMARC for the unsigned). --clients SMTP clients send without pause: --before seconds with
the server answering, --outage seconds with it silent or SERVFAIL, --after seconds
answering again. Printed: msgs/s, the share of messages whose X-Spam-Auth says
temperror and the longest wait for DATA's answer, per 5 s; then the outage's first
30 s against the answering phase before it (target >= 0.5x), the longest wait
(target: the budget + 0.1 s), and how long after the server answers again both
verification is back (target: 30 s), and the throughput from then on.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import smtplib
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_INDEX = ROOT.parent / "shared" / "corpora" / "trec07p-dev" / "full" / "index"
STATES = {"answering": 0, "silent": 1, "servfail": 2}
WINDOW_S = 5.0
_FROM = re.compile(rb"(?im)^from:[^\n]*\n(?:[ \t][^\n]*\n)*")


def serve_switched(records: dict[str, str], state: object, reply: object) -> None:
    """Our zone server over `records` (TXT), answering as the shared `state` says (STATES)."""
    import dns.message
    import dns.rcode

    from spamd_lab.loopback_dns import ZoneServer

    class Switched(ZoneServer):
        def answer(self, wire: bytes) -> bytes | None:
            now = state.value  # type: ignore[attr-defined]
            if now == STATES["silent"]:
                return None
            if now == STATES["servfail"]:
                response = dns.message.make_response(dns.message.from_wire(wire))
                response.set_rcode(dns.rcode.SERVFAIL)
                return response.to_wire()
            return super().answer(wire)

    server = Switched(ttl=3600, negative_ttl=3600)
    for name, value in records.items():
        server.txt(name, value)
    server.start()
    reply.send(server.address)  # type: ignore[attr-defined]
    threading.Event().wait()


def messages(index: Path, work: Path, limit: int) -> list[tuple[bytes, bool]]:
    """Corpus messages without their From: the even ones signed for bench.example with its From, the odd
    ones to be sent with a From of their own (`sending`)."""
    from spamd.evaluation.trec import index_messages, read_index
    from spamd_lab.signing_keys import rsa_key

    key = rsa_key(work, "bench.example", "bench", 2048)
    (work / "key").write_text(key.dns_value)
    out = []
    for n, (_, raw) in enumerate(index_messages(read_index(index)[:limit])):
        raw = raw.replace(b"\r\n", b"\n")
        head, _, body = raw.partition(b"\n\n")
        raw = (_FROM.sub(b"", head + b"\n") + b"\n" + body).replace(b"\n", b"\r\n")
        if n % 2:
            out.append((raw, False))
            continue
        raw = b"From: <news@bench.example>\r\n" + raw
        try:
            out.append(
                (key.sign(raw, headers=[b"from", b"subject", b"date"], canonicalize=(b"relaxed", b"relaxed")), True)
            )
        except Exception:  # dkimpy refuses a few malformed heads: sent unsigned
            out.append((raw, True))
    return out


def sending(message: tuple[bytes, bool], n: int) -> bytes:
    """The `n`th message sent: its sequence number on top, and a From of its own where it has none."""
    raw, has_from = message
    return b"X-Bench-Seq: %d\r\n" % n + (b"" if has_from else b"From: <news@s%d.bench.example>\r\n" % n) + raw


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=Path, default=DEFAULT_INDEX)
    parser.add_argument("--state", choices=["silent", "servfail"], default="silent")
    parser.add_argument("--before", type=float, default=20.0, help="seconds answering before the outage")
    parser.add_argument("--outage", type=float, default=40.0)
    parser.add_argument("--after", type=float, default=40.0, help="seconds answering after it")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--budget", type=float, default=2.0, help="[auth] dns_budget_s")
    parser.add_argument("--messages", type=int, default=4000, help="corpus messages, sent round and round")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))

    work = Path(tempfile.mkdtemp(prefix="dns-outage-"))
    raws = messages(args.index, work, args.messages)
    state = multiprocessing.Value("i", STATES["answering"])
    parent, child = multiprocessing.Pipe()
    records = {"bench._domainkey.bench.example": (work / "key").read_text(), "_dmarc.bench.example": "v=DMARC1; p=none"}
    zone = multiprocessing.get_context("fork").Process(target=serve_switched, args=(records, state, child), daemon=True)
    zone.start()
    address = parent.recv()
    maildir = work / "Maildir"
    config = work / "spamd.toml"
    config.write_text(
        f'[log]\nformat = "json"\n[maildir]\npaths = ["{maildir}"]\nfsync = false\n'
        f'[auth]\nnameservers = ["{address}"]\ndns_budget_s = {args.budget}\nspf = true\n'
    )
    log_file = work / "spamd.log"
    with open(log_file, "wb") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "spamd", "--config", str(config), "--data-dir", str(work / "data"), "--smtp", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, cwd=ROOT,
        )  # fmt: skip
    try:
        port = wait_for_event(log_file, "daemon_started")["smtp_port"]
        wait_for_event(log_file, "analysis_process_ready")
        sent = run(port, raws, args, state)
        report(sent, maildir, args, log_file)
    finally:
        daemon.kill()
        daemon.wait()
        zone.terminate()
    return 0


def wait_for_event(log_file: Path, event: str, limit_s: float = 60.0) -> dict:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        for line in log_file.read_text(errors="replace").splitlines():
            if line.startswith("{") and json.loads(line).get("event") == event:
                return json.loads(line)
        time.sleep(0.1)
    raise SystemExit(f"no {event} in {log_file} within {limit_s} s")


def run(
    port: int, raws: list[tuple[bytes, bool]], args: argparse.Namespace, state: object
) -> list[tuple[int, float, float]]:
    """Send until the three phases are over: (sequence number, when DATA was answered, its wait) of each message."""
    sent: list[tuple[int, float, float]] = []
    lock = threading.Lock()
    counter = iter(range(10**9))
    start = time.monotonic()
    end = start + args.before + args.outage + args.after

    def client() -> None:
        with smtplib.SMTP("127.0.0.1", port, timeout=120) as smtp:
            smtp.ehlo()
            while time.monotonic() < end:
                with lock:
                    n = next(counter)
                smtp.mail(f"bounce@m{n}.bench.example")
                smtp.rcpt("alice@home.example")
                raw = sending(raws[n % len(raws)], n)
                began = time.monotonic()
                code, reply = smtp.data(raw)
                if code != 250:
                    raise SystemExit(f"message {n}: {code} {reply!r}")
                done = time.monotonic()
                with lock:
                    sent.append((n, done - start, done - began))

    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    for thread in threads:
        thread.start()
    time.sleep(args.before)
    state.value = STATES[args.state]  # type: ignore[attr-defined]
    time.sleep(args.outage)
    state.value = STATES["answering"]  # type: ignore[attr-defined]
    for thread in threads:
        thread.join()
    return sent


def report(sent: list[tuple[int, float, float]], maildir: Path, args: argparse.Namespace, log_file: Path) -> None:
    seq = re.compile(rb"X-Bench-Seq: (\d+)")
    temperror: set[int] = set()
    for path in [*maildir.glob("new/*"), *maildir.glob(".Junk/new/*")]:
        head = path.read_bytes().split(b"\n\n", 1)[0]
        found = seq.search(head)
        if found and b"temperror" in head:
            temperror.add(int(found.group(1)))
    windows: dict[int, list[tuple[int, float, float]]] = {}
    for row in sent:
        if row[1] >= args.before + args.outage + args.after:  # the clients' last messages, after the end
            continue
        windows.setdefault(int(row[1] // WINDOW_S), []).append(row)
    outage_start, outage_end = args.before, args.before + args.outage
    print(
        f"{len(sent)} messages from {args.clients} clients, DNS {args.state} from {outage_start:g} to {outage_end:g} s, budget {args.budget:g} s"
    )
    print("| from s | DNS | msgs/s | temperror | longest wait s |\n|---|---|---|---|---|")
    rates = {}
    for w in sorted(windows):
        rows, at = windows[w], w * WINDOW_S
        dns = args.state if outage_start <= at < outage_end else "answering"
        rates[w] = len(rows) / WINDOW_S
        share = sum(n in temperror for n, _, _ in rows) / len(rows)
        print(f"| {at:g} | {dns} | {rates[w]:.0f} | {share:.0%} | {max(r[2] for r in rows):.3f} |")
    base = [rates[w] for w in rates if w * WINDOW_S >= WINDOW_S and (w + 1) * WINDOW_S <= outage_start]
    baseline = sum(base) / len(base) if base else float("nan")
    first = [r for r in sent if outage_start <= r[1] < min(outage_start + 30, outage_end)]
    during = len(first) / min(30, args.outage)
    print(
        f"answering before: {baseline:.0f} msgs/s; the outage's first {min(30, args.outage):g} s: {during:.0f} msgs/s = {during / baseline:.2f}x (target >= 0.5x)"
    )
    print(f"longest wait: {max(r[2] for r in sent):.3f} s (target <= {args.budget + 0.1:g} s)")
    back = next(
        (w * WINDOW_S + WINDOW_S - outage_end for w in sorted(windows)
         if w * WINDOW_S >= outage_end and not any(n in temperror for n, _, _ in windows[w])),
        None,
    )  # fmt: skip
    after = [r for r in sent if outage_end + (back or 0) <= r[1] < outage_end + args.after]
    span = args.after - (back or 0)
    rate = len(after) / span if span > 0 else float("nan")
    print(f"verified again (no temperror in a {WINDOW_S:g} s window) within {back} s of DNS answering (target 30 s); "
          f"from then on {rate:.0f} msgs/s = {rate / baseline:.2f}x the answering phase before")  # fmt: skip
    events = [json.loads(line) for line in log_file.read_text(errors="replace").splitlines() if line.startswith("{")]
    print("log:", [(e["event"], e.get("timestamp", "")) for e in events if e["event"].startswith("nameservers_")])


if __name__ == "__main__":
    sys.exit(main())
