"""spamd as a Postfix milter, inside Debian's real Postfix, and against hostile milter clients.

Postfix, with docs/postfix.md's main.cf lines read from it (smtpd_milters =
inet:127.0.0.1:PORT, milter_protocol = 6, milter_default_action = tempfail), takes mail
from smtplib and relays it to a sink; spamd runs as a subprocess beside it. The hand-written milter clients below are only
the hostile ones: everything a well-behaved MTA does is done by Postfix itself.
"""

from __future__ import annotations

import json
import random
import re
import signal
import smtplib
import socket
import struct
import threading
import time

import pytest

from spamd.frontends.milter import (
    SMFIC_BODY,
    SMFIC_BODYEOB,
    SMFIC_HEADER,
    SMFIC_OPTNEG,
    packet,
)
from spamd.model.bayes import Label
from tests.attack_helpers import WellBehaved, spamctl, tag_of
from tests.daemon_helpers import crlf, list_digest, make_message, wait_until_sync
from tests.postfix_helpers import (
    Postfix,
    Sink,
    Spamd,
    free_port,
    message,
    milter_main_cf,
    postfix_missing,
    running_postfix,
    watch,
)

pytestmark = pytest.mark.real_program(postfix_missing())


@pytest.fixture(scope="module")
def sink():
    with Sink() as sink:
        yield sink


@pytest.fixture(scope="module")
def spamd_process(tmp_path_factory):
    spamd = Spamd(tmp_path_factory.mktemp("milter"), milter=True).start()
    yield spamd
    spamd.stop()


@pytest.fixture
def spamd(spamd_process):
    spamd_process.ensure_running()  # a test that killed it leaves the next one a running spamd
    return spamd_process


@pytest.fixture(scope="module")
def postfix(sink, spamd_process):
    milter = f"inet:127.0.0.1:{spamd_process.milter_port}"
    main = milter_main_cf(milter)  # docs/postfix.md's main.cf lines, with this instance's port
    # Two more listeners whose milter speaks older protocol versions (no "no reply" flags:
    # spamd answers every header and body chunk), per Postfix's per-milter settings.
    services = "".join(
        f"127.0.0.1:{port} inet n - n - - smtpd\n  -o {{ smtpd_milters = {{ {milter}, protocol={version} }} }}\n"
        for version, port in OLDER_PROTOCOLS.items()
    )
    with running_postfix(sink.port, main=main, services=services) as postfix:
        yield postfix


OLDER_PROTOCOLS = {version: free_port() for version in (2, 4)}


def headers_of(data: bytes) -> list[bytes]:
    head = data.split(b"\r\n\r\n", 1)[0]
    return [line for line in head.split(b"\r\n") if line[:1] not in (b" ", b"\t")]


def named(data: bytes, name: str) -> list[bytes]:
    return [h for h in headers_of(data) if h.lower().startswith(name.lower().encode() + b":")]


def test_marks_each_message_once_in_place(postfix: Postfix, sink: Sink, spamd: Spamd):
    # One SMTP session, so one milter connection: two messages and an abandoned one between.
    def scored_by_milter() -> list[dict]:
        return [e for e in spamd.events("message_scored") if e.get("via") == "milter"]

    before = len(scored_by_milter())
    with smtplib.SMTP("127.0.0.1", postfix.smtp_port, timeout=30) as client:
        assert client.sendmail("sender@example.org", ["user@example.com"], crlf(message(Label.HAM, "mark-ham"))) == {}
        client.mail("sender@example.org")
        client.rcpt("user@example.com")
        client.rset()  # Postfix sends the milter an ABORT
        assert client.sendmail("sender@example.org", ["user@example.com"], crlf(message(Label.SPAM, "mark-spam"))) == {}
    [ham] = sink.wait_for("mark-ham")
    [spam] = sink.wait_for("mark-spam")
    for data, status, flag, marker in ((ham, b"No", b"NO", b"mark-ham"), (spam, b"Yes", b"YES", b"mark-spam")):
        [line] = named(data, "X-Spam-Status")
        assert line.startswith(b"X-Spam-Status: " + status + b", score=")
        assert named(data, "X-Spam-Flag") == [b"X-Spam-Flag: " + flag]
        assert len(named(data, "X-Spam-Score")) == 1
        assert len(named(data, "Received")) == 1  # once through Postfix: no re-injection
        assert data.endswith(b"\r\nend " + marker + b"\r\n")  # the body as sent

    # The log is read by a thread: the second line may come after the mail reached the sink.
    def both_scored() -> list[dict]:
        scored = scored_by_milter()
        return scored if len(scored) >= before + 2 else []

    scored = wait_until_sync(both_scored, 10)
    assert sorted(e["verdict"] for e in scored[before:]) == ["ham", "spam"]
    assert all(e.get("queue_id") for e in scored)  # Postfix's queue id, from the "i" macro


