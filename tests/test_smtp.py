"""The SMTP path end to end: a real aiosmtpd server on 127.0.0.1, smtplib as the client, real Maildirs."""

from __future__ import annotations

import asyncio
import smtplib
import time

import pytest
from aiosmtpd.smtp import SMTP

from spamd.model.bayes import Label
from tests.daemon_helpers import (
    crlf,
    daemon_config,
    engine_of,
    files,
    make_message,
    running,
    send,
    train,
    wait_until,
    watcher_of,
)
from tests.ports import free_port

pytestmark = pytest.mark.asyncio


def port_of(daemon) -> int:
    return daemon.smtp_address[1]


@pytest.mark.parametrize("delivery_processes", [-1, 0])  # written by a delivery process (two cores), or by a thread
async def test_unscored_model_delivers_to_inbox_with_headers(tmp_path, delivery_processes):
    async with running(daemon_config(tmp_path, maildir={"delivery_processes": delivery_processes})) as daemon:
        reply = await asyncio.to_thread(send, port_of(daemon), make_message(Label.HAM, 1))
        assert reply == {}
        [delivered] = files(tmp_path / "Maildir" / "new")
        data = delivered.read_bytes()
        assert data.startswith(b"X-Spam-Status: Unsure, score=0.5000")
        assert b"\nX-Spam-Score: 0.5000\n" in data and b"\nX-Spam-Flag: NO\n" in data
        assert b"\r\n" not in data  # Maildir files are LF
        assert files(tmp_path / "Maildir" / ".Junk" / "new") == []
        assert daemon.stats()["daemon"]["scored_by_verdict"] == {"unsure": 1}


async def test_verdict_decides_the_folder(tmp_path):
    async with running(daemon_config(tmp_path)) as daemon:
        train(daemon)
        await asyncio.to_thread(send, port_of(daemon), make_message(Label.SPAM, 1))
        await asyncio.to_thread(send, port_of(daemon), make_message(Label.HAM, 1))
        [junk] = files(tmp_path / "Maildir" / ".Junk" / "new")
        [inbox] = files(tmp_path / "Maildir" / "new")
        assert junk.read_bytes().startswith(b"X-Spam-Status: Yes, score=")
        assert b"X-Spam-Flag: YES" in junk.read_bytes()
        assert inbox.read_bytes().startswith(b"X-Spam-Status: No, score=")
        # spamd's own filing into Junk is not a training event
        await watcher_of(daemon).drained()
        assert engine_of(daemon).stats()["trained_spam"] == 20


async def test_headers_from_an_earlier_run_are_replaced(tmp_path):
    async with running(daemon_config(tmp_path)) as daemon:
        forged = b"X-Spam-Status: No, forged\nX-Spam-Flag: NO\n" + make_message(Label.HAM, 2)
        await asyncio.to_thread(send, port_of(daemon), forged)
        [delivered] = files(tmp_path / "Maildir" / "new")
        assert delivered.read_bytes().count(b"X-Spam-Status:") == 1
        assert b"forged" not in delivered.read_bytes()


async def test_size_limit_answers_552(tmp_path):
    config = daemon_config(tmp_path, smtp={"max_message_bytes": 2048})
    big = make_message(Label.HAM, 1) + (b"x" * 70 + b"\n") * 60
    async with running(config) as daemon:
        # ESMTP client: refused at MAIL FROM (SIZE=) before any data is sent.
        with pytest.raises(smtplib.SMTPSenderRefused) as refused:
            await asyncio.to_thread(send, port_of(daemon), big)
        assert refused.value.smtp_code == 552

        def send_without_size() -> None:
            with smtplib.SMTP("127.0.0.1", port_of(daemon), timeout=10) as client:
                client.helo("test")
                client.sendmail("a@example.org", ["user@example.com"], crlf(big))

        with pytest.raises(smtplib.SMTPDataError) as too_much:
            await asyncio.to_thread(send_without_size)
        assert too_much.value.smtp_code == 552
        assert files(tmp_path / "Maildir" / "new") == []


