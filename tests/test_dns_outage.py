"""A resolver that is down costs almost nothing: the daemon as a subprocess, 16 smtplib clients, our DNS server.

The DNS server (tests/dns_helpers.py) is switched whole: answering, silent (it takes
queries over UDP and TCP and never answers) or SERVFAIL for every name. Mail comes from
16 SMTP clients at once, each message signed by shop.example under a From domain of its
own, so that each asks DNS for a policy nobody asked before.
"""

from __future__ import annotations

import smtplib
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import dns.message
import dns.rcode
import pytest

from spamd.mail.auth.dns import (
    SERVER_DOWN_AFTER,
    SERVER_PROBE_S,
    Budget,
    CachingResolver,
    DnsTemporaryError,
    DnsWouldWait,
)
from tests.auth_helpers import SigningKeys, mail, publish
from tests.daemon_helpers import DaemonProcess, folder_files, wait_until_sync, write_config
from tests.dns_helpers import ZoneServer

JUNK_FOLDER = ".Junk"
BUDGET_S = 1.0
CLIENTS = 16


class SwitchedZone(ZoneServer):
    """Our zone server, switched whole: "answering", "silent" (no answer at all) or "servfail"."""

    state = "answering"

    def answer(self, wire: bytes) -> bytes | None:
        if self.state == "answering":
            return super().answer(wire)
        if self.state == "silent":
            return None
        response = dns.message.make_response(dns.message.from_wire(wire))
        response.set_rcode(dns.rcode.SERVFAIL)
        return response.to_wire()


@pytest.fixture
def switched_zone(test_keys: SigningKeys) -> Iterator[SwitchedZone]:
    zone = SwitchedZone()
    zone.start()
    try:
        publish(zone, test_keys)
        yield zone
    finally:
        zone.stop()


def signed(keys: SigningKeys, n: int, domain: str = "") -> bytes:
    return keys.shop.sign(
        mail(f"Deals <deals@{domain or f'shop{n}.example'}>", f"Offer {n}", f"Hello,\r\n\r\noffer {n}.\r\n")
    )