def test_forged_verdicts_are_removed(postfix: Postfix, sink: Sink, spamd: Spamd):
    forged = "X-Spam-Status: No, forged\nx-spam-status: No, forged again\nX-Spam-Flag: NO\nX-Spam-Other: forged\n"
    assert postfix.send(message(Label.SPAM, "swapped-verdict", extra_headers=forged)) == {}
    [data] = sink.wait_for("swapped-verdict")
    assert b"forged" not in data, data.decode()
    [status] = named(data, "X-Spam-Status")
    assert status.startswith(b"X-Spam-Status: Yes, score=")
    assert named(data, "X-Spam-Flag") == [b"X-Spam-Flag: YES"]
    assert named(data, "X-Spam-Other") == []
    assert spamd.last_event("message_scored", removed_headers=4)["verdict"] == "spam"


@pytest.mark.parametrize("version", sorted(OLDER_PROTOCOLS))
def test_older_protocol_versions_get_a_reply_to_every_packet(postfix: Postfix, sink: Sink, spamd: Spamd, version: int):
    forged = "X-Spam-Status: No, forged\n"
    marker = f"protocol-{version}"
    with smtplib.SMTP("127.0.0.1", OLDER_PROTOCOLS[version], timeout=30) as client:
        assert (
            client.sendmail(
                "sender@example.org", ["user@example.com"], crlf(message(Label.SPAM, marker, extra_headers=forged))
            )
            == {}
        )
    [data] = sink.wait_for(marker)
    [status] = named(data, "X-Spam-Status")
    assert status.startswith(b"X-Spam-Status: Yes, score=") and b"forged" not in data
    assert f"milter inet:127.0.0.1:{spamd.milter_port}" not in postfix.log()  # no warning about spamd


def test_reject_at_refuses_spam_with_554(postfix: Postfix, sink: Sink, spamd: Spamd):
    with spamd.reconfigured("[milter]\nreject_at = 0.9\n"):
        with pytest.raises(smtplib.SMTPDataError) as refused:
            postfix.send(message(Label.SPAM, "reject-spam"))
        assert refused.value.smtp_code == 554
        assert isinstance(refused.value.smtp_error, bytes) and refused.value.smtp_error.startswith(b"5.7.1")
        assert postfix.send(message(Label.HAM, "reject-ham")) == {}  # ham still passes
        sink.wait_for("reject-ham")
    assert sink.with_subject("reject-spam") == []
    assert spamd.last_event("message_scored", action="rejected")["verdict"] == "spam"


def test_own_failure_answers_451_and_the_retry_is_delivered(postfix: Postfix, sink: Sink, spamd: Spamd):
    big = message(Label.HAM, "too-big") + b"padding padding padding padding\n" * 300  # ~10 KB
    with spamd.reconfigured("[milter]\nmax_message_bytes = 4096\n"):
        with pytest.raises(smtplib.SMTPDataError) as tempfailed:
            postfix.send(big)
        assert tempfailed.value.smtp_code == 451
        assert isinstance(tempfailed.value.smtp_error, bytes) and tempfailed.value.smtp_error.startswith(b"4.7.1")
        assert spamd.last_event("milter_message_refused", reason="too_big")["limit"] == 4096
    assert postfix.queued() == []  # refused before the queue: the client keeps it
    assert sink.with_subject("too-big") == []
    assert postfix.send(big) == {}  # the sender's retry, once the limit allows it
    [data] = sink.wait_for("too-big")
    assert len(named(data, "X-Spam-Status")) == 1


