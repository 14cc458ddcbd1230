"""Mail through Debian's real Postfix with spamd as a milter, as a content filter, and with no filter.

One private Postfix (tests/postfix_helpers.py) with three smtpd listeners, one per
way, relaying everything to a sink; one spamd whose model is trained on the first
--train messages of the corpus. N smtplib client threads, one connection each, send
the next --limit messages to each listener in turn. Reported per way: messages/s from
the first send to the last arrival at the sink, the client's wait per message (MAIL
FROM to the 250 after DATA: for the milter that includes scoring, for the content
filter only Postfix's queueing), and the time from send to arrival.

    .venv/bin/python scripts/speed/bench_postfix.py                 # 8 clients, 2,000 messages per way
    .venv/bin/python scripts/speed/bench_postfix.py --clients 4 --limit 500
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.speed.bench_smtp import DEFAULT_INDEX, crlf, pretrain, read_corpus  # noqa: E402
from tests.daemon_helpers import DaemonProcess, write_config  # noqa: E402
from tests.postfix_helpers import Postfix, Sink, free_port, postfix_missing  # noqa: E402


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def run_way(port: int, messages: list[bytes], clients: int, sink: Sink) -> dict[str, Any]:
    import smtplib

    before = len(sink.messages)
    waits: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()

    def client(share: list[bytes]) -> None:
        with smtplib.SMTP("127.0.0.1", port, timeout=120) as smtp:
            for data in share:
                started = time.perf_counter()
                try:
                    smtp.sendmail("bench@example.org", ["user@example.com"], data)
                except smtplib.SMTPException as e:
                    with lock:
                        failures.append(f"{type(e).__name__}: {e}"[:200])
                    smtp.rset()
                    continue
                with lock:
                    waits.append(time.perf_counter() - started)

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(messages[i::clients],)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sent = time.perf_counter() - started
    expected = before + len(waits)
    deadline = time.monotonic() + 300
    while len(sink.messages) < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    elapsed = time.perf_counter() - started
    arrived = len(sink.messages) - before
    return {
        "sent": len(waits),
        "refused": len(failures),
        "refusals": sorted(set(failures))[:3],
        "arrived": arrived,
        "msgs_per_s": round(arrived / elapsed, 1),
        "client_wait_ms_p50": round(percentile(waits, 0.5) * 1000, 1) if waits else None,
        "client_wait_ms_p99": round(percentile(waits, 0.99) * 1000, 1) if waits else None,
        "sending_s": round(sent, 2),
        "total_s": round(elapsed, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("index", nargs="?", type=Path, default=DEFAULT_INDEX)
    parser.add_argument("--train", type=int, default=1000)
    parser.add_argument("--limit", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if missing := postfix_missing():
        print(f"bench_postfix: {missing}", file=sys.stderr)
        return 2
    rows = read_corpus(args.index)
    train, rest = rows[: args.train], rows[args.train : args.train + args.limit]
    messages = [crlf(raw) for _, raw in rest]

    with tempfile.TemporaryDirectory(prefix="bench-postfix-") as tmp:
        work = Path(tmp)
        reinject, smtp_port, milter_port = free_port(), free_port(), free_port()
        config = write_config(
            work / "spamd.toml", f'[smtp]\nmode = "relay"\nnext_hop_port = {reinject}\n[maildir]\nfsync = false\n'
        )
        config.write_text(config.read_text().replace("hash_bits = 16", "hash_bits = 22"))
        pretrain(work / "data", config, train)
        ports = {"none": 0, "milter": free_port(), "content_filter": free_port()}
        services = (
            f"127.0.0.1:{ports['milter']} inet n - n - - smtpd\n"
            f"  -o smtpd_milters=inet:127.0.0.1:{milter_port}\n  -o milter_default_action=tempfail\n"
            f"127.0.0.1:{ports['content_filter']} inet n - n - - smtpd\n"
            f"  -o content_filter=spamd:[127.0.0.1]:{smtp_port}\n"
            "spamd unix - - n - 16 smtp\n  -o smtp_send_xforward_command=no\n  -o disable_dns_lookups=yes\n  -o max_use=20\n"
            f"127.0.0.1:{reinject} inet n - n - - smtpd\n  -o content_filter=\n"
            "  -o receive_override_options=no_unknown_recipient_checks,no_header_body_checks,no_milters\n"
            "  -o smtpd_recipient_restrictions=permit_mynetworks,reject\n  -o mynetworks=127.0.0.0/8\n"
        )
        spamd = DaemonProcess("--config", config, "--data-dir", work / "data",
                              "--smtp", f"127.0.0.1:{smtp_port}", "--milter", f"127.0.0.1:{milter_port}")  # fmt: skip
        results: dict[str, Any] = {}
        try:
            spamd.wait_for("daemon_started", timeout=60)
            with Sink() as sink:
                postfix = Postfix(sink.port, main={"message_size_limit": "52428800"}, services=services)
                ports["none"] = postfix.smtp_port
                postfix.start()
                try:
                    for way in ("none", "milter", "content_filter"):
                        results[way] = run_way(ports[way], messages, args.clients, sink)
                finally:
                    postfix.stop()
            scored = spamd.events("message_scored")
            for way, via in (("milter", "milter"), ("content_filter", "relay")):
                spent = [e["elapsed_ms"] for e in scored if e.get("via") == via]
                if spent:
                    results[way]["spamd_ms_p50"] = round(statistics.median(spent), 2)
        finally:
            spamd.kill()
    results["setup"] = {
        "corpus": str(args.index),
        "trained": len(train),
        "clients": args.clients,
        "messages_per_way": len(messages),
    }
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for way in ("none", "milter", "content_filter"):
            r = results[way]
            print(
                f"{way:15} {r['msgs_per_s']:7} msgs/s  client wait p50 {r['client_wait_ms_p50']} ms, p99 {r['client_wait_ms_p99']} ms"
                f"  spamd p50 {r.get('spamd_ms_p50', '-')} ms  arrived {r['arrived']}/{r['sent']} refused {r['refused']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
