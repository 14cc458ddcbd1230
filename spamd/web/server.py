"""HTTP on the daemon's loop with aiohttp, bounded so that hostile clients cannot stall it.

Serves `/metrics` (spamd/frontends/metrics.py) and the web console (spamd/web/app.py),
each on its own port. aiohttp parses HTTP and routes; this module adds what a daemon
exposed to garbage, slowloris and idle floods needs and aiohttp does not do by itself:

- peers outside an allow-list are disconnected before a byte is read;
- at most `max_connections` open: past that the oldest connection still waiting for a
  request (idle, or dribbling its head) is closed, or the oldest of all if none is;
- a request head must arrive within `head_timeout_s` of the connect or of the last
  answer (aiohttp's keep-alive timer, which also covers a head still arriving); a
  handler, its body upload included, gets `request_timeout_s` (504 past it);
- request lines and header fields are capped (431 past them), the header count and
  the body too (413);
- a client that half-closes after its request still gets its answer (asyncio would
  close the connection at the EOF), and the status line says HTTP/1.1 whatever the
  request's minor version, as RFC 9112 section 2.3 asks of a server.

Those last points reach into aiohttp's RequestHandler (its queued requests and request
factory), so pyproject pins aiohttp below 4; tests/test_metrics.py and
tests/test_web.py check each behaviour against a real socket.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web
from aiohttp.http import HttpVersion10, HttpVersion11
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong

from spamd.errors import SpamdError

log = structlog.get_logger()

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Limits:
    """What one port accepts from a client."""

    head_timeout_s: float = 5.0  # to send a request head (from connect or the last answer); idle keep-alive too
    request_timeout_s: float = 5.0  # for the handler, reading the body included
    max_body_bytes: int = 0  # a request body at most this big (413 past it)
    max_headers: int = 32
    max_line_bytes: int = 8190  # the request line, and each header field
    max_connections: int = 64


def timeout_middleware(limits: Limits) -> Any:
    """Each handler (and its body upload) within `limits.request_timeout_s`; aiohttp answers 504 past it."""

    @web.middleware
    async def bounded(request: web.Request, handler: Handler) -> web.StreamResponse:
        length = request.content_length
        if length is not None and length > limits.max_body_bytes:
            # Refused before a byte of it is read (aiohttp's own check comes only while reading).
            raise web.HTTPRequestEntityTooLarge(max_size=limits.max_body_bytes, actual_size=length)
        async with asyncio.timeout(limits.request_timeout_s):
            return await handler(request)

    return bounded


def bounded_application(limits: Limits, middlewares: list[Any] | None = None) -> web.Application:
    """An aiohttp Application with the body cap and the handler timeout of `limits`."""
    return web.Application(
        client_max_size=max(limits.max_body_bytes, 1), middlewares=[timeout_middleware(limits), *(middlewares or [])]
    )


class _BoundedRequestHandler(web.RequestHandler):
    """aiohttp's protocol object, one per connection, with the checks the module docstring lists."""

    def __init__(self, owner: BoundedServer, manager: web.Server, **kwargs: Any):
        super().__init__(manager, **kwargs)
        self.owner = owner
        self.answered = 0  # requests answered on this connection (aiohttp counts those parsed)
        make_request = self._request_factory
        assert make_request is not None

        def as_http11(message: Any, *args: Any) -> web.BaseRequest:
            # The answer's status line takes the request's version. Keep-alive is decided
            # by the parsed message (should_close) and does not change.
            if message.version == HttpVersion10:
                message = message._replace(version=HttpVersion11)
            return make_request(message, *args)

        self._request_factory = as_http11

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) and peer else str(peer)
        if host.startswith("::ffff:") and "." in host:
            host = host.removeprefix("::ffff:")
        if host not in self.owner.allowed_peers:
            self.owner.on_refused(host)
            transport.close()  # unanswered: nothing is read from a peer not allowed
            return
        super().connection_made(transport)
        self.owner.make_room(self)

    @property
    def waiting(self) -> bool:
        """Between requests, or a head still arriving: nothing to lose by closing it."""
        return self.answered >= self._request_count

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> Any:
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            self.answered += 1

    # asyncio's Protocol.eof_received may return False (close the transport), which aiohttp's annotation omits.
    def eof_received(self) -> bool:  # type: ignore[override]
        current = self._current_request
        if current is not None and not current.content.is_eof():
            return False  # half a body, then EOF: nothing to answer
        if not self.waiting:
            self.close()  # answer what was asked, then close
            return True  # keep the transport open for writing
        return False

    def handle_error(
        self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:
            raise ConnectionError("an answer was under way; the connection is closed")
        if isinstance(exc, LineTooLong) or (isinstance(exc, BadHttpMessage) and "Too many headers" in str(exc)):
            status, text = 431, "request head too large"
        elif status == 500:
            self.owner.on_failure(request, exc)
            text = "internal error"
        elif status == 504:
            text = "request took too long"
        else:
            text = "not an HTTP/1.x request" if status == 400 else str(status)
        response = web.Response(status=status, text=text + "\n")
        response.force_close()
        return response


class BoundedServer:
    """One listening port serving `app` with `limits`; start() returns the bound address."""

    def __init__(
        self,
        app: web.Application,
        limits: Limits,
        allowed_peers: tuple[str, ...],
        *,
        what: str,
        setting: str,
        on_refused: Callable[[str], None],
        on_failure: Callable[[web.BaseRequest, BaseException | None], None],
    ):
        self.app = app
        self.limits = limits
        self.allowed_peers = frozenset(allowed_peers)
        self.what = what  # "/metrics", "the web console"
        self.setting = setting  # where the address comes from: "metrics.listen, or --metrics"
        self.on_refused = on_refused
        self.on_failure = on_failure
        self.address: tuple[str, int] | None = None
        self.evicted = 0
        self._runner: web.AppRunner | None = None
        self._server: asyncio.AbstractServer | None = None

    def _handler_options(self) -> dict[str, Any]:
        limits = self.limits
        return {
            "keepalive_timeout": limits.head_timeout_s,
            "max_line_size": limits.max_line_bytes,
            "max_field_size": limits.max_line_bytes,
            "max_headers": limits.max_headers,
            "lingering_time": 1.0,  # reading the rest of a refused upload, at most this long
            "access_log": None,
        }

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self._runner = web.AppRunner(self.app, handle_signals=False, shutdown_timeout=2.0, **self._handler_options())
        await self._runner.setup()
        manager = self._runner.server
        assert manager is not None
        loop = asyncio.get_running_loop()
        options = self._handler_options()
        try:
            self._server = await loop.create_server(
                lambda: _BoundedRequestHandler(self, manager, loop=loop, **options), host, port, reuse_address=True
            )
        except OSError as e:
            await self._runner.cleanup()
            self._runner = None
            raise SpamdError(f"cannot listen for {self.what} on {host}:{port}: {e.strerror} ({self.setting})") from None
        self.address = self._server.sockets[0].getsockname()[:2]
        return self.address

    def make_room(self, newcomer: _BoundedRequestHandler) -> None:
        """Past `max_connections`, close the oldest connection waiting for a request (or the oldest of all)."""
        runner = self._runner
        if runner is None or runner.server is None:
            return
        connections = [c for c in runner.server.connections if c is not newcomer]
        if len(connections) < self.limits.max_connections:
            return
        victim = next((c for c in connections if isinstance(c, _BoundedRequestHandler) and c.waiting), connections[0])
        self.evicted += 1
        victim.force_close()

    @property
    def open_connections(self) -> int:
        server = None if self._runner is None else self._runner.server
        return 0 if server is None else len(server.connections)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._runner is not None:
            await self._runner.cleanup()  # closes idle connections, gives requests in progress 2 s
            self._runner = None
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