def test_spamd_killed_mid_session_loses_nothing(postfix: Postfix, sink: Sink, spamd: Spamd):
    data = crlf(message(Label.HAM, "killed"))
    with smtplib.SMTP("127.0.0.1", postfix.smtp_port, timeout=30) as client:
        client.ehlo("client.example.org")  # Postfix has connected to spamd and negotiated
        assert client.mail("sender@example.org")[0] == 250
        assert client.rcpt("user@example.com")[0] == 250
        assert client.docmd("DATA")[0] == 354
        client.send(data)  # the message, all but its end
        spamd.process.proc.send_signal(signal.SIGKILL)
        spamd.process.wait(10)
        client.send(b".\r\n")
        code, text = client.getreply()
    assert code == 451 and text.startswith(b"4.7.1")  # milter_default_action = tempfail
    assert postfix.queued() == []
    assert sink.with_subject("killed") == []
    spamd.start()  # same ports, same model
    assert postfix.send(message(Label.HAM, "killed")) == {}  # the client's retry
    [delivered] = sink.wait_for("killed")
    assert len(named(delivered, "X-Spam-Status")) == 1
    assert postfix.queued() == []


def test_local_submission_waits_in_postfix_while_spamd_is_down(postfix: Postfix, sink: Sink, spamd: Spamd):
    def pickup_tempfails() -> int:  # cleanup's word on the milter for a locally submitted message
        return len(re.findall(r"postfix/cleanup\[\d+\]: \w+: milter-reject: CONNECT .* 4\.7\.1 ", postfix.log()))

    before = pickup_tempfails()
    assert spamd.stop() == 0
    postfix.submit(message(Label.HAM, "local-submission"))  # sendmail(1): pickup, non_smtpd_milters
    wait_until_sync(lambda: pickup_tempfails() > before, 20)
    assert [json.loads(row)["queue_name"] for row in postfix.queued()] == ["maildrop"]  # kept, to be tried again
    assert sink.with_subject("local-submission") == []
    spamd.start()

    def flushed() -> list[bytes]:
        postfix.flush()
        return sink.with_subject("local-submission")

    wait_until_sync(flushed, 30, interval=0.5)
    [data] = sink.with_subject("local-submission")
    assert len(named(data, "X-Spam-Status")) == 1
    wait_until_sync(lambda: postfix.queued() == [], 20)


def test_sigterm_with_postfix_sessions_open_exits_at_once(postfix: Postfix, sink: Sink, spamd: Spamd):
    # Postfix holds one milter connection per SMTP session, idle between messages:
    # shutdown must close those at once, not wait the drain timeout for them.
    with smtplib.SMTP("127.0.0.1", postfix.smtp_port, timeout=30) as client:
        client.ehlo("client.example.org")
        wait_until_sync(lambda: spamd.milter_sessions() >= 1, 10)
        started = time.monotonic()
        spamd.process.signal(signal.SIGTERM)
        assert spamd.process.wait(20) == 0
        assert time.monotonic() - started < 5
        with pytest.raises(smtplib.SMTPDataError) as tempfailed:
            client.sendmail("sender@example.org", ["user@example.com"], crlf(message(Label.HAM, "sigterm")))
        assert tempfailed.value.smtp_code == 451
    spamd.start()
    assert postfix.send(message(Label.HAM, "sigterm")) == {}
    assert len(sink.wait_for("sigterm")) == 1


# ---------------------------------------------------------------- hostile milter clients


