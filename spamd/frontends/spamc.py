"""SpamAssassin's spamc/spamd protocol, so Exim's `spam =`, spamc, procmail recipes and aiospamc talk to spamd.

A request is `VERB SPAMC/1.x`, header lines, an empty line and the message
(SpamAssassin's spamd/PROTOCOL); the answer is `SPAMD/1.1 <code> <EX_name>`,
headers, an empty line and, by command, the message with spamd's X-Spam-*
headers, a report or a list of symbols. Scoring goes through the Scorer (the
same headers and the same `message_scored` line as mail over SMTP); TELL
trains through Scorer.learn / Scorer.forget (ledger, journal fsynced before the
answer). Nothing here computes a score: it maps spamd's verdict onto
SpamAssassin's score scale and writes the protocol.

The answers follow SpamAssassin 4's spamd.raw byte for byte where a client
reads them (spamc's libspamc.c, Exim's src/spam.c, aiospamc), with these
deliberate differences, each because a client would otherwise be misled:
- REPORT_IFSPAM says `Spam: True/False` (spamd says Yes/No, which spamc's own
  parser reads as "not spam");
- a damaged zlib body is 65 EX_DATAERR and a message over the size cap 65
  EX_DATAERR (spamd: 69 EX_UNAVAILABLE, which `spamc -X` turns into a retry);
- TELL with `Set: local` needs a valid `Message-class` (spamd learns ham);
- answers are never compressed: neither spamc nor aiospamc inflates one, and
  SpamAssassin's spamd does not compress its answers either.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import math
import re
import sys
import termios
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import structlog

from spamd.config import Config, parse_host_port
from spamd.errors import SpamdError, StoreUnavailableError
from spamd.message import looks_like_message
from spamd.model import Label, Score, Verdict
from spamd.scoring import Scorer, explanation, message_id
from spamd.training import Outcome

log = structlog.get_logger()

# spamc builds its whole request head in an 8 KiB buffer; no real client sends a longer line.
MAX_LINE_BYTES = 8192
# As SpamAssassin's spamd: "avoid too-many-headers DOS attack".
MAX_HEADERS = 255
# Training from spamc carries this source tag in the ledger, the journal and `spamctl stats`.
TELL_SOURCE = "spamc"
# Tokens named in SYMBOLS and listed in REPORT, each way.
SYMBOL_TOKENS = 5
REPORT_TOKENS = 10
# After an error answer to a client still sending: how long, and how much, to read and
# discard so that closing does not reset the connection before the client reads the answer.
LINGER_S = 2.0
LINGER_BYTES = 1024 * 1024
READ_CHUNK = 65536


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


# ---------------------------------------------------------------- the request


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
        if verb == "TELL" or (verb in ("PING", "SKIP") and version >= 1.5) or (verb not in ("PING", "SKIP") and version > 1.0):
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
    return SpamcRequestError(Ex.EX_DATAERR, f"message too big: {size} bytes, the limit is {limit} ([spamc] max_message_bytes)")


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


# ---------------------------------------------------------------- the score scale


def sa_score(probability: float, ham_threshold: float, spam_threshold: float, required: float = 5.0) -> float:
    """spamd's spam probability on SpamAssassin's point scale, where `required` (5.0) is the spam line.

    Piecewise linear through (0, required - 10), (ham_threshold, required - 5),
    (spam_threshold, required) and (1, required + 10): ham below required - 5
    (0.0 by default), unsure up to just under required, spam from exactly
    required. Non-decreasing in the probability, so sorting by points sorts by
    probability. It does not round: `shown_score` does, keeping the verdict.
    """
    p = 0.5 if probability != probability else min(1.0, max(0.0, probability))  # NaN: undecided
    if p >= spam_threshold:
        if spam_threshold >= 1.0:
            return required
        return min(required + 10.0, required + (p - spam_threshold) * 10.0 / (1.0 - spam_threshold))
    # Below the spam line, never on it, whatever the float rounding of the slope.
    below = math.nextafter(required, -math.inf)
    if p >= ham_threshold:
        points = required - 5.0 + (p - ham_threshold) * 5.0 / (spam_threshold - ham_threshold)
        return min(points, below)
    points = required - 10.0 + p * 5.0 / ham_threshold  # ham_threshold > p >= 0 here
    return min(points, required - 5.0, below)


def shown_score(score: Score, ham_threshold: float, spam_threshold: float, required: float) -> tuple[str, str]:
    """("7.3", "5.0"): points and threshold as written in the `Spam:` header, one decimal.

    Rounded in tenths, then held on the verdict's side of the shown threshold: a
    spam never shows below it and anything else never at or above it, so a
    client comparing the two (Exim: score >= threshold) agrees with spamd.
    """
    tenths = round(sa_score(score.probability, ham_threshold, spam_threshold, required) * 10)
    line = round(required * 10)
    tenths = max(tenths, line) if score.verdict is Verdict.SPAM else min(tenths, line - 1)
    return _tenths(tenths), _tenths(line)


def _tenths(n: int) -> str:
    return f"{'-' if n < 0 else ''}{abs(n) // 10}.{abs(n) % 10}"


# ---------------------------------------------------------------- symbols and report


_NOT_SYMBOL = re.compile(r"[^A-Z0-9]+")


def symbol_name(prefix: str, token: str) -> str:
    """A token as a SpamAssassin-style rule name: "subject:free" -> "SPAMMY_SUBJECT_FREE"."""
    safe = _NOT_SYMBOL.sub("_", token.upper()).strip("_")[:40].rstrip("_")
    if not safe or not token.isascii():
        # Non-ASCII tokens lose letters in the safe form; a short hash keeps them apart.
        digest = hashlib.blake2s(token.encode("utf-8", "surrogatepass"), digest_size=3).hexdigest().upper()
        safe = f"{safe}_{digest}" if safe else digest
    return f"{prefix}_{safe}"


def symbols(score: Score, explained: dict[str, Any]) -> str:
    """The verdict and the strongest tokens each way, comma-separated (what `spamc -y` prints)."""
    names = [f"SPAMD_{score.verdict.value.upper()}"]
    for prefix, side in (("SPAMMY", "toward_spam"), ("HAMMY", "toward_ham")):
        for row in explained[side][:SYMBOL_TOKENS]:
            name = symbol_name(prefix, row["token"])
            if name not in names:
                names.append(name)
    return ",".join(names)


def _printable(token: str) -> str:
    shown = token.encode("ascii", "backslashreplace").decode("ascii")
    shown = "".join(c if " " <= c <= "~" else f"\\x{ord(c):02x}" for c in shown)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def report(score: Score, explained: dict[str, Any], points: str, required: str) -> str:
    """A plain-text account of the verdict: what `spamctl explain` shows, as SpamAssassin's report is laid out."""
    verdict = {Verdict.SPAM: "spam", Verdict.UNSURE: "unsure (not spam)", Verdict.HAM: "ham (not spam)"}[score.verdict]
    lines = [
        f"spamd classified this message as {verdict}: spam probability {score.probability:.4f},",
        f"{points} points, {required} required (mean token log-odds {score.log_odds:+.3f}).",
        "",
        " weight  token (share of the mean log-odds, strongest first)",
        "------- ------------------------------------------------------------",
    ]
    for title, side in (("toward spam", "toward_spam"), ("toward ham", "toward_ham")):
        rows = explained[side][:REPORT_TOKENS]
        lines.append(f"        {title}:" + ("" if rows else " none"))
        lines.extend(f"{row['weight']:+7.3f} {_printable(row['token'])}" for row in rows)
    return "\r\n".join(lines) + "\r\n"


