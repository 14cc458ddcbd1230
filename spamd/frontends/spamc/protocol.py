"""The spamc wire protocol: request line, headers and body read within bounds, and the exit codes clients know."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from enum import IntEnum

from spamd.errors import SpamdError
from spamd.model.bayes import Label

# spamc builds its whole request head in an 8 KiB buffer; no real client sends a longer line.
MAX_LINE_BYTES = 8192


# As SpamAssassin's spamd: "avoid too-many-headers DOS attack".
MAX_HEADERS = 255


class Ex(IntEnum):
    """sysexits.h codes, as SpamAssassin's spamd names them in its answers.

    Not EX_TOOBIG: that is libspamc's own (866, "not checked, passed through"), never sent.
    """

    EX_OK = 0
    EX_USAGE = 64
    EX_DATAERR = 65
    EX_NOINPUT = 66
    EX_NOUSER = 67
    EX_NOHOST = 68
    EX_UNAVAILABLE = 69
    EX_SOFTWARE = 70
    EX_OSERR = 71
    EX_OSFILE = 72
    EX_CANTCREAT = 73
    EX_IOERR = 74
    EX_TEMPFAIL = 75
    EX_PROTOCOL = 76
    EX_NOPERM = 77
    EX_CONFIG = 78
    EX_TIMEOUT = 79


class SpamcRequestError(SpamdError):
    """A request spamd answers with an error code instead of a result (the client's fault, or a retry)."""

    def __init__(self, code: Ex, text: str):
        super().__init__(f"{code.value} {code.name}: {text}")
        self.code = code
        self.text = text

    def reply(self) -> bytes:
        """The one-line answer, as SpamAssassin's spamd writes its errors ("SPAMD/1.0 76 Bad header line: ...")."""
        return f"SPAMD/1.0 {self.code.value} {_one_line(self.text)}\r\n".encode("ascii")


def protocol_error(detail: str) -> SpamcRequestError:
    return SpamcRequestError(Ex.EX_PROTOCOL, f"Bad header line: ({detail})")


def _one_line(text: str) -> str:
    """Printable ASCII on one line: answer lines must never be split or carry bytes a client chokes on."""
    return "".join(c if " " <= c <= "~" else "?" for c in text)[:500]


VERBS = frozenset({"CHECK", "SYMBOLS", "REPORT", "REPORT_IFSPAM", "PROCESS", "HEADERS", "PING", "SKIP", "TELL"})


_REQUEST_LINE = re.compile(rb"([A-Z_]{1,20}) SPAMC/(\d{1,3}\.\d{1,3})")


_DIGITS = re.compile(rb"\d{1,20}")


@dataclass
class Request:
    verb: str
    version: float
    user: str = ""
    content_length: int | None = None
    compress: bool = False
    message_class: Label | None = None
    set_local: bool = False
    set_remote: bool = False
    remove_local: bool = False
    remove_remote: bool = False
    body: bytes = b""


class RequestParser:
    """Bytes in as they arrive, one Request out; every malformed input a SpamcRequestError with its EX_ code.

    Incremental, so the server never buffers more than a line of the head or
    the size cap of the body. It checks the protocol only: whether TELL is
    allowed, and what a command means, is the server's business.
    """

    def __init__(self, max_message_bytes: int):
        self.max_message_bytes = max_message_bytes
        self.buffer = bytearray()
        self.request: Request | None = None
        self.in_head = True  # request line and headers; False once the body is being read
        self.headers_seen = 0
        self.done = False

    def feed(self, data: bytes) -> Request | None:
        """Take the next bytes; the Request once it is whole, else None."""
        if self.done:
            return None  # bytes past the request (past Content-length) are ignored, as spamd does
        self.buffer += data
        while self.in_head:
            end = self.buffer.find(b"\n", 0, MAX_LINE_BYTES + 2)
            if end < 0:
                if len(self.buffer) > MAX_LINE_BYTES:
                    raise protocol_error(f"line longer than {MAX_LINE_BYTES} bytes")
                return None
            line = bytes(self.buffer[:end])
            del self.buffer[: end + 1]
            if line.endswith(b"\r"):
                line = line[:-1]
            if self.request is None:
                self._request_line(line)
            else:
                self._header_line(line)
            if self.done:
                return self.request
        return self._body(at_eof=False)

    def eof(self) -> Request:
        """The client has finished sending (shut down its side): the request as it stands, or why not."""
        if self.done:
            assert self.request is not None
            return self.request
        if self.in_head:
            if self.buffer:
                # A last line without its newline: take it as a line, as spamd's getline does.
                request = self.feed(b"\n")
                if request is not None:
                    return request
                if not self.in_head:
                    return self.eof()
            raise protocol_error("closed before headers" if self.request is None else "EOF during headers")
        request = self._body(at_eof=True)
        assert request is not None
        return request

    # ------------------------------------------------------------ head

    def _request_line(self, line: bytes) -> None:
        m = _REQUEST_LINE.fullmatch(line)
        if m is None or m.group(1).decode() not in VERBS:
            raise protocol_error(f"unknown request {line[:60].decode('latin-1')!r}")
        verb = m.group(1).decode()
        version = float(m.group(2))
        self.request = Request(verb, version)
        # Which requests carry a header block, as spamd.raw reads them: TELL always; PING and
        # SKIP from protocol 1.5 on (bug 6187); the others from 1.1 on. Without one, PING and
        # SKIP are whole at once and the others' message follows to the end of the stream.
        if (
            verb == "TELL"
            or (verb in ("PING", "SKIP") and version >= 1.5)
            or (verb not in ("PING", "SKIP") and version > 1.0)
        ):
            return
        self._end_head()

    def _header_line(self, line: bytes) -> None:
        if not line:
            self._end_head()
            return
        self.headers_seen += 1
        if self.headers_seen > MAX_HEADERS:
            raise protocol_error("too many headers")
        name, colon, value = line.partition(b":")
        if not colon:
            raise protocol_error("header not in 'Name: value' format")
        request = self.request
        assert request is not None
        value = value.strip(b" \t")
        key = name.strip().lower()
        if key == b"content-length":
            if not _DIGITS.fullmatch(value):
                raise protocol_error("Content-Length contains non-numeric bytes")
            request.content_length = int(value)
            if request.content_length > self.max_message_bytes:
                raise _too_big(request.content_length, self.max_message_bytes)
        elif key == b"user":
            if any(b < 0x20 or b == 0x7F for b in value):
                raise protocol_error("User header contains control chars")
            request.user = value.decode("utf-8", "replace")[:256]
        elif key == b"message-class":
            try:
                request.message_class = Label.parse(value.decode("ascii"))
            except (KeyError, UnicodeDecodeError):
                raise protocol_error("Message-class header contains invalid class") from None
        elif key in (b"set", b"remove"):
            lowered = value.lower()
            local, remote = b"local" in lowered, b"remote" in lowered
            if key == b"set":
                request.set_local, request.set_remote = local, remote
            else:
                request.remove_local, request.remove_remote = local, remote
        elif key == b"compress":
            if b"zlib" not in value.lower():
                raise protocol_error(f"compression type not supported: {value[:40].decode('latin-1')}")
            request.compress = True
        # Any other header is ignored, as the protocol asks.

    def _end_head(self) -> None:
        request = self.request
        assert request is not None
        self.in_head = False
        if request.verb in ("PING", "SKIP"):
            self.done = True
        elif request.compress and request.content_length is None:
            raise protocol_error("Compress requires Content-length header")

    # ------------------------------------------------------------ body

    def _body(self, at_eof: bool) -> Request | None:
        request = self.request
        assert request is not None
        expected = request.content_length
        if expected is None:
            if len(self.buffer) > self.max_message_bytes:
                raise _too_big(len(self.buffer), self.max_message_bytes)
            if not at_eof:
                return None
            body = bytes(self.buffer)
        elif len(self.buffer) >= expected:
            body = bytes(self.buffer[:expected])
        elif at_eof:
            raise protocol_error(f"Content-Length mismatch: Expected {expected} bytes, got {len(self.buffer)} bytes")
        else:
            return None
        self.buffer = bytearray()
        request.body = _inflate(body, self.max_message_bytes) if request.compress else body
        self.done = True
        return request


def _too_big(size: int, limit: int) -> SpamcRequestError:
    return SpamcRequestError(
        Ex.EX_DATAERR, f"message too big: {size} bytes, the limit is {limit} ([spamc] max_message_bytes)"
    )


def _inflate(data: bytes, limit: int) -> bytes:
    """A zlib body inflated, never past `limit` bytes (a small bomb must not fill memory)."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as e:
        raise SpamcRequestError(Ex.EX_DATAERR, f"zlib: the message is not a valid zlib stream ({e})") from None
    if len(out) > limit:
        raise _too_big(len(out), limit)
    if not inflater.eof:
        raise SpamcRequestError(Ex.EX_DATAERR, "zlib: failed to find end of zlib stream")
    return out
