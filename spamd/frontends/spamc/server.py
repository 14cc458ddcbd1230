"""The spamc listener on the daemon loop: one task a connection, scoring and TELL through the Scorer, bounded and lingering on errors."""

from __future__ import annotations

import asyncio
import fcntl
import sys
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from spamd.config import Config
from spamd.config.addresses import parse_host_port
from spamd.engine.scoring import Scorer, explanation, message_id
from spamd.errors import SpamdError, StoreUnavailableError
from spamd.frontends.spamc.answers import (
    REPORT_TOKENS,
    SYMBOL_TOKENS,
    answer,
    report,
    shown_score,
    symbols,
)
from spamd.frontends.spamc.protocol import (
    Ex,
    Request,
    RequestParser,
    SpamcRequestError,
    protocol_error,
)
from spamd.learning.outcomes import Outcome
from spamd.mail.message import looks_like_message
from spamd.model.bayes import Verdict

log = structlog.get_logger()


# Training from spamc carries this source tag in the ledger, the journal and `spamctl stats`.
TELL_SOURCE = "spamc"


# After an error answer to a client still sending: how long, and how much, to read and
# discard so that closing does not reset the connection before the client reads the answer.
LINGER_S = 2.0


LINGER_BYTES = 1024 * 1024


READ_CHUNK = 65536


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
            raise SpamdError(
                f"cannot listen for spamc on {listen}: {e.strerror} ([spamc] listen, or --spamc)"
            ) from None
        self.address = self.server.sockets[0].getsockname()[:2]
        return self.address

    @property
    def in_flight(self) -> int:
        return sum(1 for c in self.connections.values() if c.phase != "waiting")

    async def close(self, timeout: float) -> None:  # noqa: ASYNC109  a grace period: on timeout it goes on to close the rest, which a caller's timeout would cancel
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
        log.warning(
            "spamc_connection_evicted",
            peer=oldest.peer,
            waited_s=round(asyncio.get_running_loop().time() - oldest.opened, 2),
        )
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
            log.error(
                "spamc_request_failed", peer=conn.peer, verb=request.verb, error=f"{type(e).__name__}: {e}", exc_info=e
            )
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

    async def _read_request(
        self, reader: asyncio.StreamReader, conn: _Connection, parser: RequestParser, config: Config
    ) -> Request:
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
                raise SpamcRequestError(
                    Ex.EX_TIMEOUT, f"Timeout: ({seconds:g} second socket timeout reading input from client)"
                ) from None
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
        # spamc -u names the user (the User: header): scored with that user's layer if it is a valid name.
        scored = await self.scorer.score_beside_the_loop(raw, self.scorer.engine.layer_user(request.user))
        model, spamc = config.model, config.spamc
        points, required = shown_score(scored.score, model.ham_threshold, model.spam_threshold, spamc.required_score)
        text = ""
        if verb in ("SYMBOLS", "REPORT") or (verb == "REPORT_IFSPAM" and scored.score.verdict is Verdict.SPAM):
            explained = explanation(
                self.scorer.engine, raw, max(SYMBOL_TOKENS, REPORT_TOKENS), self.scorer.engine.layer_user(request.user)
            )
            text = (
                symbols(scored.score, explained)
                if verb == "SYMBOLS"
                else report(scored.score, explained, points, required)
            )
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
            raise SpamcRequestError(
                Ex.EX_DATAERR, "not a mail message (it does not start with a header field); nothing learned"
            )
        context = {"peer": conn.peer, "via": "spamc", "client_user": request.user}
        headers = ""
        try:
            if request.set_local:
                assert request.message_class is not None
                outcome = self.scorer.learn(
                    raw, request.message_class, TELL_SOURCE, user=True, layer_user=request.user, **context
                )
                if outcome in (Outcome.LEARNED, Outcome.CORRECTED):
                    headers += "DidSet: local\r\n"
            if (
                request.remove_local
                and self.scorer.forget(raw, TELL_SOURCE, layer_user=request.user, **context) is Outcome.UNLEARNED
            ):
                headers += "DidRemove: local\r\n"
        except SpamdError as e:  # the journal cannot be written (a full disk): nothing was learned
            log.error("spamc_training_failed", peer=conn.peer, message_id=message_id(raw), error=str(e))
            self.on_error("spamc_training_failed", error=str(e))
            raise SpamcRequestError(Ex.EX_TEMPFAIL, f"training not stored, try again later: {e}") from None
        if not request.set_local and not request.remove_local:
            log.info(
                "spamc_tell_ignored", peer=conn.peer, set_remote=request.set_remote, remove_remote=request.remove_remote
            )
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