# ---------------------------------------------------------------- the answers


def _headers_only(message: bytes) -> bytes:
    """The message up to and including the empty line after its header (HEADERS); all of it if none."""
    m = re.search(rb"\r?\n\r?\n", message)
    return message if m is None else message[: m.end()]


def answer(request: Request, score: Score, points: str, required: str, message: bytes = b"", text: str = "") -> bytes:
    """The EX_OK answer to a scoring command, framed for the client's protocol version as spamd.raw does."""
    verb, version = request.verb, request.version
    spam = f"Spam: {'True' if score.verdict is Verdict.SPAM else 'False'} ; {points} / {required}\r\n"
    ok = "SPAMD/1.1 0 EX_OK\r\n"
    if verb in ("PROCESS", "HEADERS"):
        body = _headers_only(message) if verb == "HEADERS" else message
        if version >= 1.3:
            return f"{ok}Content-length: {len(body)}\r\n{spam}\r\n".encode() + body
        if version >= 1.2:
            return f"{ok}Content-length: {len(body)}\r\n\r\n".encode() + body
        return b"SPAMD/1.0 0 EX_OK\r\n" + body
    if verb == "CHECK":
        return f"{ok}{spam}\r\n".encode()
    # SYMBOLS, REPORT, REPORT_IFSPAM: before 1.3 the Spam header alone (what Exim's
    # `REPORT SPAMC/1.2` parses); from 1.3 on Content-length first.
    body_text = text + ("\r\n" if verb == "SYMBOLS" and version < 1.3 else "")
    body = body_text.encode("ascii", "replace")
    if version >= 1.3:
        return f"{ok}Content-length: {len(body)}\r\n{spam}\r\n".encode() + body
    return f"{ok}{spam}\r\n".encode() + body


