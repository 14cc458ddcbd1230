"""The control socket: ControlServer on the test's loop around a real Engine, real clients.

`StandInDaemon` is not a mock of spamd code: it is the small surface spamd.daemon
offers the server (engine, snapshot, reload, stats) over the same real Engine.
"""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import pytest_asyncio
from hypothesis import given, settings
from hypothesis import strategies as st

from spamd.config import load_config
from spamd.engine.engine import Engine
from spamd.frontends.control import ControlServer, op_classify, op_explain
from spamd.frontends.control_protocol import (
    MAX_FRAME_BYTES,
    ControlClient,
    ControlError,
    DaemonNotRunning,
    encode_frame,
)
from spamd.mail.message import looks_like_message
from spamd.model.bayes import Label
from tests.cli_helpers import HAM, SPAM, classify_inputs, run_spamctl_async, write_maildir


class StandInDaemon:
    """What spamd.daemon gives the control server, around a real Engine."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.reloads = 0

    async def snapshot(self) -> Path:
        encoded, seq = self.engine.begin_snapshot()
        return await asyncio.to_thread(self.engine.finish_snapshot, encoded, seq)

    async def reload(self) -> dict[str, Any]:
        self.reloads += 1
        return {"reloaded": True}

    def stats(self) -> dict[str, Any]:
        daemon: dict[str, Any] = {
            "pid": os.getpid(),
            "throughput_msgs_per_s": 0.0,
            "latency_ms_p50": None,
            "recent_errors": [],
        }
        return {**self.engine.stats(), "daemon": daemon}


@pytest_asyncio.fixture
async def served(home: Path) -> AsyncIterator[tuple[ControlServer, StandInDaemon]]:
    config = load_config(home / "spamd.toml", data_dir=home / "data")
    engine = Engine.open(config, durable=False)
    daemon = StandInDaemon(engine)
    server = ControlServer(config.control_socket, daemon)
    await server.start()
    try:
        yield server, daemon
    finally:
        await server.close()
        engine.close()


async def ask(path: Path, command: str, **args: Any) -> Any:
    """One request from a real (blocking) client, off the loop that serves it."""

    def call() -> Any:
        with ControlClient(path, timeout=30) as client:
            return client.request(command, **args)

    return await asyncio.to_thread(call)


@pytest.mark.asyncio
async def test_socket_is_owner_only_and_removed_on_close(home: Path, served: tuple[ControlServer, Any]) -> None:
    server, _ = served
    mode = os.stat(server.path).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    await server.close()
    assert not server.path.exists()


@pytest.mark.asyncio
async def test_requests_run_on_the_engine(served: tuple[ControlServer, StandInDaemon]) -> None:
    server, daemon = served
    assert (await ask(server.path, "classify", raw=SPAM[0]))["verdict"] == "unsure"
    trained = await ask(server.path, "train", messages=SPAM, label="spam")
    assert trained["outcomes"] == ["learned"] * len(SPAM)
    await ask(server.path, "train", messages=HAM, label="ham")
    again = await ask(server.path, "train", messages=[SPAM[0], b"", HAM[0]], label="spam")
    assert again["outcomes"] == ["skipped_repeat", "not_a_message", "corrected"]
    stats = await ask(server.path, "stats")
    assert stats["mode"] == "daemon" and stats["trained_spam"] == len(SPAM) + 1
    assert (await ask(server.path, "classify", raw=SPAM[1]))["verdict"] == "spam"
    # spamctl classify of many files with a daemon: one request per batch, the same answers.
    many = (await ask(server.path, "classify_many", messages=[SPAM[1], HAM[1], b""]))["results"]
    assert many == [await ask(server.path, "classify", raw=raw) for raw in (SPAM[1], HAM[1], b"")]
    snapshot = Path((await ask(server.path, "snapshot"))["path"])
    assert (
        await asyncio.to_thread(snapshot.exists) and daemon.engine.store.last_snapshot_seq == daemon.engine.trainer.seq
    )
    assert await ask(server.path, "reload") == {"reloaded": True} and daemon.reloads == 1


@pytest.mark.asyncio
async def test_refusals_are_one_line_errors_and_the_connection_survives(
    served: tuple[ControlServer, StandInDaemon],
) -> None:
    server, _ = served

    def conversation() -> list[str]:
        errors = []
        with ControlClient(server.path) as client:
            for command, args in (
                ("no_such_command", {}),
                ("classify", {"raw": "a string, not bytes"}),
                ("train", {"messages": [SPAM[0]], "label": "maybe"}),
                ("export_chunk", {"offset": 0}),
                ("import_commit", {}),
            ):
                with pytest.raises(ControlError) as refused:
                    client.request(command, **args)
                errors.append(str(refused.value))
            assert client.request("ping")["pid"] == os.getpid()
        return errors

    errors = await asyncio.to_thread(conversation)
    assert all(e and "\n" not in e for e in errors)
    assert "unknown command" in errors[0] and "'spam' or 'ham'" in errors[2]


@pytest.mark.asyncio
async def test_malformed_and_oversized_frames(served: tuple[ControlServer, Any]) -> None:
    server, _ = served

    def raw_exchange(payload: bytes) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(str(server.path))
            sock.sendall(payload)
            length = struct.unpack(">I", sock.recv(4, socket.MSG_WAITALL))[0]
            return msgpack.unpackb(sock.recv(length, socket.MSG_WAITALL), raw=False)

    garbage = b"\xc1\xc1\xc1"
    reply = await asyncio.to_thread(raw_exchange, struct.pack(">I", len(garbage)) + garbage)
    assert reply["ok"] is False and "malformed" in reply["error"]
    reply = await asyncio.to_thread(raw_exchange, struct.pack(">I", MAX_FRAME_BYTES + 1))
    assert reply["ok"] is False and "exceeds" in reply["error"]
    # The server is still answering others.
    assert (await ask(server.path, "ping"))["pid"] == os.getpid()


def test_client_refuses_to_send_an_oversized_frame_and_reports_no_daemon(home: Path) -> None:
    with pytest.raises(DaemonNotRunning):
        ControlClient(home / "nothing.sock").connect()
    with pytest.raises(ControlError, match="exceeds"):
        ControlClient(home / "nothing.sock").request("classify", raw=b"x" * (MAX_FRAME_BYTES + 1))


@pytest.mark.asyncio
async def test_a_stale_socket_is_replaced_but_a_live_one_is_not(home: Path) -> None:
    config = load_config(home / "spamd.toml", data_dir=home / "data")
    (home / "data").mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(config.control_socket))  # bound, never listening: a killed daemon's leftover
    stale.close()
    engine = Engine.open(config, durable=False)
    first = ControlServer(config.control_socket, StandInDaemon(engine))
    try:
        await first.start()
        second = ControlServer(config.control_socket, StandInDaemon(engine))
        with pytest.raises(ControlError, match="another spamd is answering"):
            await second.start()
        assert (await ask(config.control_socket, "ping"))["pid"] == os.getpid()
    finally:
        await first.close()
        engine.close()


@pytest.mark.asyncio
async def test_unsafe_socket_places_are_refused(home: Path) -> None:
    shared = home / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    engine = Engine.open(load_config(home / "spamd.toml", data_dir=home / "data"), durable=False)
    try:
        with pytest.raises(ControlError, match="writable by others"):
            await ControlServer(shared / "control.sock", StandInDaemon(engine)).start()
        (home / "file.sock").write_text("not a socket")
        with pytest.raises(ControlError, match="not a socket"):
            await ControlServer(home / "file.sock", StandInDaemon(engine)).start()
        with pytest.raises(ControlError, match="shorter path"):
            await ControlServer(home / ("x" * 120), StandInDaemon(engine)).start()
    finally:
        engine.close()


@pytest.mark.asyncio
async def test_export_and_import_through_the_socket(home: Path, served: tuple[ControlServer, StandInDaemon]) -> None:
    server, daemon = served
    await ask(server.path, "train", messages=SPAM, label="spam")
    await ask(server.path, "train", messages=HAM, label="ham")

    def export() -> bytes:
        with ControlClient(server.path) as client:
            return client.export_bytes()

    data = await asyncio.to_thread(export)
    await ask(server.path, "untrain", messages=SPAM)
    assert (await ask(server.path, "stats"))["trained_spam"] == 0
    seq_before = daemon.engine.trainer.seq

    def restore() -> dict[str, Any]:
        with ControlClient(server.path) as client:
            return client.import_bytes(data, "backup.spamd")

    result = await asyncio.to_thread(restore)
    assert (result["trained_spam"], result["trained_ham"]) == (len(SPAM), len(HAM))
    assert result["seq"] > seq_before and daemon.engine.trainer.seq == result["seq"]
    assert (await ask(server.path, "train", messages=SPAM, label="spam"))["outcomes"] == ["skipped_repeat"] * 3


# ---------------------------------------------------------------- spamctl against a serving socket


@pytest.mark.asyncio
async def test_spamctl_uses_the_daemon_when_one_answers(
    home: Path, served: tuple[ControlServer, StandInDaemon]
) -> None:
    server, daemon = served
    base: list[str | Path] = ["--config", home / "spamd.toml", "--data-dir", home / "data"]
    junk = write_maildir(home / "Junk", SPAM)
    trained = await run_spamctl_async(*base, "train", "--spam", junk, "--json")
    assert trained.returncode == 0, trained.stderr
    assert trained.json()["mode"] == "daemon" and trained.json()["learned"] == len(SPAM)
    assert daemon.engine.stats()["trained_spam"] == len(SPAM)  # the daemon's engine learned it
    again = await run_spamctl_async(*base, "train", "--spam", junk, "--json")
    assert again.json()["skipped_repeat"] == len(SPAM)
    stats = await run_spamctl_async(*base, "stats")
    assert stats.returncode == 0 and "spamd running" in stats.stdout
    assert "spamctl" in stats.stdout  # training events by source
    classified = await run_spamctl_async(*base, "classify", "-", "--json", input=SPAM[0])
    assert classified.json()["verdict"] in ("unsure", "spam")
    reloaded = await run_spamctl_async(*base, "reload")
    assert reloaded.returncode == 0 and daemon.reloads == 1
    exported = await run_spamctl_async(*base, "export", home / "backup.spamd")
    assert exported.returncode == 0, exported.stderr
    imported = await run_spamctl_async(*base, "import", home / "backup.spamd", "--json")
    assert imported.returncode == 0 and imported.json()["mode"] == "daemon"


@pytest.mark.asyncio
async def test_spamctl_classify_of_many_through_the_daemon(
    home: Path, served: tuple[ControlServer, StandInDaemon]
) -> None:
    server, _ = served
    paths, names, big = classify_inputs(home)
    result = await run_spamctl_async("--config", home / "spamd.toml", "--data-dir", home / "data", "classify", *paths)
    assert result.returncode == 1 and f"{big}: too large" in result.stderr  # never sent: over a control frame
    lines = [line.rsplit(" ", 3) for line in result.stdout.splitlines()]
    assert [line[0] for line in lines] == names
    for line, raw in zip(lines, [SPAM[0], SPAM[1], HAM[1], HAM[0]], strict=True):
        single = await ask(server.path, "classify", raw=raw)
        assert line[1:] == [single["verdict"], f"{single['probability']:.4f}", f"{single['score']:+.4f}"]


@pytest.mark.parametrize(
    "raw, expected",
    [
        (HAM[0], True),
        (b"From nobody@example  Fri Apr 13 14:36:03 2007\nReturn-Path: <a@b>\n\nbody", True),
        (b"", False),
        (b"\n\n", False),
        (b"\x89PNG\r\n\x1a\nKey: value", False),
        (b"just some text\nSubject: later\n", False),
    ],
)
def test_what_training_accepts_as_mail(raw: bytes, expected: bool) -> None:
    assert looks_like_message(raw) is expected


def test_classify_and_explain_answer_any_bytes(home: Path) -> None:
    engine = Engine.open(load_config(home / "spamd.toml", data_dir=home / "data"), durable=False)
    try:
        engine.train(SPAM[0], Label.SPAM, "test")
        engine.train(HAM[0], Label.HAM, "test")

        @settings(max_examples=150, deadline=None)
        @given(st.binary(max_size=4096))
        def check(raw: bytes) -> None:
            verdict = op_classify(engine, {"raw": raw})
            assert verdict["verdict"] in ("ham", "unsure", "spam") and 0.0 <= verdict["probability"] <= 1.0
            explained = op_explain(engine, {"raw": raw, "limit": 5})
            encode_frame({"ok": True, "result": explained})  # every token survives the wire

        check()
        assert sum(engine.scored.values()) == 0  # questions from spamctl are not mail scored
    finally:
        engine.close()