async def test_recipient_limit(tmp_path):
    config = daemon_config(tmp_path, smtp={"max_recipients": 2})
    async with running(config) as daemon:
        rcpts = ["a@example.com", "b@example.com", "c@example.com"]
        refused = await asyncio.to_thread(send, port_of(daemon), make_message(Label.HAM, 1), rcpts)
        assert list(refused) == ["c@example.com"] and refused["c@example.com"][0] == 452
        assert len(files(tmp_path / "Maildir" / "new")) == 1


async def test_peer_not_allowed_is_refused_at_connect(tmp_path):
    config = daemon_config(tmp_path, smtp={"allowed_peers": ("192.0.2.1",)})
    async with running(config) as daemon:
        with pytest.raises(smtplib.SMTPConnectError) as refused:
            await asyncio.to_thread(send, port_of(daemon), make_message(Label.HAM, 1))
        assert refused.value.smtp_code == 554
        assert files(tmp_path / "Maildir" / "new") == []


async def test_disk_failure_answers_4xx_and_nothing_is_half_written(tmp_path):
    async with running(daemon_config(tmp_path)) as daemon:
        new = tmp_path / "Maildir" / "new"
        new.rmdir()
        new.write_bytes(b"")  # new/ is now a file: the rename into it fails (even as root)
        with pytest.raises(smtplib.SMTPDataError) as failed:
            await asyncio.to_thread(send, port_of(daemon), make_message(Label.HAM, 1))
        assert failed.value.smtp_code == 451
        assert files(tmp_path / "Maildir" / "tmp") == []
        assert daemon.stats()["daemon"]["recent_errors"][-1]["event"] == "smtp_delivery_failed"


async def test_own_failure_answers_451_without_internals(tmp_path):
    async with running(daemon_config(tmp_path)) as daemon:
        assert daemon.smtp is not None
        status = await daemon.smtp.handle_exception(RuntimeError("secret internals"))
        assert status.startswith("451 4.3.0") and "secret" not in status


async def test_multi_user_delivery_by_local_part(tmp_path):
    root = tmp_path / "users"
    (root / "alice" / "Maildir").mkdir(parents=True)
    (root / "bob").mkdir(parents=True)
    config = daemon_config(tmp_path / "data", maildir={"root": str(root), "fsync": False})
    async with running(config) as daemon:
        assert [m.user for m in daemon.mailboxes] == ["alice", "bob"]
        port = port_of(daemon)
        await asyncio.to_thread(send, port, make_message(Label.HAM, 1), ["bob@example.com"])
        await asyncio.to_thread(send, port, make_message(Label.HAM, 2), ["Alice+lists@example.com"])
        # Recipients who are no user here are refused at RCPT, never filed into someone else's Maildir.
        refused = await asyncio.to_thread(
            send, port, make_message(Label.HAM, 3), ["../bob@example.com", "nobody@example.com", "alice@example.com"]
        )
        assert {rcpt: code for rcpt, (code, _) in refused.items()} == {
            "../bob@example.com": 550,
            "nobody@example.com": 550,
        }
        with pytest.raises(smtplib.SMTPRecipientsRefused):
            await asyncio.to_thread(send, port, make_message(Label.HAM, 5), ["carol@example.com"])
        await asyncio.to_thread(send, port, make_message(Label.HAM, 4), ["alice@example.com", "bob@example.com"])
        alice = [p.read_bytes() for p in files(root / "alice" / "Maildir" / "new")]
        bob = [p.read_bytes() for p in files(root / "bob" / "new")]
        assert sorted(m.split(b"Message-ID: <")[1][:8] for m in alice) == [b"ham-2-0@", b"ham-3-0@", b"ham-4-0@"]
        assert sorted(m.split(b"Message-ID: <")[1][:8] for m in bob) == [b"ham-1-0@", b"ham-4-0@"]
        assert not (root / "bob" / "..").resolve().joinpath("new").exists()