# ---------------------------------------------------------------- the server


def _bytes_waiting(writer: asyncio.StreamWriter) -> bool:
    """Whether the client has sent bytes the server has not read yet (in the kernel or the stream's buffer)."""
    transport = writer.transport
    protocol = transport.get_protocol()
    reader = getattr(protocol, "_stream_reader", None)
    if reader is not None and len(getattr(reader, "_buffer", b"")):
        return True
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False
    try:
        waiting = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except OSError:
        return False
    return int.from_bytes(waiting, sys.byteorder) > 0


@dataclass(eq=False)
class _Connection:
    writer: asyncio.StreamWriter
    peer: str
    opened: float  # loop time
    task: asyncio.Task[Any] | None = None
    heard: float = 0.0  # loop time the last bytes of the request were read (opened until then)
    phase: str = "waiting"  # "waiting" for a request line, "reading" the rest, "answering"
    evicted: str = ""  # why the server cut it short
    answered: bool = False  # an answer is written (after it only lingering and closing remain)
    request: Request | None = field(default=None, repr=False)


class SpamcServer:
    """The listener: peer allow-list, connection cap, timeouts, one request per connection, drain on shutdown.

    `config` is read per connection, so a reload applies to the next one.
    It does not score or learn itself: the Scorer does.
    """

    def __init__(self, config: Callable[[], Config], scorer: Scorer, on_error: Callable[..., None]):
        self.config = config
        self.scorer = scorer
        self.on_error = on_error
        self.connections: dict[asyncio.Task[Any], _Connection] = {}
        self.server: asyncio.AbstractServer | None = None
        self.address: tuple[str, int] | None = None
        self.answered = 0

    async def start(self) -> tuple[str, int]:
        listen = self.config().spamc.listen
        host, port = parse_host_port(listen, "[spamc] listen")
        try:
            # A backlog for bursts: at asyncio's default of 100, a burst of connections while
            # the loop was busy overflowed it, and the kernel's dropped SYN cost a client a
            # 1 s retransmit (tests/test_spamc.py, 500 idle connections beside spamc).
            backlog = min(max(self.config().spamc.max_connections, 128), 4096)
            self.server = await asyncio.start_server(self._serve, host, port, backlog=backlog)
        except OSError as e:
            raise SpamdError(f"cannot listen for spamc on {listen}: {e.strerror} ([spamc] listen, or --spamc)") from None
        self.address = self.server.sockets[0].getsockname()[:2]
        return self.address

    @property
    def in_flight(self) -> int:
        return sum(1 for c in self.connections.values() if c.phase != "waiting")

    async def close(self, timeout: float) -> None:
        """Stop accepting; answer connections that sent no request yet (75, retry); let the others finish."""
        if self.server is not None:
            self.server.close()
        for conn in list(self.connections.values()):
            if conn.phase == "waiting":
                self._evict(conn, "spamd shutting down, try again later")
        busy = [task for task, conn in self.connections.items() if conn.phase != "waiting"]
        if busy:
            _, pending = await asyncio.wait(busy, timeout=timeout)
            if pending:
                log.warning("spamc_drain_timeout", in_flight=len(pending))
                for conn in [self.connections[t] for t in pending if t in self.connections]:
                    self._evict(conn, "spamd shutting down, try again later")
        if self.connections:
            await asyncio.wait(list(self.connections), timeout=5.0)
        if self.server is not None:
            await self.server.wait_closed()

    def _evict(self, conn: _Connection, why: str) -> None:
        conn.evicted = why
        # One answer per connection: one already answered may have shut down its side
        # for writing (lingering), and a write after write_eof() raises.
        if not conn.answered and not conn.writer.is_closing():
            conn.answered = True
            conn.writer.write(SpamcRequestError(Ex.EX_TEMPFAIL, why).reply())
        if conn.task is not None:
            conn.task.cancel()

    # ------------------------------------------------------------ one connection

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        config = self.config()
        peer = _peer_host(writer)
        if peer not in config.spamc_allowed_peers:
            log.warning("spamc_peer_refused", peer=peer)
            self.scorer.metrics.session_refused("spamc")
            writer.write(SpamcRequestError(Ex.EX_NOPERM, f"connections from {peer} are not accepted").reply())
            await _linger(reader, writer)
            writer.close()
            return
        loop = asyncio.get_running_loop()
        conn = _Connection(writer, peer, loop.time(), asyncio.current_task())
        conn.heard = conn.opened
        if len(self.connections) >= config.spamc.max_connections and not self._make_room():
            log.warning("spamc_connection_refused", peer=peer, connections=len(self.connections))
            self.scorer.metrics.session_refused("spamc")
            writer.write(SpamcRequestError(Ex.EX_TEMPFAIL, "too many connections, try again later").reply())
            await _linger(reader, writer)
            writer.close()
            return
        assert conn.task is not None
        self.connections[conn.task] = conn
        self.scorer.metrics.session_opened("spamc")
        try:
            await self._converse(reader, conn, config)
        except asyncio.CancelledError:
            # Evicted (the cap, or shutdown): already answered.
            if not conn.evicted:
                raise
        except Exception as e:  # noqa: BLE001 - a bug of spamd's own must not end the listener
            log.error("spamc_request_failed", peer=peer, error=f"{type(e).__name__}: {e}", exc_info=e)
            self.on_error("spamc_request_failed", error=f"{type(e).__name__}: {e}")
        finally:
            self.scorer.metrics.session_closed("spamc")
            del self.connections[conn.task]
            writer.close()

    def _make_room(self) -> bool:
        """At the cap: close one lingering after its answer, else the one silent longest (75).

        Silent: nothing read from it for longest, and nothing waiting to be read. A client
        that connected just before a flood of idle connections, and whose request the busy
        loop has not read yet, was the oldest and was cut off (tests/test_spamc.py, under
        load); its bytes waiting in the socket now keep it.
        """
        candidates = sorted(
            (c for c in self.connections.values() if c.phase != "answering" and not c.evicted),
            key=lambda c: (not c.answered, c.heard),
        )
        if not candidates:
            return False
        oldest = next((c for c in candidates if c.answered or not _bytes_waiting(c.writer)), candidates[0])
        log.warning("spamc_connection_evicted", peer=oldest.peer, waited_s=round(asyncio.get_running_loop().time() - oldest.opened, 2))
        self._evict(oldest, "too many connections, try again later")
        return True

    async def _converse(self, reader: asyncio.StreamReader, conn: _Connection, config: Config) -> None:
        started = time.perf_counter()
        parser = RequestParser(config.spamc_max_message_bytes)
        try:
            request = await self._read_request(reader, conn, parser, config)
        except SpamcRequestError as e:
            log.warning("spamc_request_refused", peer=conn.peer, code=e.code.value, reason=e.text,
                        verb=None if parser.request is None else parser.request.verb)  # fmt: skip
            conn.answered = True
            conn.writer.write(e.reply())
            if not reader.at_eof():
                await _linger(reader, conn.writer)
            return
        except (ConnectionError, OSError):
            return  # the client went away: nobody to answer
        conn.phase = "answering"
        try:
            reply = await self._answer(request, conn, config, started)
        except SpamcRequestError as e:
            log.warning("spamc_request_refused", peer=conn.peer, code=e.code.value, reason=e.text, verb=request.verb)
            reply = e.reply()
        except StoreUnavailableError as e:  # the shared model (Redis) is down: 75, the client retries
            log.error("spamc_request_failed", peer=conn.peer, verb=request.verb, error=str(e))
            self.on_error("spamc_request_failed", error=str(e))
            reply = SpamcRequestError(Ex.EX_TEMPFAIL, "spam filter model unavailable, try again later").reply()
        except Exception as e:  # noqa: BLE001 - spamd's own bug: answer 70 and keep serving
            log.error("spamc_request_failed", peer=conn.peer, verb=request.verb, error=f"{type(e).__name__}: {e}", exc_info=e)
            self.on_error("spamc_request_failed", error=f"{type(e).__name__}: {e}")
            reply = SpamcRequestError(Ex.EX_SOFTWARE, "internal error, try again later").reply()
        conn.answered = True
        if reply:
            conn.writer.write(reply)
            try:
                async with asyncio.timeout(config.spamc.data_timeout_s):
                    await conn.writer.drain()
            except (ConnectionError, OSError, TimeoutError):
                return
        self.answered += 1

    async def _read_request(self, reader: asyncio.StreamReader, conn: _Connection, parser: RequestParser, config: Config) -> Request:
        loop = asyncio.get_running_loop()
        deadline = conn.opened + config.spamc.idle_timeout_s
        while True:
            if not parser.in_head and conn.phase != "reading-body":
                conn.phase = "reading-body"
                deadline = loop.time() + config.spamc.data_timeout_s
            try:
                async with asyncio.timeout_at(deadline):
                    chunk = await reader.read(READ_CHUNK)
            except TimeoutError:
                seconds = config.spamc.idle_timeout_s if parser.in_head else config.spamc.data_timeout_s
                raise SpamcRequestError(Ex.EX_TIMEOUT, f"Timeout: ({seconds:g} second socket timeout reading input from client)") from None
            if not chunk:
                return parser.eof()
            conn.heard = loop.time()
            request = parser.feed(chunk)
            if parser.request is not None and conn.phase == "waiting":
                conn.phase = "reading"  # a request line: shutdown waits for this one
            if request is not None:
                return request

    async def _answer(self, request: Request, conn: _Connection, config: Config, started: float) -> bytes:
        verb = request.verb
        if verb == "PING":
            return b"SPAMD/1.5 0 PONG\r\n"
        if verb == "SKIP":
            log.info("spamc_skipped", peer=conn.peer, user=request.user)
            return b""
        if verb == "TELL":
            return self._tell(request, conn, config)
        raw = request.body
        scored = await self.scorer.score_beside_the_loop(raw)
        model, spamc = config.model, config.spamc
        points, required = shown_score(scored.score, model.ham_threshold, model.spam_threshold, spamc.required_score)
        text = ""
        if verb in ("SYMBOLS", "REPORT") or (verb == "REPORT_IFSPAM" and scored.score.verdict is Verdict.SPAM):
            explained = explanation(self.scorer.engine, raw, max(SYMBOL_TOKENS, REPORT_TOKENS))
            text = symbols(scored.score, explained) if verb == "SYMBOLS" else report(scored.score, explained, points, required)
        reply = answer(request, scored.score, points, required, scored.data, text)
        self.scorer.scored(scored, raw, started, way_in="spamc", peer=conn.peer, via="spamc", command=verb, client_user=request.user,
                           points=points)  # fmt: skip
        return reply

    def _tell(self, request: Request, conn: _Connection, config: Config) -> bytes:
        if not config.spamc.allow_tell:
            raise SpamcRequestError(
                Ex.EX_UNAVAILABLE, "Service Unavailable: TELL commands are not enabled, set [spamc] allow_tell = true"
            )
        if request.set_local and request.remove_local:
            raise protocol_error("Unable to set local and remove local in the same operation.")
        if request.set_local and request.message_class is None:
            raise protocol_error("Set: local needs Message-class: spam or ham")
        raw = request.body
        if (request.set_local or request.remove_local) and not looks_like_message(raw):
            raise SpamcRequestError(Ex.EX_DATAERR, "not a mail message (it does not start with a header field); nothing learned")
        context = {"peer": conn.peer, "via": "spamc", "client_user": request.user}
        headers = ""
        try:
            if request.set_local:
                assert request.message_class is not None
                outcome = self.scorer.learn(raw, request.message_class, TELL_SOURCE, user=True, **context)
                if outcome in (Outcome.LEARNED, Outcome.CORRECTED):
                    headers += "DidSet: local\r\n"
            if request.remove_local:
                if self.scorer.forget(raw, TELL_SOURCE, **context) is Outcome.UNLEARNED:
                    headers += "DidRemove: local\r\n"
        except SpamdError as e:  # the journal cannot be written (a full disk): nothing was learned
            log.error("spamc_training_failed", peer=conn.peer, message_id=message_id(raw), error=str(e))
            self.on_error("spamc_training_failed", error=str(e))
            raise SpamcRequestError(Ex.EX_TEMPFAIL, f"training not stored, try again later: {e}") from None
        if not request.set_local and not request.remove_local:
            log.info("spamc_tell_ignored", peer=conn.peer, set_remote=request.set_remote, remove_remote=request.remove_remote)
        return f"SPAMD/1.1 0 EX_OK\r\n{headers}\r\n".encode()


def _peer_host(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    host = peer[0] if isinstance(peer, tuple) and peer else str(peer)
    if host.startswith("::ffff:") and "." in host:
        host = host.removeprefix("::ffff:")  # IPv4 peer on a dual-stack listener
    return host


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Read and drop what the client still sends (bounded), so our answer is not lost to a reset on close."""
    try:
        if writer.can_write_eof():
            writer.write_eof()
        async with asyncio.timeout(LINGER_S):
            discarded = 0
            while discarded < LINGER_BYTES:
                chunk = await reader.read(READ_CHUNK)
                if not chunk:
                    return
                discarded += len(chunk)
    except (TimeoutError, ConnectionError, OSError):
        return
