"""The LMTP listener against raw sockets: one reply per recipient, hostile clients, limits, and per-user filing.

The daemon runs on the test's loop with real Maildirs under `[maildir] root` (no next
hop: spamd files each user's copy itself), spoken to byte by byte over a real socket,
as Postfix's LMTP client or a hostile one would. Ten users of one list who disagree
about it each get their own copy of one message filed their own way (the users' moves
are renames in the Maildirs, as Dovecot makes them).
"""

from __future__ import annotations

import asyncio
import socket
from functools import partial
from pathlib import Path

import pytest

from spamd.cli.output import format_stats
from spamd.config import Config
from spamd.model.bayes import Label
from tests.daemon_helpers import (
    crlf,
    daemon_config,
    engine_of,
    folder_files,
    imap_move,
    list_digest,
    make_message,
    running,
    train,
    wait_until,
)
from tests.ports import free_port

pytestmark = pytest.mark.asyncio

JUNK = ".Junk"


class Wire:
    """A raw LMTP client: bytes out as given, reply lines in as they come."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        self.file = self.sock.makefile("rb")

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def line(self) -> bytes:
        return self.file.readline()

    def replies(self, n: int) -> list[bytes]:
        """The next `n` replies, each its last line (a multi-line reply's "250-" lines skipped)."""
        found: list[bytes] = []
        while len(found) < n:
            line = self.file.readline()
            if not line:
                raise ConnectionError(f"closed after {found}")
            if line[3:4] != b"-":
                found.append(line.rstrip(b"\r\n"))
        return found

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def users_config(tmp_path: Path, users: list[str], **lmtp: object) -> Config:
    root = tmp_path / "users"
    for user in users:
        (root / user / "Maildir").mkdir(parents=True)
    return daemon_config(
        tmp_path / "data", lmtp={"listen": "127.0.0.1:0", **lmtp}, maildir={"root": str(root), "fsync": False}
    )


def maildir(tmp_path: Path, user: str) -> Path:
    return tmp_path / "users" / user / "Maildir"


def transaction(recipients: list[str], data: bytes, sender: str = "sender@example.org") -> bytes:
    """LHLO to the end of DATA in one write, as a pipelining client sends it."""
    head = [b"LHLO client.example.org", f"MAIL FROM:<{sender}>".encode()]
    head += [f"RCPT TO:<{r}>".encode() for r in recipients]
    return b"\r\n".join([*head, b"DATA", b""]) + crlf(data) + b".\r\n"


def lmtp_port(daemon) -> int:
    assert daemon.lmtp is not None and daemon.lmtp.address is not None
    return daemon.lmtp.address[1]


async def test_one_reply_per_accepted_recipient_in_order_and_one_scoring_per_user(tmp_path):
    async with running(users_config(tmp_path, ["alice", "bob"])) as daemon:
        train(daemon)
        before = sum(engine_of(daemon).scored.values())
        wire = await asyncio.to_thread(Wire, lmtp_port(daemon))
        rcpts = ["alice@example.com", "nobody@example.com", "bob@example.com", "alice+lists@example.com"]
        await asyncio.to_thread(wire.send, transaction(rcpts, make_message(Label.SPAM, 1)))
        replies = await asyncio.to_thread(wire.replies, 1 + 1 + 1 + 4 + 1 + 3)
        wire.close()
        assert replies[0].startswith(b"220") and replies[1].startswith(b"250 ")  # greeting, LHLO
        assert replies[2:7] == [
            b"250 OK",
            b"250 2.1.5 OK",
            b"550 5.1.1 No such user here",
            b"250 2.1.5 OK",
            b"250 2.1.5 OK",
        ]
        assert replies[7].startswith(b"354")
        # Three accepted RCPTs, three replies in their order (alice's two addresses are one Maildir, one copy).
        assert replies[8:] == [
            b"250 2.0.0 <alice@example.com> delivered to .Junk",
            b"250 2.0.0 <bob@example.com> delivered to .Junk",
            b"250 2.0.0 <alice+lists@example.com> delivered to .Junk",
        ]
        assert sum(engine_of(daemon).scored.values()) - before == 2  # alice and bob: one scoring each
        assert (
            len(folder_files(maildir(tmp_path, "alice"), JUNK))
            == len(folder_files(maildir(tmp_path, "bob"), JUNK))
            == 1
        )
        assert daemon.daemon_stats()["lmtp_recipients"] == {"delivered": 3, "deferred": 0, "refused": 0}
        shown = format_stats(daemon.stats() | {"mode": "daemon"})  # what `spamctl stats` prints
        assert "recipients 3 delivered, 0 deferred, 0 refused" in shown, shown


async def test_thousands_of_pipelined_recipients_get_452_past_the_cap_and_one_copy(tmp_path):
    async with running(users_config(tmp_path, ["alice"], max_recipients=50)) as daemon:
        wire = await asyncio.to_thread(Wire, lmtp_port(daemon))
        await asyncio.to_thread(
            wire.send, transaction(["alice@example.com"] * 5000, make_message(Label.HAM, 2)) + b"QUIT\r\n"
        )
        replies = await asyncio.to_thread(wire.replies, 3 + 5000 + 1 + 50 + 1)
        wire.close()
        rcpt = replies[3:5003]
        assert rcpt[:50] == [b"250 2.1.5 OK"] * 50 and set(rcpt[50:]) == {b"452 4.5.3 Too many recipients"}
        assert replies[5003].startswith(b"354")
        assert all(r.startswith(b"250 2.0.0 <alice@example.com>") for r in replies[5004:5054])
        assert replies[-1].startswith(b"221")
        assert len(folder_files(maildir(tmp_path, "alice"))) + len(folder_files(maildir(tmp_path, "alice"), JUNK)) == 1


async def test_garbage_is_answered_then_cut_off_and_the_next_client_is_served(tmp_path):
    async with running(users_config(tmp_path, ["alice"])) as daemon:
        port = lmtp_port(daemon)
        wire = await asyncio.to_thread(Wire, port)
        assert (await asyncio.to_thread(wire.line)).startswith(b"220")
        garbage = b"\x00\xff\xfe junk\r\nHELO x\r\nEHLO x\r\nMAIL FROM:<a@b>\r\n" + b"\x16\x03\x01 binary\r\n" * 20
        await asyncio.to_thread(wire.send, garbage)
        replies = []
        while line := await asyncio.to_thread(wire.line):
            replies.append(line)
        wire.close()
        assert b'500 Error: command "HELO" not recognized\r\n' in replies
        assert b'500 Error: command "EHLO" not recognized\r\n' in replies
        assert any(r.startswith(b"503") for r in replies)  # MAIL before LHLO
        assert replies[-1].startswith(b"502 5.5.1 Too many unrecognized commands")  # then the connection closed
        wire = await asyncio.to_thread(Wire, port)
        await asyncio.to_thread(wire.send, transaction(["alice@example.com"], make_message(Label.HAM, 3)))
        assert (await asyncio.to_thread(wire.replies, 6))[-1].startswith(b"250 2.0.0 <alice@example.com>")
        wire.close()


async def test_abandoned_data_times_out_with_421_and_delivers_nothing(tmp_path):
    async with running(users_config(tmp_path, ["alice"], data_timeout_s=1.0)) as daemon:
        wire = await asyncio.to_thread(Wire, lmtp_port(daemon))
        whole = transaction(["alice@example.com"], make_message(Label.HAM, 4))
        await asyncio.to_thread(wire.send, whole[: len(whole) - 40])  # DATA begun, never ended
        replies = await asyncio.to_thread(wire.replies, 6)
        wire.close()
        assert replies[4].startswith(b"354") and replies[5].startswith(b"421 4.4.2"), replies
        await wait_until(lambda: daemon.lmtp.in_flight == 0)
        assert folder_files(maildir(tmp_path, "alice")) == []


async def test_a_message_over_the_size_limit_is_refused_for_each_recipient_and_the_session_goes_on(tmp_path):
    async with running(users_config(tmp_path, ["alice", "bob"], max_message_bytes=4096)) as daemon:
        wire = await asyncio.to_thread(Wire, lmtp_port(daemon))
        big = make_message(Label.HAM, 5) + (b"x" * 80 + b"\n") * 200  # 16 KiB
        await asyncio.to_thread(wire.send, transaction(["alice@example.com", "bob@example.com"], big))
        replies = await asyncio.to_thread(wire.replies, 2 + 3 + 1 + 2)
        assert replies[-2:] == [b"552 5.3.4 Error: Too much mail data"] * 2
        small = b"\r\n".join([b"MAIL FROM:<s@example.org>", b"RCPT TO:<bob@example.com>", b"DATA", b""])
        await asyncio.to_thread(wire.send, small + crlf(make_message(Label.HAM, 6)) + b".\r\n")
        assert (await asyncio.to_thread(wire.replies, 4))[-1].startswith(b"250 2.0.0 <bob@example.com>")
        wire.close()
        assert folder_files(maildir(tmp_path, "alice")) == [] and len(folder_files(maildir(tmp_path, "bob"))) == 1


async def test_a_peer_not_allowed_is_refused_at_connect(tmp_path):
    async with running(users_config(tmp_path, ["alice"], allowed_peers=["192.0.2.1"])) as daemon:
        wire = await asyncio.to_thread(Wire, lmtp_port(daemon))
        assert (await asyncio.to_thread(wire.line)).startswith(b"554 5.7.1")
        assert await asyncio.to_thread(wire.line) == b""
        wire.close()
        assert daemon.metrics.sessions_refused["lmtp"] == 1


async def test_a_next_hop_that_is_down_defers_every_recipient(tmp_path):
    config = users_config(tmp_path, ["alice", "bob"], next_hop=f"127.0.0.1:{free_port()}", next_hop_timeout_s=5.0)
    async with running(config) as daemon:
        wire = await asyncio.to_thread(Wire, lmtp_port(daemon))
        await asyncio.to_thread(
            wire.send, transaction(["alice@example.com", "bob@example.com"], make_message(Label.HAM, 7))
        )
        replies = await asyncio.to_thread(wire.replies, 8)
        wire.close()
        assert replies[-2:] == [b"451 4.4.1 Next hop unavailable, try again later"] * 2
        assert daemon.daemon_stats()["lmtp_recipients"] == {"delivered": 0, "deferred": 2, "refused": 0}
        assert folder_files(maildir(tmp_path, "alice")) == []


async def test_ten_users_who_disagree_about_a_list_each_get_one_message_filed_their_way(tmp_path):
    users = [f"reader{i}" for i in range(10)]
    wants_junk = {user: i < 5 for i, user in enumerate(users)}  # five left the list, five read it
    async with running(users_config(tmp_path, users)) as daemon:
        train(daemon)
        for user in users:  # each user's own history of both classes
            for i in range(3):
                for label in (Label.SPAM, Label.HAM):
                    engine_of(daemon).train(make_message(label, i, seed=len(user)), label, "test", user_name=user)
        port = lmtp_port(daemon)
        in_a_row = 0
        for n in range(15):
            before = {u: {p.name.split(":")[0] for p in everything(maildir(tmp_path, u))} for u in users}
            wire = await asyncio.to_thread(Wire, port)
            recipients = [f"{u}@example.com" for u in users]
            await asyncio.to_thread(
                wire.send, transaction(recipients, list_digest(n, "readers@example.com"), "list@news.example.net")
            )
            replies = await asyncio.to_thread(wire.replies, 3 + 10 + 1 + 10)
            wire.close()
            assert all(r.startswith(b"250 2.0.0") for r in replies[-10:]), replies[-10:]
            wrong = []
            for user in users:
                [path] = [p for p in everything(maildir(tmp_path, user)) if p.name.split(":")[0] not in before[user]]
                if (path.parent.parent.name == JUNK) != wants_junk[user]:
                    wrong.append((user, path))
            if not wrong:
                in_a_row += 1
                if in_a_row == 2:
                    break
                continue
            in_a_row = 0
            expected = sum(engine_of(daemon).trainings.values()) + len(wrong)
            for user, path in wrong:  # each corrects their own copy
                imap_move(path, maildir(tmp_path, user), JUNK if wants_junk[user] else "")
            await wait_until(partial(trained_at_least, daemon, expected))
        assert in_a_row == 2, (n, wrong)


def trained_at_least(daemon, count: int) -> bool:
    return sum(engine_of(daemon).trainings.values()) >= count


def everything(root: Path) -> list[Path]:
    return folder_files(root) + folder_files(root, JUNK)
