"""The Prometheus endpoint: counters that grow by exactly what happened, restarts, hostile clients, the dashboard.

Real parts: spamd as a subprocess (and in-process daemons on the test's loop),
smtplib for SMTP traffic, Maildir moves made by renames as an IMAP server makes
them, urllib as the scraper, prometheus_client's own parser for the exposition,
raw sockets for hostile clients.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from spamd import __version__
from spamd.config import Config, load_config, metrics_address
from spamd.errors import ConfigError
from spamd.model.bayes import Label
from tests.auth_helpers import SigningKeys, mail
from tests.daemon_helpers import (
    DaemonProcess,
    daemon_config,
    drop,
    folder_files,
    imap_move,
    make_message,
    running,
    send,
    smtp_port,
    train,
    wait_until,
    wait_until_sync,
    write_config,
)
from tests.dns_helpers import ZoneServer
from tests.spamc_helpers import needs_spamc, start_spamd

DASHBOARD = Path(__file__).resolve().parents[1] / "config" / "grafana-spamd.json"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape_text(port: int, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=")
        return response.read().decode()


def parse(text: str) -> tuple[Samples, dict[str, Metric]]:
    samples: Samples = {}
    families: dict[str, Metric] = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = family
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples, families


def value(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels` (0 if none)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def spamctl_train(data: Path, config: Path, label: str, raw: bytes) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from spamd.cli import main; main()", "--config", str(config), "--data-dir", str(data),
         "train", f"--{label}", "-"],
        input=raw, capture_output=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()


def start(config: Path, data: Path) -> tuple[DaemonProcess, int, int]:
    daemon = DaemonProcess("--config", config, "--data-dir", data, "--smtp", "127.0.0.1:0", "--metrics", "127.0.0.1:0")
    started = daemon.wait_for("daemon_started")
    assert started["metrics_host"] == "127.0.0.1"
    return daemon, started["smtp_port"], started["metrics_port"]


# ---------------------------------------------------------------- end to end


@pytest.mark.slow
def test_counters_grow_by_exactly_the_traffic_and_moves_and_survive_a_restart(tmp_path):
    config = write_config(tmp_path / "spamd.toml")
    data = tmp_path / "data"
    maildir = data / "Maildir"
    for i in range(10):  # confident verdicts on the two vocabularies
        spamctl_train(data, config, "spam", make_message(Label.SPAM, i, seed=7))
        spamctl_train(data, config, "ham", make_message(Label.HAM, i, seed=7))
    daemon, smtp_port, port = start(config, data)
    try:
        before, families = parse(scrape_text(port))
        assert value(before, "spamd_build_info", version=__version__) == 1
        assert value(before, "spamd_model_trained_messages", label="spam") == 10
        assert value(before, "spamd_recovery_problems") == 0
        assert families["spamd_messages_scored"].type == "counter"
        assert families["spamd_scan_duration_seconds"].type == "histogram"

        # Its analysis process (one: a core for it and one for the loop) is ready within seconds,
        # and so is its delivery process (one, on two cores or more).
        assert wait_until_sync(lambda: value(parse(scrape_text(port))[0], "spamd_analysis_processes") == 1, timeout=30)
        assert wait_until_sync(lambda: value(parse(scrape_text(port))[0], "spamd_delivery_processes") == 1, timeout=30)
        before, _ = parse(scrape_text(port))
        # N = 5 over SMTP (3 spam, 2 ham), K = 2 dropped into INBOX by another MDA.
        for i in range(3):
            send(smtp_port, make_message(Label.SPAM, i))
        for i in range(2):
            send(smtp_port, make_message(Label.HAM, i))
        drop(maildir, make_message(Label.HAM, 10))
        drop(maildir, make_message(Label.SPAM, 10))
        daemon.wait_for("message_scored", count=7)
        by_way: dict[tuple[str, str], int] = {}
        for e in daemon.events("message_scored"):
            by_way[(e["way_in"], e["verdict"])] = by_way.get((e["way_in"], e["verdict"]), 0) + 1
        assert by_way == {("smtp", "spam"): 3, ("smtp", "ham"): 2, ("maildir", "ham"): 1, ("maildir", "spam"): 1}

        # M = 3 moves: two ham spamd let through into Junk, one spam out of Junk.
        inbox = [p for p in folder_files(maildir) if b"ham-0-0" in p.read_bytes() or b"ham-1-0" in p.read_bytes()]
        assert len(inbox) == 2
        for path in inbox:
            imap_move(path, maildir, ".Junk")
        spam = next(p for p in folder_files(maildir, ".Junk") if b"spam-0-0" in p.read_bytes())
        imap_move(spam, maildir, "")
        daemon.wait_for("training_applied", count=3)

        def grown() -> Samples | None:
            samples, _ = parse(scrape_text(port))
            return samples if value(samples, "spamd_trainings_total", source="maildir") >= 3 else None

        after = wait_until_sync(grown, timeout=10)
        assert isinstance(after, dict)

        def delta(name: str, **labels: str) -> float:
            return value(after, name, **labels) - value(before, name, **labels)

        for (way, verdict), n in by_way.items():
            assert delta("spamd_messages_scored_total", way_in=way, verdict=verdict) == n
        assert delta("spamd_messages_scored_total", way_in="smtp") == 5
        assert delta("spamd_messages_scored_total", way_in="maildir") == 2
        assert delta("spamd_messages_scored_total", way_in="milter") == 0
        assert delta("spamd_messages_scored_total", way_in="spamc") == 0
        assert delta("spamd_scan_duration_seconds_count", way_in="smtp") == 5
        assert delta("spamd_scan_duration_seconds_bucket", way_in="smtp", le="+Inf") == 5
        assert delta("spamd_scan_duration_seconds_count", way_in="maildir") == 2
        assert delta("spamd_sessions_total", way_in="smtp") == 5
        assert value(after, "spamd_sessions_open", way_in="smtp") == 0
        assert delta("spamd_trainings_total", label="spam", source="maildir", outcome="learned") == 2
        assert delta("spamd_trainings_total", label="ham", source="maildir", outcome="corrected") == 0
        assert delta("spamd_trainings_total", label="ham", source="maildir", outcome="learned") == 1
        assert delta("spamd_live_judgements_total", judgement="missed_spam") == 2
        assert delta("spamd_live_judgements_total", judgement="false_positive") == 1
        assert delta("spamd_live_judgements_total", judgement="agreed") == 0
        assert delta("spamd_model_trained_messages", label="spam") == 2
        assert delta("spamd_journal_bytes") > 0
        # Every message scored was analyzed beside the loop: over SMTP and dropped into the Maildir.
        assert delta("spamd_messages_analyzed_total", by="analysis_process") == 7
        assert delta("spamd_messages_analyzed_total", by="handed_back") == 0
        assert value(after, "spamd_analysis_processes_started_total") == 1
        # Every SMTP delivery was written by the delivery process (the Maildir's own arrivals stay).
        assert delta("spamd_deliveries_written_total", by="delivery_process") == 5
        assert delta("spamd_deliveries_written_total", by="handed_back") == 0
        assert value(after, "spamd_delivery_processes_started_total") == 1

        daemon.signal(signal.SIGTERM)
        assert daemon.wait() == 0
        daemon, smtp_port, port = start(config, data)
        restarted, families = parse(scrape_text(port))
        # Kept: messages scored, live judgements, the model's counts. Restarted: trainings.
        for name, labels in (
            ("spamd_messages_scored_total", {"way_in": "smtp"}),
            ("spamd_messages_scored_total", {"way_in": "maildir"}),
            ("spamd_live_judgements_total", {"judgement": "missed_spam"}),
            ("spamd_live_judgements_total", {"judgement": "false_positive"}),
            ("spamd_model_trained_messages", {"label": "spam"}),
        ):
            assert value(restarted, name, **labels) == value(after, name, **labels), name
        assert value(restarted, "spamd_trainings_total") == 0
        assert "restarts at zero" in families["spamd_trainings"].documentation
        assert "kept across restarts" in families["spamd_messages_scored"].documentation
        assert value(restarted, "spamd_snapshot_age_seconds") >= 0

        # The dashboard names only families this daemon serves.
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"], "info": ["_info"]}
        served = {name + suffix for name, f in families.items() for suffix in suffixes.get(f.type, [""])}
        assert {n for n, _ in restarted} <= served
        named = set(re.findall(r"\bspamd_[a-z_]+", json.dumps(json.loads(DASHBOARD.read_text()))))
        assert named and named <= served, named - served
        daemon.signal(signal.SIGTERM)
        assert daemon.wait() == 0
    finally:
        daemon.kill()


def test_authentication_is_counted_as_x_spam_auth_reports_it(
    tmp_path: Path, auth_zone: ZoneServer, test_keys: SigningKeys
) -> None:
    """Signed mail that passes, a changed body, another domain's signature and unsigned mail, verified by
    spamd against our loopback DNS: each message counted by source, each result by method and result."""
    data = tmp_path / "data"
    config = write_config(
        tmp_path / "spamd.toml", f'[auth]\nnameservers = ["{auth_zone.address}"]\ndns_budget_s = 10.0\n'
    )
    changed = test_keys.shop.sign(mail(subject="changed")).replace(b"on its way", b"lost, pay here")
    messages = [
        test_keys.shop.sign(mail(subject="passes")),  # dkim=pass, dmarc=pass
        changed,  # dkim=fail, dmarc=fail (p=reject)
        test_keys.other.sign(mail(subject="other")),  # dkim=pass of other.example, dmarc=fail
        mail(sender="someone@unsigned.example", subject="unsigned"),  # nothing to check: no X-Spam-Auth
    ]
    daemon, smtp_port, port = start(config, data)
    try:
        for raw in messages:
            send(smtp_port, raw)
        daemon.wait_for("message_scored", count=len(messages))
        reports = [
            line for p in folder_files(data / "Maildir") + folder_files(data / "Maildir", ".Junk")
            for line in p.read_bytes().decode().splitlines() if line.startswith("X-Spam-Auth:")
        ]  # fmt: skip
        assert len(reports) == 3, reports
        samples, families = parse(scrape_text(port))
        assert families["spamd_auth_results"].type == "counter"
        counted = {
            dict(labels)["source"]: v for (name, labels), v in samples.items() if name == "spamd_auth_messages_total"
        }
        assert counted == {"spamd": 3, "authserv-id": 0, "none": 1}, counted
        results = {
            (dict(labels)["method"], dict(labels)["result"]): v
            for (name, labels), v in samples.items()
            if name == "spamd_auth_results_total"
        }
        assert results == {("dkim", "pass"): 2, ("dkim", "fail"): 1, ("dmarc", "pass"): 1, ("dmarc", "fail"): 2}
    finally:
        daemon.kill()


@pytest.mark.slow
def test_hostile_http_clients_do_not_stall_the_loop_or_keep_scrapes_out(tmp_path):
    config = write_config(tmp_path / "spamd.toml")
    data = tmp_path / "data"
    daemon, smtp_port, port = start(config, data)
    idle: list[socket.socket] = []
    try:
        for _ in range(200):  # idle connections, past the server's limit
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        slow = socket.create_connection(("127.0.0.1", port), timeout=10)
        slow.sendall(b"GET /metr")  # slowloris: half a request line, then nothing
        idle.append(slow)

        def answer(request: bytes) -> bytes:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(request)
                s.shutdown(socket.SHUT_WR)
                chunks = []
                while chunk := s.recv(65536):
                    chunks.append(chunk)
                return b"".join(chunks)

        assert answer(bytes(range(256)) * 4 + b"\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        assert answer(b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 431 ")
        assert answer(b"POST /metrics HTTP/1.1\r\nHost: spamd\r\n\r\n").startswith(b"HTTP/1.1 405 ")
        assert answer(b"GET / HTTP/1.1\r\nHost: spamd\r\n\r\n").startswith(b"HTTP/1.1 404 ")
        # HTTP/1.1 without a Host field is malformed (RFC 9112 section 3.2): answered 400.
        assert answer(b"GET /metrics HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        assert answer(b"GET /metrics") == b""  # half-sent, then gone: nothing to answer
        head = answer(b"HEAD /metrics HTTP/1.0\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ") and head.endswith(b"\r\n\r\n")

        # With all of that open, a scrape and an SMTP delivery still go through at once.
        started = time.monotonic()
        samples, _ = parse(scrape_text(port))
        send(smtp_port, make_message(Label.HAM, 1))
        assert time.monotonic() - started < 3.0
        assert value(samples, "spamd_build_info") == 1
        # Idle and slow clients are cut off after the request timeout (5 s).
        slow.settimeout(10)
        assert slow.recv(100) == b""
        daemon.signal(signal.SIGTERM)
        assert daemon.wait() == 0
    finally:
        for s in idle:
            s.close()
        daemon.kill()


@pytest.mark.slow
@needs_spamc
def test_spamc_checks_and_tells_are_counted_by_way_in_and_judged(tmp_path):
    """Debian's spamc: two CHECKs, then a TELL that contradicts each verdict (a person's, by its source)."""
    daemon = start_spamd(tmp_path, "allow_tell = true\n[users]\ntoken_moves = true\n")  # layers built
    try:
        before, _ = parse(scrape_text(daemon.metrics_port))
        ham_looking, spam_looking = make_message(Label.HAM, 600), make_message(Label.SPAM, 600)
        assert daemon.spamc("-c", input=ham_looking).returncode == 0  # ham: exit 0
        assert daemon.spamc("-c", input=spam_looking).returncode == 1  # spam: exit 1
        assert daemon.spamc("-L", "spam", input=ham_looking).returncode == 0
        assert daemon.spamc("-L", "ham", input=spam_looking).returncode == 0
        after, _ = parse(scrape_text(daemon.metrics_port))

        def delta(name: str, **labels: str) -> float:
            return value(after, name, **labels) - value(before, name, **labels)

        assert delta("spamd_messages_scored_total", way_in="spamc", verdict="ham") == 1
        assert delta("spamd_messages_scored_total", way_in="spamc", verdict="spam") == 1
        assert delta("spamd_messages_scored_total", way_in="smtp") == 0
        assert delta("spamd_sessions_total", way_in="spamc") == 4
        assert value(after, "spamd_sessions_open", way_in="spamc") == 0
        assert delta("spamd_trainings_total", source="spamc", outcome="learned") == 2
        assert delta("spamd_live_judgements_total", judgement="missed_spam") == 1
        assert delta("spamd_live_judgements_total", judgement="false_positive") == 1
        # Per-user layers: counted and sized with no label per user (spamc names the Unix user without -u).
        layers = value(after, "spamd_users_with_layer")
        assert daemon.spamc("-u", "alice", "-L", "spam", input=make_message(Label.SPAM, 601)).returncode == 0
        assert daemon.spamc("-u", "alice", "-L", "ham", input=make_message(Label.HAM, 601)).returncode == 0
        assert daemon.spamc("-u", "alice", "-c", input=make_message(Label.HAM, 602)).returncode == 0  # builds her table
        users, families = parse(scrape_text(daemon.metrics_port))
        assert value(users, "spamd_users_with_layer") == layers + 1 and value(users, "spamd_users_memory_bytes") > 0
        assert value(users, "spamd_users_expired_total") == 0 and families["spamd_users_expired"].type == "counter"
        assert value(users, "spamd_user_senders") >= 1  # her tells' From addresses, counted with no label per user
        assert not any("alice" in str(sample) for sample in users)
        assert daemon.stop() == 0
    finally:
        daemon.process.kill()


# ---------------------------------------------------------------- in process


async def scrape_async(port: int) -> Samples:
    return parse(await asyncio.to_thread(scrape_text, port))[0]


@pytest.mark.asyncio
async def test_two_daemons_in_one_process_each_serve_their_own_registry(tmp_path):
    one = daemon_config(tmp_path / "one", metrics={"listen": "127.0.0.1:0"})
    two = daemon_config(tmp_path / "two", metrics={"listen": "127.0.0.1:0"})
    async with running(one) as a, running(two) as b:
        train(a, 5)
        await asyncio.to_thread(send, smtp_port(a), make_message(Label.SPAM, 1))
        await wait_until(lambda: a.metrics.by_verdict)
        first = await scrape_async(a.metrics_server.address[1])
        second = await scrape_async(b.metrics_server.address[1])
        assert value(first, "spamd_messages_scored_total") == 1
        assert value(second, "spamd_messages_scored_total") == 0
        assert value(first, "spamd_model_trained_messages") == 10
        assert value(second, "spamd_model_trained_messages") == 0
        assert a.stats()["daemon"]["metrics_listen"] == f"127.0.0.1:{a.metrics_server.address[1]}"


@pytest.mark.asyncio
async def test_peers_outside_the_allow_list_get_no_answer(tmp_path):
    config = daemon_config(tmp_path, metrics={"listen": "127.0.0.1:0", "allowed_peers": ("::1",)})
    async with running(config) as daemon:
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            await scrape_async(daemon.metrics_server.address[1])


@pytest.mark.asyncio
async def test_no_endpoint_unless_asked_for(tmp_path):
    async with running(daemon_config(tmp_path)) as daemon:
        assert daemon.metrics_server is None
        assert daemon.stats()["daemon"]["metrics_listen"] is None


def test_listen_address_forms_and_errors():
    assert metrics_address(load_config(None, metrics_listen="[::1]:9154")) == ("::1", 9154)
    bare = Config()
    import dataclasses

    bare = dataclasses.replace(bare, metrics=dataclasses.replace(bare.metrics, listen="9154"))
    assert metrics_address(bare) == ("127.0.0.1", 9154)
    with pytest.raises(ConfigError, match="--metrics"):
        load_config(None, metrics_listen="nowhere")


def test_bad_metrics_address_is_one_clear_line(tmp_path):
    config = write_config(tmp_path / "spamd.toml", '[metrics]\nlisten = "127.0.0.1:99999"\n')
    done = subprocess.run([sys.executable, "-m", "spamd", "--config", str(config), "--data-dir", str(tmp_path / "d")],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 1
    assert "metrics.listen" in done.stderr and "99999" in done.stderr
