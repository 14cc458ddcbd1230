"""Hostile SMTP clients against the real daemon (a subprocess on an ephemeral loopback port).

Random bytes, overlong commands and lines, oversized messages, thousands of
recipients, hundreds of idle connections, clients that vanish in mid-DATA, NUL
bytes and bare LF. Each gets the answer RFC 5321 and mail admins expect; a
half-received message is never delivered; and a well-behaved smtplib client
sending beside the abuse is served, every time, within a second.
"""

from __future__ import annotations

import contextlib
import random
import resource
import threading
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.attack_helpers import RawClient, WellBehaved, maildir_census, tag_of, tagged_message
from tests.daemon_helpers import DaemonProcess, write_config

pytestmark = pytest.mark.slow

MAX_MESSAGE_BYTES = 512 * 1024
IDLE_TIMEOUT_S = 2.0
DATA_TIMEOUT_S = 2.0


@dataclass
class Spamd:
    process: DaemonProcess
    port: int
    maildir: Path

    def delivered(self) -> dict[str, int]:
        census = maildir_census(self.maildir)
        assert not census.broken, f"partial files in new/ or cur/: {census.broken[:3]}"
        return dict(census.copies)

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")


@contextlib.contextmanager
def open_files_soft_limit(soft: int) -> Iterator[None]:
    """Start children with a low soft RLIMIT_NOFILE (systemd's default is 1024)."""
    old = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, old[1]), old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, old)


@pytest.fixture
def spamd(tmp_path) -> Iterator[Spamd]:
    config = write_config(
        tmp_path / "spamd.toml",
        f"[smtp]\nmax_message_bytes = {MAX_MESSAGE_BYTES}\nidle_timeout_s = {IDLE_TIMEOUT_S}\n"
        f"data_timeout_s = {DATA_TIMEOUT_S}\n[maildir]\nfsync = true\n",
    )
    with open_files_soft_limit(256):
        process = DaemonProcess("--config", config, "--data-dir", tmp_path / "data", "--smtp", "127.0.0.1:0")
    try:
        yield Spamd(process, process.port, tmp_path / "data" / "Maildir")
        assert process.proc.poll() is None, "spamd died:\n" + "\n".join(process.lines[-20:])
        # spamd's own failures answer 451 and log smtp_session_failed: none of the abuse may reach one.
        assert not process.events("smtp_session_failed"), process.events("smtp_session_failed")[:2]
    finally:
        process.kill()


def only_probes_delivered(spamd: Spamd, probe: WellBehaved, also: AbstractSet[str] = frozenset()) -> None:
    delivered = spamd.delivered()
    assert set(delivered) == set(probe.tags) | also, sorted(set(delivered) ^ (set(probe.tags) | also))[:5]
    assert all(n == 1 for n in delivered.values())