class RawMilter:
    """A socket speaking (or abusing) the milter protocol packet by packet, as no MTA would."""

    def __init__(self, port: int, timeout: float = 10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def negotiate(self) -> tuple[int, int, int]:
        self.send(packet(SMFIC_OPTNEG, struct.pack("!III", 6, 0x1FF, 0x1FFFFF)))
        command, data = self.read_packet()
        assert command == SMFIC_OPTNEG
        return struct.unpack("!III", data[:12])

    def _exactly(self, n: int) -> bytes:
        got = b""
        while len(got) < n:
            chunk = self.sock.recv(n - len(got))
            if not chunk:
                raise ConnectionError("closed by spamd")
            got += chunk
        return got

    def read_packet(self) -> tuple[bytes, bytes]:
        (length,) = struct.unpack("!I", self._exactly(4))
        data = self._exactly(length)
        return data[:1], data[1:]

    def closed_by_spamd(self) -> bool:
        """Whether spamd ends the connection (read to EOF, bounded by the socket timeout)."""
        try:
            while self.sock.recv(65536):
                pass
        except ConnectionResetError:
            pass
        finally:
            self.sock.close()
        return True

    def reset(self) -> None:
        """Vanish: close with RST, as a crashed MTA host does."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    def close(self) -> None:
        self.sock.close()


def header(name: bytes, value: bytes) -> bytes:
    return packet(SMFIC_HEADER, name + b"\0" + value + b"\0")


def test_hostile_milter_clients_never_stall_postfix(postfix: Postfix, sink: Sink, spamd: Spamd):
    port = spamd.milter_port
    assert port is not None  # made with milter=True
    failures: list[str] = []
    idle: list[RawMilter] = []

    def attack(name: str, action) -> threading.Thread:
        def run() -> None:
            try:
                action()
            except Exception as e:  # collected, so the test names the scenario that broke
                failures.append(f"{name}: {type(e).__name__}: {e}")

        thread = threading.Thread(target=run, name=name)
        thread.start()
        return thread

    def random_bytes() -> None:
        rng = random.Random(7)
        for _ in range(30):
            client = RawMilter(port)
            client.send(rng.randbytes(rng.randrange(1, 4096)))
            client.close()

    def bad_lengths() -> None:
        for prefix in (b"\xff\xff\xff\xff", struct.pack("!I", 0), struct.pack("!I", 64 * 1024 * 1024)):
            client = RawMilter(port)
            client.send(prefix + b"O")
            assert client.closed_by_spamd()

    def protocol_breaches() -> None:
        for breach in (
            packet(SMFIC_HEADER, b"From\0x\0"),
            packet(b"Z", b"??"),
        ):  # header before OPTNEG; unknown command
            client = RawMilter(port)
            client.send(breach)
            assert client.closed_by_spamd()
        client = RawMilter(port)
        client.negotiate()
        client.send(packet(SMFIC_OPTNEG, struct.pack("!III", 6, 0x1FF, 0)))
        assert client.closed_by_spamd()
        client = RawMilter(port)
        client.negotiate()
        client.send(b"".join(header(b"X-Spam-A", b"x") for _ in range(2000)))  # over the cap of removals
        assert client.closed_by_spamd()

    def vanish_mid_message() -> None:
        for i in range(20):
            client = RawMilter(port)
            client.negotiate()
            client.send(header(b"Subject", f"vanish {i}".encode()) + packet(SMFIC_BODY, b"half a body"))
            client.reset()

    def tiny_packet_flood() -> None:
        # 20,000 one-byte body chunks in one write, then the end: answered, and nobody waits on it.
        client = RawMilter(port, timeout=30)
        client.negotiate()
        client.send(
            header(b"Subject", b"flood")
            + b"".join(packet(SMFIC_BODY, b"x") for _ in range(20000))
            + packet(SMFIC_BODYEOB)
        )
        replies: list[tuple[bytes, bytes]] = []
        while not replies or replies[-1][0] not in (b"c", b"y"):
            replies.append(client.read_packet())
        assert replies[-1][0] == b"c" and [c for c, _ in replies].count(b"h") == 3
        client.close()

    def idle_crowd() -> None:
        for i in range(300):
            client = RawMilter(port)
            if i % 3 == 0:
                client.negotiate()
            if i % 3 == 1:
                client.send(struct.pack("!I", 1000) + b"O")  # a packet announced, never finished
            idle.append(client)

    with WellBehaved(postfix.smtp_port, pause=0.02) as probe:
        threads = [
            attack("random bytes", random_bytes),
            attack("bad lengths", bad_lengths),
            attack("protocol breaches", protocol_breaches),
            attack("vanish mid-message", vanish_mid_message),
            attack("tiny packet flood", tiny_packet_flood),
            attack("idle crowd", idle_crowd),
        ]
        watch(threads, 60)
    try:
        assert not failures, failures
        probe.check(minimum=3, limit_s=2.0)
        assert spamd.alive(), "spamd died:\n" + "\n".join(spamd.process.lines[-20:])
        assert not spamd.events("milter_scoring_failed")
        assert spamd.milter_sessions() >= 300  # the idle crowd is still there, and so is the control socket
        # Every probe reached the sink through the milter, marked once.
        for tag in probe.tags:
            found: list[bytes | None] = [m for m in sink.with_subject(tag) if tag_of(m.replace(b"\r\n", b"\n")) == tag]
            [data] = found or [None]
            assert data is not None and len(named(data, "X-Spam-Status")) == 1, tag
        spamd.last_event("milter_protocol_error")
        spamd.last_event("milter_client_vanished")
    finally:
        for client in idle:
            client.close()


def test_idle_connections_time_out_and_strangers_are_refused(postfix: Postfix, spamd: Spamd):
    assert spamd.milter_port is not None
    with spamd.reconfigured("[milter]\nidle_timeout_s = 0.5\n"):
        client = RawMilter(spamd.milter_port)
        client.negotiate()
        started = time.monotonic()
        assert client.closed_by_spamd() and time.monotonic() - started < 5
        spamd.last_event("milter_timeout", during="idle")
    with spamd.reconfigured('[smtp]\nallowed_peers = ["::1"]\n'):
        client = RawMilter(spamd.milter_port)
        assert client.closed_by_spamd()
        spamd.last_event("milter_peer_refused", peer="127.0.0.1")


def test_sigterm_lets_a_slow_clients_message_finish(postfix: Postfix, spamd: Spamd):
    # A client in the middle of a message when SIGTERM comes (slower than any Postfix):
    # spamd waits for its end, answers it, then closes and exits cleanly.
    assert spamd.milter_port is not None
    client = RawMilter(spamd.milter_port)
    client.negotiate()
    client.send(header(b"Subject", b"slow") + header(b"X-Spam-Flag", b"YES"))
    wait_until_sync(lambda: spamd.milter_sessions() >= 1, 10)
    spamd.process.signal(signal.SIGTERM)
    spamd.process.wait_for("daemon_stopping")
    client.send(packet(SMFIC_BODY, b"meeting agenda\r\n") + packet(SMFIC_BODYEOB))
    replies = [client.read_packet() for _ in range(5)]
    assert [command for command, _ in replies] == [b"m", b"h", b"h", b"h", b"c"]  # one removal, three headers
    assert replies[0][1] == struct.pack("!I", 1) + b"X-Spam-Flag\0\0"
    assert client.closed_by_spamd()
    assert spamd.process.wait(20) == 0


def test_milter_traffic_is_counted_in_metrics(postfix: Postfix, sink: Sink, spamd: Spamd):
    """Through Postfix: one milter message grows spamd_messages_scored_total{way_in="milter"} by one."""
    from tests.test_metrics import parse, scrape_text, value

    before, _ = parse(scrape_text(spamd.metrics_port))
    with smtplib.SMTP("127.0.0.1", postfix.smtp_port, timeout=30) as client:
        assert (
            client.sendmail("sender@example.org", ["user@example.com"], crlf(message(Label.SPAM, "metrics-spam"))) == {}
        )
    sink.wait_for("metrics-spam")
    after, _ = parse(scrape_text(spamd.metrics_port))
    assert (
        value(after, "spamd_messages_scored_total", way_in="milter", verdict="spam")
        - value(before, "spamd_messages_scored_total", way_in="milter", verdict="spam")
        == 1
    )
    assert (
        value(after, "spamd_scan_duration_seconds_count", way_in="milter")
        - value(before, "spamd_scan_duration_seconds_count", way_in="milter")
        == 1
    )
    assert value(after, "spamd_sessions_total", way_in="milter") > value(
        before, "spamd_sessions_total", way_in="milter"
    )
    assert value(after, "spamd_messages_scored_total", way_in="smtp") == 0


# ---------------------------------------------------------------- the recipients name the user


def test_the_recipients_user_scores_with_their_layer(postfix: Postfix, sink: Sink, spamd: Spamd, tmp_path):
    def train(user: str, label: Label, raws: list[bytes]) -> None:
        paths = []
        for raw in raws:
            paths.append(tmp_path / f"{len(list(tmp_path.iterdir()))}.eml")
            paths[-1].write_bytes(raw)
        done = spamctl(
            "--config", spamd.config_path, "--data-dir", spamd.data, "train", f"--{label}", "--user", user, *paths
        )
        assert done.returncode == 0, done.stderr

    for user, seed in (("alice", 31), ("bob", 32)):  # an ordinary history of both classes (a layer needs both)
        for label in (Label.SPAM, Label.HAM):
            train(user, label, [make_message(label, i, seed=seed) for i in range(3)])
    train("alice", Label.SPAM, [list_digest(n) for n in range(8)])  # alice left the list
    train("bob", Label.HAM, [list_digest(n) for n in range(8, 16)])  # bob reads it
    probe = list_digest(99)

    def log_odds_for(rcpts: list[str]) -> float:
        """The probe through Postfix to `rcpts`: the log-odds of the X-Spam-Status the milter had added."""
        before = len(sink.with_subject("digest99"))
        with smtplib.SMTP("127.0.0.1", postfix.smtp_port, timeout=30) as client:
            assert client.sendmail("list@news.example.net", rcpts, crlf(probe)) == {}
        data = sink.wait_for("digest99", count=before + 1)[before]
        [status] = named(data, "X-Spam-Status")
        return float(re.search(rb"log_odds=(-?[0-9.]+)", status).group(1))  # type: ignore[union-attr]

    def probes_named(count: int) -> list[str | None]:
        """The user_name of this spamd process's `message_scored` lines for the probe, once there are `count`."""

        def probes() -> list[dict]:
            return [
                e for e in spamd.events("message_scored") if e.get("message_id") == "<digest-99-readers@example.com>"
            ]

        wait_until_sync(lambda: len(probes()) >= count, 10)
        return [e.get("user_name") for e in probes()]

    with spamd.restarted_with("[users]\nscore_per_user = false\n"):  # (a restart setting) the shared model
        shared = log_odds_for(["alice@example.com"])
        assert probes_named(1) == ["alice"]  # the user is named on the log line whether or not their layer scores
    # score_per_user on (the default)
    alice = log_odds_for(["alice@example.com"])
    alice_extension = log_odds_for(["alice+lists@example.com", "alice@example.com"])  # one user
    bob = log_odds_for(["bob@example.com"])
    both = log_odds_for(["alice@example.com", "bob@example.com"])  # two users: one copy, one verdict
    nobody = log_odds_for(["carol@example.com"])  # no layer
    assert probes_named(5) == ["alice", "alice", "bob", None, "carol"]
    assert alice > shared > bob, (alice, shared, bob)
    assert alice > 0 > bob  # spam for alice, ham for bob
    assert alice_extension == alice
    assert both == nobody == shared
