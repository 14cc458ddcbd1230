"""The control socket: spamctl's requests to the running daemon, and the operations they run.

The wire format and spamctl's client are in spamd.frontends.control_protocol. Messages
travel as bytes inside requests, never as paths: the daemon opens nothing a peer names.

The socket file is owner-only (0600, chmod between bind and listen, before
anyone can connect), its directory must not be writable by others, and peers
running as another user (root aside) are refused by SO_PEERCRED. A socket file
left by a dead daemon is replaced; one a live daemon answers on is never.

The operations on an Engine (classify, explain, train, untrain) are defined
here once and run by both transports: the daemon's server, and spamctl's
offline mode on an Engine it opened itself. This module does not parse
command lines or print; spamd.cli does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import struct
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import structlog

from spamd import __version__
from spamd.engine.scoring import explanation
from spamd.errors import SpamdError, StoreUnavailableError
from spamd.frontends.control_protocol import (
    _HEADER,
    _MAX_SOCKET_PATH,
    CHUNK_BYTES,
    DEFAULT_EXPLAIN_LIMIT,
    MAX_FRAME_BYTES,
    MAX_IMPORT_BYTES,
    NOT_A_MESSAGE,
    TRAIN_SOURCE,
    ControlError,
    _mib,
    decode_frame,
    encode_frame,
    user_columns,
)
from spamd.mail.message import looks_like_message
from spamd.model.bayes import Label, Score
from spamd.people.users import check_user_name

log = structlog.get_logger()

# ---------------------------------------------------------------- operations on an Engine


class EngineLike(Protocol):
    """What the operations need: spamd.engine.engine.Engine."""

    classifier: Any
    config: Any

    def explain(self, raw: bytes, limit: int = 20, user_name: str | None = None) -> Any: ...
    def sender_standing(self, raw: bytes, user_name: str | None = None) -> dict[str, Any]: ...
    def train(self, raw: bytes, label: Label, source: str, user: bool = True, user_name: str | None = None) -> Any: ...
    def untrain(self, raw: bytes, source: str, user_name: str | None = None) -> Any: ...


def _raw(args: dict[str, Any], name: str = "raw") -> bytes:
    value = args.get(name)
    if not isinstance(value, bytes):
        raise ControlError(f"request argument {name!r} must be the message as bytes")
    return value


def _messages(args: dict[str, Any]) -> list[bytes]:
    value = args.get("messages")
    if not isinstance(value, list) or not all(isinstance(m, bytes) for m in value):
        raise ControlError("request argument 'messages' must be a list of messages as bytes")
    return value


def _user(args: dict[str, Any]) -> str | None:
    """The request's user (spamctl --user), checked; None: the shared model alone."""
    value = args.get("user")
    return None if value is None else check_user_name(value, "--user")


def op_classify(engine: EngineLike, args: dict[str, Any]) -> dict[str, Any]:
    # Through the classifier, not Engine.classify: a question from spamctl is not mail
    # scored, and must not show up in the scored-by-verdict counters.
    classifier = engine.classifier
    return score_fields(classifier.score(classifier.analyze(_raw(args)), _user(args)))


def score_fields(score: Score) -> dict[str, Any]:
    """A score as `classify` answers it."""
    return {"verdict": score.verdict.value, "score": score.log_odds, "probability": score.probability}


def op_classify_many(engine: EngineLike, args: dict[str, Any]) -> dict[str, Any]:
    """`op_classify` of each message of a batch (`spamctl classify` of many files), analyzed together."""
    classifier, user = engine.classifier, _user(args)
    return {"results": [score_fields(score) for score in classifier.scores_many(_messages(args), user)]}


def op_explain(engine: EngineLike, args: dict[str, Any]) -> dict[str, Any]:
    limit = args.get("limit", DEFAULT_EXPLAIN_LIMIT)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ControlError("request argument 'limit' must be a positive integer")
    return explanation(engine, _raw(args), limit, _user(args), senders=True)


def _train_many(messages: list[bytes], apply: Callable[[bytes], Any]) -> dict[str, Any]:
    """Outcomes one per message, in order; a failure stops the batch and is reported with what was done."""
    outcomes: list[str] = []
    for raw in messages:
        if not looks_like_message(raw):
            outcomes.append(NOT_A_MESSAGE)
            continue
        try:
            outcomes.append(apply(raw).value)
        except SpamdError as e:  # e.g. the journal cannot be written: nothing more is learned
            # "temporary": the shared store (Redis) is down; spamctl exits 75 (EX_TEMPFAIL).
            return {"outcomes": outcomes, "error": str(e), "temporary": isinstance(e, StoreUnavailableError)}
    return {"outcomes": outcomes}