async def test_one_maildir_takes_every_recipient(tmp_path):
    async with running(daemon_config(tmp_path)) as daemon:
        refused = await asyncio.to_thread(
            send, port_of(daemon), make_message(Label.HAM, 1), ["anyone@example.com", "../x@y"]
        )
        assert refused == {}
        assert len(files(tmp_path / "Maildir" / "new")) == 1


# ---------------------------------------------------------------- relay mode


class Sink:
    """The next hop: a plain aiosmtpd server that keeps what it accepts (or refuses it)."""

    def __init__(self, answer: str = "250 OK"):
        self.answer = answer
        self.received: list[tuple[str, list[str], bytes]] = []

    async def handle_DATA(self, server, session, envelope):
        if self.answer.startswith("250"):
            self.received.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.original_content))
        return self.answer


async def start_sink(sink: Sink, port: int = 0) -> asyncio.Server:
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: SMTP(sink, hostname="nexthop", loop=loop), "127.0.0.1", port)


async def test_relay_to_next_hop(tmp_path):
    sink = Sink()
    server = await start_sink(sink)
    next_port = server.sockets[0].getsockname()[1]
    config = daemon_config(tmp_path, smtp={"mode": "relay", "next_hop_port": next_port})
    try:
        async with running(config) as daemon:
            train(daemon)
            rcpts = ["x@example.com", "y@example.com"]
            await asyncio.to_thread(send, port_of(daemon), make_message(Label.SPAM, 1), rcpts, "from@example.org")
            [(sender, got_rcpts, data)] = sink.received
            assert sender == "from@example.org" and got_rcpts == rcpts
            assert data.startswith(b"X-Spam-Status: Yes, score=")
            assert files(tmp_path / "Maildir" / "new") == files(tmp_path / "Maildir" / ".Junk" / "new") == []
    finally:
        server.close()
        await server.wait_closed()


async def test_next_hop_down_answers_4xx_then_retry_succeeds(tmp_path):
    next_port = free_port()
    config = daemon_config(tmp_path, smtp={"mode": "relay", "next_hop_port": next_port, "next_hop_timeout_s": 5.0})
    message = make_message(Label.HAM, 7)
    async with running(config) as daemon:
        with pytest.raises(smtplib.SMTPDataError) as failed:
            await asyncio.to_thread(send, port_of(daemon), message)
        assert failed.value.smtp_code == 451  # the sender keeps the message and retries
        assert daemon.stats()["daemon"]["recent_errors"][-1]["event"] == "smtp_relay_failed"
        sink = Sink()
        server = await start_sink(sink, next_port)
        try:
            await asyncio.to_thread(send, port_of(daemon), message)
            assert len(sink.received) == 1 and message.split(b"\n")[-2] in sink.received[0][2]
        finally:
            server.close()
            await server.wait_closed()


async def test_next_hop_permanent_rejection_is_passed_on(tmp_path):
    sink = Sink(answer="554 5.7.1 policy says no")
    server = await start_sink(sink)
    config = daemon_config(tmp_path, smtp={"mode": "relay", "next_hop_port": server.sockets[0].getsockname()[1]})
    try:
        async with running(config) as daemon:
            with pytest.raises(smtplib.SMTPDataError) as refused:
                await asyncio.to_thread(send, port_of(daemon), make_message(Label.HAM, 1))
            assert refused.value.smtp_code == 554
    finally:
        server.close()
        await server.wait_closed()


