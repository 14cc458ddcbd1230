"""Hostile clients on the spamc port: random bytes, oversized, stalled and vanishing requests,
hundreds of idle connections, a SIGTERM mid-request; Debian's spamc is answered throughout."""

from __future__ import annotations

import asyncio
import json
import random
import re
import signal
import socket
import threading
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from spamd.model.bayes import Label
from tests.attack_helpers import RawClient, WellBehaved, tagged_message
from tests.daemon_helpers import make_message, wait_until_sync
from tests.spamc_helpers import SpamcDaemon, needs_spamc, raw_exchange, request, start_spamd, stats_counts

_SCORE_LINE = re.compile(rb"^(-?\d+\.\d)/(-?\d+\.\d)\n")


HOSTILE_CONFIG = """\
allow_tell = true
max_message_bytes = 524288
idle_timeout_s = 2.0
data_timeout_s = 2.0
max_connections = 400
"""


@pytest.fixture
def hostile(tmp_path) -> Iterator[SpamcDaemon]:
    daemon = start_spamd(tmp_path, HOSTILE_CONFIG, train=False)
    try:
        yield daemon
        assert daemon.process.proc.poll() is None, "spamd died:\n" + "\n".join(daemon.process.lines[-20:])
        # spamd's own failures answer 70 and log spamc_request_failed: none of the abuse may reach one.
        assert not daemon.process.events("spamc_request_failed"), daemon.process.events("spamc_request_failed")[:2]
    finally:
        daemon.process.kill()


def spamc_probe(daemon: SpamcDaemon) -> WellBehaved:
    """Debian's spamc -c, again and again beside the abuse: each must be answered (points/threshold)."""

    def send(tag: str) -> None:
        # -l: spamc says on stderr why it fell back to "0/0" (by default it tells syslog).
        done = daemon.spamc("-l", "-c", input=tagged_message(tag, spam=False), timeout=10)
        if done.returncode not in (0, 1) or not _SCORE_LINE.fullmatch(done.stdout):
            recent = [line for line in daemon.process.lines[-400:] if '"spamc_' in line][-5:]
            raise AssertionError(f"spamc: {done.returncode} {done.stdout!r} {done.stderr!r}; spamd: {recent}")

    return WellBehaved(daemon.port, send=send)


def answer_of(client: RawClient, half_close: bool = True) -> bytes:
    """Everything spamd says until it closes (after our side is shut down, if asked)."""
    if half_close:
        client.sock.shutdown(socket.SHUT_WR)
    try:
        return client.closed_by_peer()
    finally:
        client.close()


