"""The control socket's wire format and spamctl's end of it: frames, errors, the blocking client.

Wire format: each frame is `<u32 big-endian length><msgpack map>`, at most
MAX_FRAME_BYTES. A request is {"command": str, "args": {...}}; the reply is
{"ok": true, "result": ...} or {"ok": false, "error": "<one line>"}. Model
exports and imports travel in CHUNK_BYTES pieces.

Apart from the daemon's server and its operations (spamd.frontends.control), so
that spamctl talking to a running daemon imports neither the model nor the mail
parser: a third of a second of its start-up.
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path
from typing import Any

import msgpack

from spamd.errors import SpamdError, StoreUnavailableError

MAX_FRAME_BYTES = 64 * 1024 * 1024
# Export and import pieces: comfortably under the frame cap with msgpack overhead.
CHUNK_BYTES = 16 * 1024 * 1024
# An import larger than this is refused before it is buffered. The largest
# possible snapshot (hash_bits = 28, every bucket set in both classes, a full
# ledger) is about 4.1 GiB; that is the bound.
MAX_IMPORT_BYTES = 5 * 1024**3
_HEADER = struct.Struct(">I")
# sockaddr_un.sun_path is 108 bytes on Linux, including the terminating NUL.
_MAX_SOCKET_PATH = 107
# Training events from spamctl carry this source tag (folder moves carry the daemon's own).
TRAIN_SOURCE = "spamctl"
DEFAULT_EXPLAIN_LIMIT = 15
# `spamctl users`' reply holds a list a column, each in this order of users (by name): as a dict a
# user, 100,000 users took a tenth of a second each to pack, send and unpack.
USER_COLUMNS = ("user", "trained_ham", "trained_spam", "tokens", "bytes", "senders_to_junk", "senders_to_inbox")


def user_rows(columns: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The users reply's columns as a dict a user (`spamctl --json users` prints these)."""
    return [dict(zip(USER_COLUMNS, row, strict=True)) for row in zip(*(columns[c] for c in USER_COLUMNS), strict=True)]


def user_columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Rows (a dict a user) as the users reply's columns; a column a row lacks is 0."""
    return {column: [row.get(column, 0) for row in rows] for column in USER_COLUMNS}


# A training request's outcome for an input that is no mail message.
NOT_A_MESSAGE = "not_a_message"


class ControlError(SpamdError):
    """The control socket cannot be used, or the daemon refused a request."""


class DaemonNotRunning(ControlError):
    """Nothing answers on the control socket (no file, or a stale one)."""


def _mib(n: int) -> str:
    return f"{n / 1024 / 1024:.0f} MiB"


# ---------------------------------------------------------------- frames


def encode_frame(obj: Any) -> bytes:
    data = msgpack.packb(obj, use_bin_type=True, default=_to_plain)
    if len(data) > MAX_FRAME_BYTES:
        raise ControlError(f"control frame of {len(data)} bytes exceeds the {_mib(MAX_FRAME_BYTES)} limit")
    return _HEADER.pack(len(data)) + data


def decode_frame(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=True, use_list=True)
    except Exception as e:  # msgpack raises several unrelated types on garbage
        raise ControlError(f"malformed control frame ({type(e).__name__})") from None


def _to_plain(value: Any) -> Any:
    """msgpack fallback for what stats dicts may hold: paths, enums, numpy scalars."""
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):  # numpy scalar
        return value.item()
    if hasattr(value, "value"):  # enum
        return value.value
    raise TypeError(f"cannot send {type(value).__name__} over the control socket")


# ---------------------------------------------------------------- the client


class ControlClient:
    """spamctl's end: blocking, one connection reused for every request."""

    def __init__(self, path: Path, timeout: float = 300.0):
        self.path = Path(path)
        self.timeout = timeout
        self._sock: socket.socket | None = None

    def connect(self) -> None:
        """Connect, or raise DaemonNotRunning (no socket, or a stale one) / ControlError."""
        if self._sock is not None:
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self.path))
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            raise DaemonNotRunning(f"no spamd is running (nothing answers on {self.path})") from None
        except PermissionError:
            sock.close()
            raise ControlError(f"{self.path}: permission denied connecting to the control socket") from None
        except OSError as e:
            sock.close()
            raise ControlError(f"{self.path}: cannot connect to the control socket: {e.strerror or e}") from None
        self._sock = sock

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> ControlClient:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, command: str, **args: Any) -> Any:
        """Send one request and return its result; ControlError carries the daemon's refusal."""
        frame = encode_frame({"command": command, "args": args})  # too large: refused before connecting
        self.connect()
        assert self._sock is not None
        try:
            self._sock.sendall(frame)
            (length,) = _HEADER.unpack(self._receive(_HEADER.size))
            if length > MAX_FRAME_BYTES:
                raise ControlError(f"reply of {length} bytes exceeds the {_mib(MAX_FRAME_BYTES)} control frame limit")
            reply = decode_frame(self._receive(length))
        except TimeoutError:
            self.close()
            raise ControlError(f"{self.path}: no reply from spamd within {self.timeout:.0f} s") from None
        except (BrokenPipeError, ConnectionResetError):
            self.close()
            raise ControlError(f"{self.path}: spamd closed the connection") from None
        if not isinstance(reply, dict) or "ok" not in reply:
            raise ControlError(f"{self.path}: malformed reply from spamd")
        if not reply["ok"]:
            if reply.get("temporary"):  # the shared store is down: the caller may retry
                raise StoreUnavailableError(str(reply.get("error")))
            raise ControlError(str(reply.get("error")))
        return reply.get("result")

    def _receive(self, n: int) -> bytes:
        assert self._sock is not None
        chunks, remaining = [], n
        while remaining:
            chunk = self._sock.recv(min(remaining, 1 << 20))
            if not chunk:
                # A reply sent just before hanging up (e.g. "frame too large") may be all there is.
                raise ConnectionResetError
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def export_bytes(self) -> bytes:
        size = self.request("export_begin")["size"]
        parts, offset = [], 0
        while offset < size:
            data = self.request("export_chunk", offset=offset)["data"]
            if not data:
                raise ControlError(f"{self.path}: export ended early at byte {offset} of {size}")
            parts.append(data)
            offset += len(data)
        return b"".join(parts)

    def import_bytes(self, data: bytes, name: str) -> dict[str, Any]:
        self.request("import_begin", size=len(data))
        for offset in range(0, len(data), CHUNK_BYTES):
            self.request("import_chunk", data=data[offset : offset + CHUNK_BYTES])
        return self.request("import_commit", name=name)