async def test_config_limits_apply_to_new_sessions_after_reload(tmp_path):
    config_file = tmp_path / "spamd.toml"
    config_file.write_text("[smtp]\nport = 0\nmax_recipients = 1\n[model]\nhash_bits = 16\n[maildir]\nfsync = false\n")
    from spamd.daemon import Daemon

    daemon = Daemon(config_file, data_dir=tmp_path / "data", install_signals=False)
    await daemon.startup()
    try:
        port = port_of(daemon)
        refused = await asyncio.to_thread(send, port, make_message(Label.HAM, 1), ["a@x.org", "b@x.org"])
        assert list(refused) == ["b@x.org"]
        config_file.write_text(
            "[smtp]\nport = 2525\nmax_recipients = 5\n[model]\nhash_bits = 16\nspam_threshold = 0.9\n"
        )
        changes = await daemon.reload()
        assert changes["applied"]["smtp.max_recipients"] == [1, 5]
        assert changes["applied"]["model.spam_threshold"][1] == 0.9
        assert changes["applied"]["maildir.fsync"] == [False, True]
        assert changes["needs_restart"] == ["smtp.port"]
        assert daemon.config.smtp.port == 0 and engine_of(daemon).model.config.spam_threshold == 0.9
        refused = await asyncio.to_thread(send, port, make_message(Label.HAM, 2), ["a@x.org", "b@x.org"])
        assert refused == {}
        await wait_until(lambda: daemon.stats()["daemon"]["smtp_sessions"] == 0, timeout=5)
    finally:
        daemon.request_exit()
        await daemon.shutdown()


async def test_dot_stuffing_and_tiny_messages_survive_the_data_reader(tmp_path):
    async with running(daemon_config(tmp_path)) as daemon:
        body = b"Subject: dots\n\n.\n..\n.leading dot\nend\n"
        await asyncio.to_thread(send, port_of(daemon), body)
        await asyncio.to_thread(send, port_of(daemon), b"Subject: one line")

        def raw_data(payload: bytes) -> tuple[int, bytes]:
            with smtplib.SMTP("127.0.0.1", port_of(daemon), timeout=10) as client:
                client.ehlo("test")
                client.mail("a@example.org")
                client.rcpt("user@example.com")
                client.putcmd("data")
                assert client.getreply()[0] == 354
                client.send(payload)
                return client.getreply()

        assert (await asyncio.to_thread(raw_data, b".\r\n"))[0] == 250  # empty message
        # Several 64 KiB reads; a dot line that lands on a read boundary is still unstuffed.
        big = b"Subject: big\r\n\r\n" + b"".join(b"..%05d " % i + b"y" * 90 + b"\r\n" for i in range(2500))
        assert (await asyncio.to_thread(raw_data, big + b".\r\n"))[0] == 250
        bodies = sorted(p.read_bytes().split(b"X-Spam-Flag: NO\n", 1)[1] for p in files(tmp_path / "Maildir" / "new"))
        assert b"Subject: dots\n\n.\n..\n.leading dot\nend\n" in bodies
        assert b"Subject: one line\n" in bodies and b"" in bodies
        [big_body] = [b for b in bodies if b.startswith(b"Subject: big")]
        assert big_body == big.replace(b"\r\n..", b"\r\n.").replace(b"\r\n", b"\n")


async def test_idle_session_is_closed_after_the_idle_timeout_and_a_busy_one_is_not(tmp_path):
    # One timer per session that re-arms itself (FilterSMTP._reset_timeout): commands
    # spread over four idle timeouts keep the session; silence ends it one timeout later.
    # 2 s against a command every 0.25 s: a loaded machine may stall this test's loop for a
    # second, which must not end a busy session; the upper bound of the wait is the deadline's.
    config = daemon_config(tmp_path, smtp={"idle_timeout_s": 2.0, "data_timeout_s": 5.0})
    async with running(config) as daemon:
        client = await asyncio.to_thread(smtplib.SMTP, "127.0.0.1", port_of(daemon), timeout=10)
        try:
            await asyncio.to_thread(client.ehlo, "busy")
            for _ in range(32):
                await asyncio.sleep(0.25)
                assert (await asyncio.to_thread(client.noop))[0] == 250
            silent = time.monotonic()
            await wait_until(lambda: daemon.stats()["daemon"]["smtp_sessions"] == 0, timeout=10)
            assert time.monotonic() - silent >= 1.9
            # Told why before the hang-up, as Postfix does: smtplib reads that 421 as the reply.
            code, text = await asyncio.to_thread(client.noop)
            assert (code, text[:5]) == (421, b"4.4.2")
            with pytest.raises(smtplib.SMTPServerDisconnected):
                await asyncio.to_thread(client.noop)
        finally:
            client.close()