def rss_kib(daemon: SpamcDaemon) -> int:
    for line in Path(f"/proc/{daemon.process.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@needs_spamc
@pytest.mark.slow
def test_random_bytes_and_overlong_lines_get_76(hostile):
    rng = random.Random(12)
    answers: list[bytes] = []

    def garbage() -> None:
        client = RawClient(hostile.port, greet=False)
        client.send(rng.randbytes(64 * 1024))
        answers.append(answer_of(client))

    with spamc_probe(hostile) as probe:
        threads = [threading.Thread(target=garbage) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        rss_before = rss_kib(hostile)
        # A request line, then a header line, with no end: refused at 8 KiB, never buffered whole.
        for opening in (b"", b"CHECK SPAMC/1.5\r\nUser: "):
            client = RawClient(hostile.port, greet=False)
            client.send(opening)
            for _ in range(15):
                client.send(b"A" * 65536)
            answers.append(answer_of(client))
        assert rss_kib(hostile) - rss_before < 32 * 1024
    probe.check()
    assert len(answers) == 22
    assert all(a.startswith(b"SPAMD/1.0 76 Bad header line: (") and a.endswith(b"\r\n") for a in answers), {
        a[:40] for a in answers
    }


@needs_spamc
@pytest.mark.slow
def test_oversized_requests_get_65_and_teach_nothing(hostile):
    big = tagged_message("big", spam=True).replace(b"\n\n", b"\n\n" + (b"y" * 76 + b"\n") * 8000, 1)
    assert len(big) > 524288
    bomb = zlib.compress(b"\0" * (20 * 1024 * 1024))
    with spamc_probe(hostile) as probe:
        # Announced too big: answered before a byte of the body is sent.
        client = RawClient(hostile.port, greet=False)
        client.send(b"CHECK SPAMC/1.5\r\nContent-length: 999999999999\r\n\r\n")
        assert client.sock.recv(200).startswith(
            b"SPAMD/1.0 65 message too big: 999999999999 bytes, the limit is 524288"
        )
        client.close()
        tell = {"Message-class": "spam", "Set": "local"}
        for data in (
            request("CHECK", big),  # announced, and sent all the same
            request("TELL", big, headers=tell),
            b"PROCESS SPAMC/1.0\r\n" + big,  # no Content-length: cut at the cap as it arrives
            request("CHECK", bomb, headers={"Compress": "zlib"}),  # 20 KiB inflating to 20 MiB
            request("TELL", bomb, headers={"Compress": "zlib", **tell}),
        ):
            assert raw_exchange(hostile.port, data).startswith(b"SPAMD/1.0 65 message too big: "), data[:40]
    probe.check()
    assert stats_counts(hostile.stats()) == (0, 0, 0)


@needs_spamc
@pytest.mark.slow
def test_half_sent_stalled_and_vanishing_clients_teach_nothing(hostile):
    message = tagged_message("half", spam=True)
    full = request("TELL", message, headers={"Message-class": "spam", "Set": "local"})
    with spamc_probe(hostile) as probe:
        for i in range(10):
            cut = full[: len(full) - 1 - i * 7]
            client = RawClient(hostile.port, greet=False)
            client.send(cut)
            if i % 2:
                answer = answer_of(client)  # FIN in mid-body: Content-length mismatch (or EOF in the head)
                assert answer.startswith(b"SPAMD/1.0 76 Bad header line: ("), answer
            else:
                client.reset()  # RST: nobody to answer
        # Stalled in the head, and in the body: cut at the timeouts with 79, as spamd's own.
        head = RawClient(hostile.port, greet=False, timeout=10)
        head.send(b"TELL SPAMC/1.5\r\nMessage-class: spam\r\n")
        body = RawClient(hostile.port, greet=False, timeout=10)
        body.send(full[:-20])
        assert answer_of(head, half_close=False).startswith(b"SPAMD/1.0 79 Timeout: (2 second socket timeout")
        assert answer_of(body, half_close=False).startswith(b"SPAMD/1.0 79 Timeout: (2 second socket timeout")
    probe.check()
    assert stats_counts(hostile.stats()) == (0, 0, 0)
    # The whole request, at last, is learned.
    assert raw_exchange(hostile.port, full) == b"SPAMD/1.1 0 EX_OK\r\nDidSet: local\r\n\r\n"
    assert stats_counts(hostile.stats()) == (1, 0, 1)


@needs_spamc
@pytest.mark.slow
def test_hundreds_of_idle_connections_never_keep_a_client_waiting(hostile):
    idle: list[RawClient] = []
    with spamc_probe(hostile) as probe:
        for i in range(500):
            client = RawClient(hostile.port, greet=False, timeout=15)
            if i % 2:
                client.send(b"CHECK SPAMC/1.5\r\n")  # a request line, then nothing
            idle.append(client)
        # Past max_connections (400) the longest-waiting ones made room (75, or closed
        # if already answered); the rest are cut at the idle timeout (79). Meanwhile
        # spamc was answered every time.
        answers = [answer_of(client, half_close=False) for client in idle]
    probe.check(minimum=5)
    codes = [a[:13] for a in answers]
    seen = Counter(json.loads(line)["event"] for line in hostile.process.lines if line.startswith('{"'))
    assert set(codes) <= {b"SPAMD/1.0 75 ", b"SPAMD/1.0 79 "}, (Counter(codes), seen)
    assert seen["spamc_connection_evicted"] >= 1 and not seen["spamc_connection_refused"], seen
    assert all(a.count(b"SPAMD/") == 1 for a in answers), "one answer per connection"
    assert hostile.stats()["daemon"]["spamc_connections"] <= 1


@needs_spamc
@pytest.mark.slow
def test_sigterm_answers_the_request_in_flight_and_turns_idle_ones_away(tmp_path):
    daemon = start_spamd(tmp_path, "allow_tell = true\n", train=False)
    try:
        message = make_message(Label.SPAM, 700)
        full = request("TELL", message, headers={"Message-class": "spam", "Set": "local"})
        busy = RawClient(daemon.port, greet=False, timeout=20)
        busy.send(full[:-30])
        idle = RawClient(daemon.port, greet=False, timeout=20)
        wait_until_sync(lambda: daemon.stats()["daemon"]["spamc_in_flight"] == 1)
        daemon.process.signal(signal.SIGTERM)
        daemon.process.wait_for("daemon_stopping")
        assert answer_of(idle, half_close=False) == b"SPAMD/1.0 75 spamd shutting down, try again later\r\n"
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", daemon.port), timeout=5).close()
        busy.send(full[-30:])
        assert answer_of(busy) == b"SPAMD/1.1 0 EX_OK\r\nDidSet: local\r\n\r\n"
        assert daemon.process.wait(30) == 0
        assert stats_counts(daemon.stats()) == (1, 0, 1)
    finally:
        daemon.process.kill()


@pytest.mark.asyncio
async def test_a_client_whose_bytes_are_waiting_is_not_silent():
    # What the connection cap spares: a client that has sent bytes the server has not
    # read yet (here the handler never reads), but not one that has sent nothing.
    from spamd.frontends.spamc.server import _bytes_waiting

    writers: list[asyncio.StreamWriter] = []
    arrived = asyncio.Event()

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        if len(writers) == 2:
            arrived.set()
        await asyncio.sleep(30)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    talking = socket.create_connection(("127.0.0.1", port))
    silent = socket.create_connection(("127.0.0.1", port))
    try:
        talking.sendall(b"CHECK SPAMC/1.5\r\nContent-length: 5\r\n\r\nhello")
        await asyncio.wait_for(arrived.wait(), 10)
        by_port = {w.get_extra_info("peername")[1]: w for w in writers}
        deadline = asyncio.get_running_loop().time() + 10
        while not _bytes_waiting(by_port[talking.getsockname()[1]]):
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        assert not _bytes_waiting(by_port[silent.getsockname()[1]])
    finally:
        talking.close()
        silent.close()
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()