def op_train(engine: EngineLike, args: dict[str, Any]) -> dict[str, Any]:
    try:
        label = Label.parse(str(args.get("label")))
    except KeyError:
        raise ControlError("request argument 'label' must be 'spam' or 'ham'") from None
    user = _user(args)
    return _train_many(_messages(args), lambda raw: engine.train(raw, label, TRAIN_SOURCE, user_name=user))


def op_untrain(engine: EngineLike, args: dict[str, Any]) -> dict[str, Any]:
    user = _user(args)
    return _train_many(_messages(args), lambda raw: engine.untrain(raw, TRAIN_SOURCE, user_name=user))


def op_users(engine: EngineLike, args: dict[str, Any]) -> dict[str, Any]:
    """Each user with a layer: trainings, tokens, bytes, senders their moves turned (`spamctl users`), a list a
    column (USER_COLUMNS; user_rows makes them a dict a user); reads only."""
    users = engine.users  # type: ignore[attr-defined]
    if users is None:
        return {"users": user_columns([]), "per_user": False}
    senders = engine.senders  # type: ignore[attr-defined]
    listing = getattr(users, "listing", None)
    if listing is not None:  # Redis: one read of every user's summary line (spamd.store.redis.listing)
        columns = listing(senders.moves, senders.share, memory=bool(args.get("memory")))
    else:
        turned = senders.summary()
        none = {"senders_to_junk": 0, "senders_to_inbox": 0}
        rows = [{**row, **turned.get(row["user"], none)} for row in users.summary()]
        # Users whose moves turned senders but who have no token layer ([users] token_moves off) are listed too.
        listed = {row["user"] for row in rows}
        rows += [{"user": name, "trained_ham": 0, "trained_spam": 0, "tokens": 0, "bytes": 0, **turned[name]}
                 for name in turned if name not in listed]  # fmt: skip
        rows.sort(key=lambda row: row["user"])
        columns = user_columns(rows)
    auth = engine.config.auth
    trust = {"enabled": auth.enabled, "spf": auth.spf, "trusted_authserv_ids": list(auth.trusted_authserv_ids)}
    return {"users": columns, "per_user": True, "expired": users.expired, "authentication": trust}


def op_learned(engine: EngineLike, args: dict[str, Any]) -> dict[str, Any]:
    """The learning records (spamd/people/learned.py) of a message (`raw`) or Message-ID, or the latest; reads only."""
    raw = args.get("raw")
    if raw is not None and not isinstance(raw, bytes):
        raise ControlError("request argument 'raw' must be the message as bytes")
    message_id = args.get("message_id")
    if message_id is not None and not isinstance(message_id, str):
        raise ControlError("request argument 'message_id' must be a string")
    limit = args.get("limit", 20)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 1000:
        raise ControlError("request argument 'limit' must be an integer from 1 to 1000")
    records = engine.learning_records(_user(args), raw, message_id, limit)  # type: ignore[attr-defined]
    return {"records": records}


def op_live_days(engine: EngineLike, args: dict[str, Any]) -> dict[str, Any]:
    """Live accuracy per kept day (for `spamctl report`); reads only."""
    return {"days": engine.live.per_day()}  # type: ignore[attr-defined]


ENGINE_OPERATIONS: dict[str, Callable[[EngineLike, dict[str, Any]], dict[str, Any]]] = {
    "classify": op_classify,
    "classify_many": op_classify_many,
    "explain": op_explain,
    "train": op_train,
    "untrain": op_untrain,
    "live_days": op_live_days,
    "users": op_users,
    "learned": op_learned,
}


# ---------------------------------------------------------------- the server


class DaemonLike(Protocol):
    """What the server needs from spamd.daemon's daemon object."""

    engine: Any

    async def snapshot(self) -> Path: ...
    async def reload(self) -> dict[str, Any]: ...
    def stats(self) -> dict[str, Any]: ...


@dataclass
class _Session:
    """Per-connection state: an export being read out, an import being received."""

    export: bytes | None = None
    import_size: int | None = None
    import_buffer: bytearray | None = None