def deliver_concurrently(port: int, raws: list[bytes]) -> list[float]:
    """Send `raws` from CLIENTS SMTP clients at once; each message's wait for its answer to DATA, in seconds."""
    waits: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def client(share: list[bytes]) -> None:
        try:
            with smtplib.SMTP("127.0.0.1", port, timeout=60) as smtp:
                smtp.ehlo()
                for raw in share:
                    smtp.mail("bounce@shop.example")
                    smtp.rcpt("alice@home.example")
                    started = time.monotonic()
                    code, reply = smtp.data(raw)
                    waited = time.monotonic() - started
                    assert code == 250, reply
                    with lock:
                        waits.append(waited)
        except (OSError, smtplib.SMTPException, AssertionError) as e:
            errors.append(e)

    threads = [threading.Thread(target=client, args=(raws[i::CLIENTS],)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert len(waits) == len(raws)
    return waits


def delivered(maildir: Path) -> list[bytes]:
    return [
        path.read_bytes().split(b"\n\n", 1)[0] for path in folder_files(maildir) + folder_files(maildir, JUNK_FOLDER)
    ]


def scraped(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def start_daemon(tmp_path: Path, zone: ZoneServer) -> tuple[DaemonProcess, int, int, Path]:
    maildir = tmp_path / "Maildir"
    config = write_config(
        tmp_path / "spamd.toml",
        f'[parser]\nprocesses = 1\n[maildir]\npaths = ["{maildir}"]\nfsync = false\n[metrics]\nlisten = "127.0.0.1:0"\n'
        f'[auth]\nnameservers = ["{zone.address}"]\ndns_budget_s = {BUDGET_S}\n',
    )
    process = DaemonProcess("--config", config, "--data-dir", tmp_path / "data", "--smtp", "127.0.0.1:0")
    started = process.wait_for("daemon_started")
    process.wait_for("analysis_process_ready")
    return process, started["smtp_port"], started["metrics_port"], maildir


@pytest.mark.parametrize("state", ["silent", "servfail"])
def test_mail_is_not_held_up_by_nameservers_that_are_down_and_is_verified_again_when_they_answer(
    tmp_path: Path, switched_zone: SwitchedZone, test_keys: SigningKeys, state: str
) -> None:
    process, port, metrics_port, maildir = start_daemon(tmp_path, switched_zone)
    try:
        assert deliver_concurrently(port, [signed(test_keys, n, "shop.example") for n in range(4)])
        assert all(b"dkim=pass" in head for head in delivered(maildir))
        switched_zone.state = state
        raws = [signed(test_keys, n) for n in range(100, 100 + 4 * CLIENTS)]
        waits = deliver_concurrently(port, raws)
        # Each waits its own budget at most, not behind the others' waits (they queued: 2.1, 4.2, 6.3 s).
        assert max(waits) <= BUDGET_S + 0.1, sorted(waits)[-8:]
        heads = delivered(maildir)
        assert len(heads) == 4 + len(raws)
        assert sum(b"dkim=pass header.d=shop.example; dmarc=temperror" in head for head in heads) == len(raws)
        down = process.wait_for("nameservers_taken_down")
        assert down["nameservers"] == switched_zone.address
        assert scraped(metrics_port, "spamd_auth_nameservers_down") == 1
        assert scraped(metrics_port, "spamd_auth_nameservers_taken_down_total") == 1
        # Down, a message waits for nothing: one look-up at a time tries the nameservers.
        assert max(deliver_concurrently(port, [signed(test_keys, n) for n in range(200, 216)])) < BUDGET_S / 2

        switched_zone.state = "answering"
        back = time.monotonic()
        sent = [1000]

        def verified_again() -> bool:
            """A message from a domain of its own, whose policy is published: temperror until the nameservers are back."""
            sent[0] += 1
            switched_zone.txt(f"_dmarc.shop{sent[0]}.example", "v=DMARC1; p=none")
            send_one(port, signed(test_keys, sent[0]))
            subject = f"Subject: Offer {sent[0]}".encode()
            (head,) = wait_until_sync(lambda: [h for h in delivered(maildir) if subject in h])
            return b"temperror" not in head and b"dmarc=fail" in head

        wait_until_sync(verified_again, interval=0.3)
        assert time.monotonic() - back < 30  # the probe goes every 10 s
        process.wait_for("nameservers_answered_again")
        assert scraped(metrics_port, "spamd_auth_nameservers_down") == 0
    finally:
        process.kill()


def send_one(port: int, raw: bytes) -> None:
    with smtplib.SMTP("127.0.0.1", port, timeout=60) as smtp:
        smtp.sendmail("bounce@shop.example", ["alice@home.example"], raw)


def test_nameservers_that_answer_servfail_are_taken_down_and_one_probe_at_a_time_tries_them(
    zone_server: ZoneServer,
) -> None:
    """SERVFAIL at once for every name counts as a time-out does; while the probe waits for its answer,
    every other look-up is a temporary error without asking; the changes are told to `on_change`."""
    now = [1000.0]
    resolver = CachingResolver((zone_server.address,), clock=lambda: now[0])
    changes: list[bool] = []
    resolver.on_change = changes.append
    zone_server.servfail.update(f"s{n}.broken.example" for n in range(SERVER_DOWN_AFTER))
    for n in range(SERVER_DOWN_AFTER):
        with pytest.raises(DnsTemporaryError, match="NoNameservers"):
            resolver.txt(f"s{n}.broken.example", Budget(5.0))
    assert resolver.servers_down and changes == [True] and resolver.times_down == 1
    now[0] += SERVER_PROBE_S
    zone_server.silent.add("slow.example")
    zone_server.txt("a.shop.example", "up")
    probe = threading.Thread(
        target=lambda: pytest.raises(DnsTemporaryError, resolver.txt, "p.slow.example", Budget(1.0))
    )
    probe.start()
    wait_until_sync(lambda: zone_server.queries >= SERVER_DOWN_AFTER + 1)  # the probe is out, unanswered
    with pytest.raises(DnsTemporaryError, match="timed out or failed"):  # not a second probe
        resolver.txt("a.shop.example", Budget(5.0))
    probe.join(10)
    assert resolver.queries == SERVER_DOWN_AFTER + 1 and resolver.servers_down
    now[0] += SERVER_PROBE_S
    assert resolver.txt("a.shop.example", Budget(5.0)) == (b"up",)
    assert not resolver.servers_down and changes == [True, False]


def test_a_cached_only_budget_answers_from_the_cache_and_says_when_a_look_up_would_wait(
    zone_server: ZoneServer,
) -> None:
    """The analysis process verifies a message first with the cache's answers alone: a miss raises
    DnsWouldWait (past any `except Exception`), asking nothing; servers taken as down are a
    temporary error as ever, with no thread to wait in."""
    now = [1000.0]
    resolver = CachingResolver((zone_server.address,), clock=lambda: now[0])
    zone_server.txt("a.shop.example", "up")
    with pytest.raises(DnsWouldWait):
        resolver.txt("a.shop.example", Budget(5.0, cached_only=True))
    assert resolver.queries == 0 and not isinstance(DnsWouldWait("x"), Exception)
    assert resolver.txt("a.shop.example", Budget(5.0)) == (b"up",)
    assert resolver.txt("a.shop.example", Budget(5.0, cached_only=True)) == (b"up",)
    zone_server.silent.add("dead.example")
    for n in range(SERVER_DOWN_AFTER):
        with pytest.raises(DnsTemporaryError):
            resolver.txt(f"s{n}.dead.example", Budget(0.2))
    with pytest.raises(DnsTemporaryError, match="timed out or failed"):
        resolver.txt("b.shop.example", Budget(5.0, cached_only=True))
    now[0] += SERVER_PROBE_S  # the probe's turn: not taken by a look-up that may not wait
    with pytest.raises(DnsWouldWait):
        resolver.txt("b.shop.example", Budget(5.0, cached_only=True))
    assert resolver.txt("b.shop.example", Budget(5.0)) is None and not resolver.servers_down