def test_random_bytes_get_5xx_and_never_mail(spamd):
    rng = random.Random(5)
    replies: list[int] = []

    def garbage(seed: int) -> None:
        client = RawClient(spamd.port)
        try:
            client.send(rng.randbytes(64 * 1024) + b"\r\n")
            for _ in range(3):
                replies.append(client.reply()[0])
        except (ConnectionError, TimeoutError):
            pass  # hung up on after too many bad commands: fine
        finally:
            client.close()

    with WellBehaved(spamd.port) as probe:
        threads = [threading.Thread(target=garbage, args=(i,)) for i in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        rss_before = spamd.rss_kib()
        # A line with no end: read and thrown away past the line limit, never buffered whole.
        endless = RawClient(spamd.port)
        for _ in range(48):
            endless.send(b"A" * 65536)
        assert endless.command(b"") == (500, b"500 Command line too long")
        assert endless.command(b"NOOP")[0] == 250
        endless.close()
        assert spamd.rss_kib() - rss_before < 32 * 1024
    probe.check()
    assert replies and all(code in (500, 501, 502) for code in replies), sorted(set(replies))
    only_probes_delivered(spamd, probe)


def test_overlong_commands_get_500_and_overlong_body_lines_are_delivered(spamd):
    with WellBehaved(spamd.port) as probe:
        client = RawClient(spamd.port)
        assert client.command(b"HELO " + b"h" * 2000)[0] == 500  # RFC 5321 4.5.3.1.4: 512 octets
        assert client.command(b"EHLO client.example")[0] == 250
        assert client.command(b"MAIL FROM:<" + b"a" * 5000 + b"@example.org>")[0] == 500
        assert client.command(b"MAIL FROM:<a@example.org>")[0] == 250  # the session is intact
        assert client.command(b"RCPT TO:<user@example.com>")[0] == 250
        assert client.command(b"DATA")[0] == 354
        # A 300 KB body line: RFC 5321 says 998, real mail breaks it, Postfix delivers it.
        long_line = b"x" * 300_000
        message = tagged_message("longline", spam=False).replace(b"\n\n", b"\n\n" + long_line + b"\n", 1)
        client.send(message.replace(b"\n", b"\r\n") + b".\r\n")
        assert client.reply()[0] == 250
        client.close()
    probe.check()
    only_probes_delivered(spamd, probe, {"longline"})
    [path] = [p for p in (spamd.maildir / "new").iterdir() if tag_of(p.read_bytes()) == "longline"]
    assert long_line in path.read_bytes()


def test_message_over_the_size_limit_gets_552_and_the_session_goes_on(spamd):
    big = tagged_message("big", spam=False).replace(b"\n\n", b"\n\n" + (b"y" * 76 + b"\r\n") * 8000, 1)
    assert len(big) > MAX_MESSAGE_BYTES
    with WellBehaved(spamd.port) as probe:
        client = RawClient(spamd.port)
        client.command(b"EHLO client.example")
        # RFC 1870: announced too big, refused at MAIL before a byte of it is sent.
        assert client.command(b"MAIL FROM:<a@example.org> SIZE=%d" % len(big))[0] == 552
        assert client.command(b"MAIL FROM:<a@example.org>")[0] == 250
        assert client.command(b"RCPT TO:<user@example.com>")[0] == 250
        assert client.command(b"DATA")[0] == 354
        client.send(big.replace(b"\n", b"\r\n") + b".\r\n")
        code, text = client.reply()
        assert (code, text[:9]) == (552, b"552 5.3.4")  # read to its end, then refused
        # The same session sends the next message normally.
        assert client.command(b"MAIL FROM:<a@example.org>")[0] == 250
        assert client.command(b"RCPT TO:<user@example.com>")[0] == 250
        assert client.command(b"DATA")[0] == 354
        client.send(tagged_message("after-big", spam=False).replace(b"\n", b"\r\n") + b".\r\n")
        assert client.reply()[0] == 250
        client.close()
    probe.check()
    only_probes_delivered(spamd, probe, {"after-big"})


def test_thousands_of_recipients_get_452_past_the_limit_and_one_copy_is_delivered(spamd):
    count = 5000
    with WellBehaved(spamd.port) as probe:
        client = RawClient(spamd.port, timeout=30)
        client.command(b"EHLO client.example")
        client.command(b"MAIL FROM:<a@example.org>")
        client.send(b"".join(b"RCPT TO:<user%d@example.com>\r\n" % i for i in range(count)))  # pipelined
        codes = [client.reply() for _ in range(count)]
        assert [c for c, _ in codes[:100]] == [250] * 100
        # RFC 5321 4.5.3.1.10: 452 for too many recipients; the client sends the rest later.
        assert {t for _, t in codes[100:]} == {b"452 4.5.3 Too many recipients"}
        assert client.command(b"DATA")[0] == 354
        client.send(tagged_message("many-rcpts", spam=False).replace(b"\n", b"\r\n") + b".\r\n")
        assert client.reply()[0] == 250
        client.close()
    probe.check()
    only_probes_delivered(spamd, probe, {"many-rcpts"})


def test_hundreds_of_idle_connections_are_served_then_timed_out_with_421(spamd):
    # spamd was started with a soft open-files limit of 256, as a small default would be:
    # it raises its own limit, so the sessions below all get their greeting.
    limits = Path(f"/proc/{spamd.process.proc.pid}/limits").read_text()
    [soft] = [line.split()[3] for line in limits.splitlines() if line.startswith("Max open files")]
    assert int(soft) > 1000
    idle: list[RawClient] = []
    with WellBehaved(spamd.port) as probe:
        for i in range(600):
            client = RawClient(spamd.port, timeout=IDLE_TIMEOUT_S + 8)
            assert client.greeting is not None and client.greeting[0] == 220
            if i % 2:
                assert client.command(b"EHLO idle.example")[0] == 250
            idle.append(client)
        try:
            # Every idle session is closed after the idle timeout, each told why.
            for client in idle:
                assert client.closed_by_peer().startswith(b"421 4.4.2")
        finally:
            for client in idle:
                client.close()
    probe.check(minimum=5)
    assert not [line for line in spamd.process.lines if "out of system resource" in line]
    only_probes_delivered(spamd, probe)


def test_clients_vanishing_in_mid_data_deliver_nothing(spamd):
    def start_data(tag: str) -> tuple[RawClient, bytes]:
        client = RawClient(spamd.port)
        client.command(b"EHLO client.example")
        client.command(b"MAIL FROM:<a@example.org>")
        client.command(b"RCPT TO:<user@example.com>")
        assert client.command(b"DATA")[0] == 354
        return client, tagged_message(tag, spam=False).replace(b"\n", b"\r\n")

    with WellBehaved(spamd.port) as probe:
        for i in range(10):
            client, message = start_data(f"closed{i}")
            client.send(message[: len(message) * i // 10])
            client.close()  # FIN in mid-message
            client, message = start_data(f"reset{i}")
            client.send(message + (b"." if i % 2 else b""))  # all but the terminating CRLF.CRLF
            client.reset()  # RST
        # One that sends the whole message and hangs up before the reply: delivered or not
        # (it got no 250, so it retries), but never partly and never twice.
        done, message = start_data("complete-then-gone")
        done.send(message + b".\r\n")
        done.close()
        stalled, message = start_data("stalled")
        stalled.send(message[:100])
        # A stalled DATA is cut at data_timeout_s, with a 421, and nothing delivered.
        assert stalled.closed_by_peer().startswith(b"421 4.4.2")
        stalled.close()
    probe.check()
    delivered = spamd.delivered()
    if "complete-then-gone" in delivered:
        only_probes_delivered(spamd, probe, {"complete-then-gone"})
    else:
        only_probes_delivered(spamd, probe)
    for folder in ("tmp", ".Junk/tmp"):
        assert not list((spamd.maildir / folder).iterdir()), f"leftovers in {folder}"


def test_nul_bytes_and_bare_lf_are_accepted_and_delivered_as_sent(spamd):
    body = (
        b"nul \x00 in a line\n"  # NUL: RFC 5321 forbids it, real mail has it, Postfix delivers it
        b"bare lf line\n"
        b"lone cr\rin a line\r\n"
        b"8bit \xe9\xff\n"
        b"\n.\nMAIL FROM:<smuggled@example.org>\n"  # not an end of data: only CRLF.CRLF is
        b"end nulmsg\r\n"
    )
    message = b"From: a@example.org\r\nSubject: nul\nMessage-ID: <nulmsg@attack.test>\r\n\r\n" + body
    with WellBehaved(spamd.port) as probe:
        client = RawClient(spamd.port)
        assert client.command(b"EHLO client\x00example")[0] in (250, 501)
        client.send(b"MAIL FROM:<a@example.org>\n")  # bare LF after a command: accepted, as Postfix does
        assert client.reply()[0] == 250
        assert client.command(b"RCPT TO:<user@example.com>")[0] == 250
        assert client.command(b"DATA")[0] == 354
        client.send(message + b".\r\n")
        assert client.reply()[0] == 250
        assert client.command(b"QUIT")[0] == 221
        client.close()
    probe.check()
    only_probes_delivered(spamd, probe, {"nulmsg"})
    [path] = [p for p in (spamd.maildir / "new").iterdir() if tag_of(p.read_bytes()) == "nulmsg"]
    delivered = path.read_bytes()
    # Maildir files are LF: CRLF becomes LF; every other byte is as sent.
    assert delivered.endswith(body.replace(b"\r\n", b"\n"))
    assert b"smuggled" not in b"".join(p.read_bytes() for p in (spamd.maildir / "new").iterdir() if p != path)


def test_random_bytes_as_message_body_are_delivered_whole(spamd):
    rng = random.Random(11)
    with WellBehaved(spamd.port) as probe:
        for i in range(20):
            noise = rng.randbytes(rng.randrange(1, 20000)).replace(b"\r\n.\r\n", b"\r\n..\r\n")
            message = (
                b"Subject: noise\r\nMessage-ID: <noise%d@attack.test>\r\n\r\n" % i + noise + b"\r\nend noise%d\r\n" % i
            )
            client = RawClient(spamd.port)
            client.command(b"EHLO client.example")
            client.command(b"MAIL FROM:<a@example.org>")
            client.command(b"RCPT TO:<user@example.com>")
            assert client.command(b"DATA")[0] == 354
            stuffed = message.replace(b"\r\n.", b"\r\n..")
            client.send(stuffed + b".\r\n")
            assert client.reply()[0] == 250, i
            client.close()
    probe.check()
    only_probes_delivered(spamd, probe, {f"noise{i}" for i in range(20)})