def check_socket_directory(path: Path) -> None:
    """Refuse a socket whose directory others can write (they could swap the socket for their own)."""
    parent = path.parent
    try:
        mode = parent.stat().st_mode
    except FileNotFoundError:
        raise ControlError(f"{parent}: directory for the control socket does not exist") from None
    if mode & stat.S_IWOTH:
        raise ControlError(
            f"{parent}: directory is writable by others; refusing to put the control socket {path.name} there "
            "(chmod o-w it, or set [control] socket to a path in a private directory)"
        )


async def _socket_answers(path: Path) -> bool:
    """Does a live process accept connections on this socket file?"""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(path)), timeout=2.0)
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except TimeoutError:
        return True  # a backlog that full belongs to something alive
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


# Requests too frequent or too small to deserve a log line each.
_QUIET_COMMANDS = frozenset({"ping", "stats", "live_days", "users", "export_chunk", "import_chunk"})


class ControlServer:
    """The daemon's end of the control socket; every handler runs on the daemon's loop."""

    def __init__(self, path: Path, daemon: DaemonLike):
        self.path = Path(path)
        self.daemon = daemon
        self._server: asyncio.AbstractServer | None = None
        self._inode: tuple[int, int] | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._handlers: dict[str, Callable[[dict[str, Any], _Session], Awaitable[Any]]] = {
            "ping": self._ping,
            "stats": self._stats,
            "snapshot": self._snapshot,
            "reload": self._reload,
            "export_begin": self._export_begin,
            "export_chunk": self._export_chunk,
            "import_begin": self._import_begin,
            "import_chunk": self._import_chunk,
            "import_commit": self._import_commit,
        }

    async def start(self) -> None:
        """Bind the socket owner-only and start serving; ControlError if that is not safe or possible."""
        path = self.path
        if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
            raise ControlError(
                f"{path}: control socket path is {len(os.fsencode(path))} bytes, the limit is "
                f"{_MAX_SOCKET_PATH}; set [control] socket to a shorter path"
            )
        if not path.parent.exists():
            path.parent.mkdir(parents=True, mode=0o700)
        check_socket_directory(path)
        await self._remove_stale(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(path))
            # Nobody can connect before listen(); tighten the mode in between.
            os.chmod(path, 0o600)
            st = os.stat(path)
            self._inode = (st.st_dev, st.st_ino)
            self._server = await asyncio.start_unix_server(self._accept, sock=sock)
        except OSError as e:
            sock.close()
            raise ControlError(f"{path}: cannot listen on the control socket: {e.strerror}") from None
        log.info("control_socket_opened", path=str(path))

    async def _remove_stale(self, path: Path) -> None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise ControlError(f"{path}: exists and is not a socket; move it away or set [control] socket")
        if await _socket_answers(path):
            raise ControlError(f"{path}: another spamd is answering on this control socket; stop it first")
        path.unlink()  # noqa: ASYNC240  one unlink of a dead socket file, once at start, as the lstat above
        log.warning("control_socket_stale_removed", path=str(path))

    async def close(self) -> None:
        """Stop accepting, end open connections, remove the socket file (if it is still ours)."""
        if self._server is None:
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._server.wait_closed()
        self._server = None
        try:
            st = os.stat(self.path)
            if (st.st_dev, st.st_ino) == self._inode:
                self.path.unlink()
        except FileNotFoundError:
            pass

    # ------------------------------------------------------------ connections

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            if self._peer_allowed(writer):
                await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the peer went away mid-frame; nothing to answer
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def _peer_allowed(self, writer: asyncio.StreamWriter) -> bool:
        sock = writer.get_extra_info("socket")
        creds = getattr(socket, "SO_PEERCRED", None)
        if sock is None or creds is None:
            return True  # not Linux: the 0600 socket mode is the guard
        pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, creds, struct.calcsize("3i")))
        if uid in (os.getuid(), 0):
            return True
        log.warning("control_peer_refused", peer_pid=pid, peer_uid=uid)
        writer.write(encode_frame({"ok": False, "error": f"user {uid} may not control this spamd"}))
        return False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session = _Session()
        while True:
            try:
                header = await reader.readexactly(_HEADER.size)
            except asyncio.IncompleteReadError as e:
                if e.partial:
                    raise
                return  # clean end of the conversation
            (length,) = _HEADER.unpack(header)
            if length > MAX_FRAME_BYTES:
                error = f"request of {length} bytes exceeds the {_mib(MAX_FRAME_BYTES)} control frame limit"
                writer.write(encode_frame({"ok": False, "error": error}))
                await writer.drain()
                return  # the rest of the stream is that frame: no way to resync but to hang up
            reply = await self._dispatch(await reader.readexactly(length), session)
            try:
                frame = encode_frame(reply)
            except (ControlError, TypeError) as e:
                frame = encode_frame({"ok": False, "error": f"reply cannot be sent: {e}"})
            writer.write(frame)
            await writer.drain()

    async def _dispatch(self, data: bytes, session: _Session) -> dict[str, Any]:
        command = "?"
        try:
            request = decode_frame(data)
            if not isinstance(request, dict) or not isinstance(request.get("command"), str):
                raise ControlError("malformed request: expected a map with a 'command' string")
            command = request["command"]
            args = request.get("args") or {}
            if not isinstance(args, dict):
                raise ControlError("malformed request: 'args' must be a map")
            started = time.perf_counter()
            operation = ENGINE_OPERATIONS.get(command)
            if operation is not None:
                result = operation(self.daemon.engine, args)
            elif command in self._handlers:
                result = await self._handlers[command](args, session)
            else:
                raise ControlError(f"unknown command {command!r}")
            if command not in _QUIET_COMMANDS:
                details = dict(Counter(result["outcomes"])) if command in ("train", "untrain") else {}
                elapsed_ms = round((time.perf_counter() - started) * 1000, 2)
                log.info("control_request_handled", command=command, elapsed_ms=elapsed_ms, **details)
            return {"ok": True, "result": result}
        except SpamdError as e:
            log.warning("control_request_failed", command=command, error=str(e))
            return {"ok": False, "error": str(e), "temporary": isinstance(e, StoreUnavailableError)}
        except Exception as e:  # a bug must not take the daemon down with one request
            log.exception("control_request_crashed", command=command)
            return {"ok": False, "error": f"spamd failed on {command!r} ({type(e).__name__}: {e}); see its log"}

    # ------------------------------------------------------------ daemon commands

    async def _ping(self, args: dict[str, Any], session: _Session) -> dict[str, Any]:
        return {"pid": os.getpid()}

    async def _stats(self, args: dict[str, Any], session: _Session) -> dict[str, Any]:
        return {**self.daemon.stats(), "mode": "daemon", "version": __version__}

    async def _snapshot(self, args: dict[str, Any], session: _Session) -> dict[str, Any]:
        return {"path": str(await self.daemon.snapshot())}

    async def _reload(self, args: dict[str, Any], session: _Session) -> dict[str, Any]:
        return await self.daemon.reload()

    async def _export_begin(self, args: dict[str, Any], session: _Session) -> dict[str, Any]:
        session.export = self.daemon.engine.export_snapshot()
        return {"size": len(session.export)}

    async def _export_chunk(self, args: dict[str, Any], session: _Session) -> dict[str, Any]:
        offset = args.get("offset")
        if session.export is None:
            raise ControlError("export_chunk without export_begin on this connection")
        if not isinstance(offset, int) or not 0 <= offset <= len(session.export):
            raise ControlError("request argument 'offset' is out of range")
        data = session.export[offset : offset + CHUNK_BYTES]
        if offset + len(data) >= len(session.export):
            session.export = None
        return {"data": data}

    async def _import_begin(self, args: dict[str, Any], session: _Session) -> dict[str, Any]:
        size = args.get("size")
        if not isinstance(size, int) or not 0 < size <= MAX_IMPORT_BYTES:
            raise ControlError(f"import size must be between 1 byte and {MAX_IMPORT_BYTES} bytes")
        session.import_size, session.import_buffer = size, bytearray()
        return {}

    async def _import_chunk(self, args: dict[str, Any], session: _Session) -> dict[str, Any]:
        data = _raw(args, "data")
        if session.import_buffer is None or session.import_size is None:
            raise ControlError("import_chunk without import_begin on this connection")
        if len(session.import_buffer) + len(data) > session.import_size:
            session.import_buffer = session.import_size = None
            raise ControlError("import sent more bytes than announced; nothing was imported")
        session.import_buffer += data
        return {"received": len(session.import_buffer)}

    async def _import_commit(self, args: dict[str, Any], session: _Session) -> dict[str, Any]:
        buffer, size = session.import_buffer, session.import_size
        session.import_buffer = session.import_size = None
        if buffer is None or len(buffer) != size:
            raise ControlError("import incomplete (fewer bytes than announced); nothing was imported")
        where = str(args.get("name") or "import")
        # On the loop, with no await: no training can interleave between verify and install.
        return self.daemon.engine.import_snapshot(bytes(buffer), where)
