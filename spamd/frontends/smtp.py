"""The SMTP listener: receive, score, add headers, then deliver into a Maildir or relay to the next hop.

Answers 250 only once the message is durably in a Maildir (tmp/, fsync, rename
into new/, fsync the directory) or the next hop has answered 250 for it. A disk
or next-hop failure answers 4xx, and so does any bug of spamd's own
(`451 4.3.0`): the sending MTA keeps the message and retries, nothing is lost.
Mail only ever goes to the configured next hop or into the served Maildirs.
It holds no model logic: scoring is the Scorer's (the Engine's).
"""

from __future__ import annotations

import asyncio
import errno
import re
import smtplib
import socket
import time
from collections.abc import Callable
from typing import AnyStr

import structlog
from aiosmtpd.smtp import SMTP, Envelope, Session

from spamd.config import Config, LmtpConfig, SmtpConfig
from spamd.engine.scoring import Scored, Scorer
from spamd.errors import SpamdError, StoreUnavailableError
from spamd.frontends.delivery import DeliveryProcesses
from spamd.frontends.maildir.deliver import deliver
from spamd.frontends.maildir.layout import Location
from spamd.frontends.maildir.mailbox import Mailbox, mailbox_for
from spamd.mail.auth.spf import SmtpSession
from spamd.model.bayes import Label, Verdict
from spamd.people.users import recipients_user

log = structlog.get_logger()


def _write(transport: asyncio.BaseTransport, data: bytes) -> None:
    """A line to the client: aiosmtpd types its transport as a BaseTransport; a TCP connection's writes."""
    assert isinstance(transport, asyncio.WriteTransport)
    transport.write(data)


def _text(reply: bytes | str) -> str:
    """An SMTP reply's text as smtplib gives it (bytes; typed either way)."""
    return reply.decode("ascii", "replace") if isinstance(reply, bytes) else reply


HOSTNAME = socket.gethostname() or "localhost"
_BARE_LF_RE = re.compile(rb"(?<!\r)\n")
# "<local@domain>" with a dot-atom local part and domain: how MTAs write MAIL FROM and
# RCPT TO paths. aiosmtpd's _getaddr defines a typing.Protocol class and runs the email
# header parser on every call: 0.25 ms of the loop per message (two calls) under cProfile
# in scripts/speed/bench_smtp.py. For this shape `FilterSMTP._getaddr` gives the same answer
# itself (tests/test_smtp.py compares the two); anything else still goes to aiosmtpd.
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_PLAIN_PATH_RE = re.compile(rf"<({_ATOM}(?:\.{_ATOM})*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*)>")


class FilterSMTP(SMTP):
    """aiosmtpd's protocol with a peer allow-list and a separate DATA timeout (the LMTP listener's too)."""

    # RFC 5321 caps lines at 1000 octets and aiosmtpd answers a longer one with a
    # permanent 500, which would bounce real mail: 65 of trec07p-dev's first 3,000
    # messages have longer lines. A filter on loopback takes what its MTA hands it;
    # max_message_bytes still bounds the whole message.
    line_length_limit = 1024 * 1024

    def __init__(self, handler: Sessions, s: SmtpConfig | LmtpConfig, loop: asyncio.AbstractEventLoop):
        self.allowed_peers = frozenset(s.allowed_peers)
        self.data_timeout_s = s.data_timeout_s
        self.refused = False
        self.in_data = False  # a DATA transfer, its scoring and delivery under way
        self._deadline = 0.0  # when the session times out (see _reset_timeout)
        super().__init__(
            handler,
            data_size_limit=s.max_message_bytes,
            enable_SMTPUTF8=True,
            decode_data=False,
            hostname=HOSTNAME,  # not socket.getfqdn(): a DNS lookup per connection
            ident="spamd",
            timeout=s.idle_timeout_s,
            loop=loop,
        )
        self.filter = handler

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) and peer else str(peer)
        if host.startswith("::ffff:") and "." in host:
            host = host.removeprefix("::ffff:")  # IPv4 peer on a dual-stack listener
        super().connection_made(transport)
        if host not in self.allowed_peers:
            # Refused before the greeting: the session task never runs.
            self.refused = True
            assert self._handler_coroutine is not None
            self._handler_coroutine.cancel()
            log.warning(f"{self.filter.way_in}_peer_refused", peer=host)
            self.filter.scorer.metrics.session_refused(self.filter.way_in)
            _write(transport, b"554 5.7.1 spamd: connections from this address are not accepted\r\n")
            transport.close()
            return
        self.filter.sessions.add(self)
        self.filter.scorer.metrics.session_opened(self.filter.way_in)

    async def push(self, status: AnyStr) -> None:
        await super().push(status)
        # aiosmtpd takes pipelined commands from its buffer without ever yielding: 5,000
        # RCPTs in one write held the loop (and every other session) for as long as they
        # took, 1.5 s here. A yield per reply while more is buffered lets the others in.
        if self._reader._buffer:  # type: ignore[attr-defined]
            await asyncio.sleep(0)

    def _getaddr(self, arg: str) -> tuple[str | None, str | None]:
        plain = _PLAIN_PATH_RE.match(arg)
        rest = arg[plain.end() :].lstrip(" \t") if plain else ""
        if plain is None or rest.startswith("("):  # a comment after the path: aiosmtpd's parser takes it
            return super()._getaddr(arg)
        address = plain.group(1)
        if self.local_part_limit and len(address.rpartition("@")[0]) > self.local_part_limit:
            return None, None
        return address, rest

    def _reset_timeout(self, duration: float | None = None) -> None:
        # aiosmtpd cancels its timer and arms a new one for every command: 6% of the
        # loop's time under scripts/speed/bench_smtp.py (a TimerHandle, a heap push, and the
        # cancelled ones swept from the heap). One timer per session instead, moved only
        # when the new bound is earlier; when it fires before the bound it re-arms itself.
        self._deadline = self.loop.time() + (duration or self._timeout_duration)
        armed = self._timeout_handle
        if armed is None or armed.cancelled() or armed.when() > self._deadline:
            if armed is not None:
                armed.cancel()
            self._timeout_handle = self.loop.call_at(self._deadline, self._timeout_due)

    def _timeout_due(self) -> None:
        if self._deadline - self.loop.time() > 0.001:  # there was activity since it was armed
            self._timeout_handle = self.loop.call_at(self._deadline, self._timeout_due)
        else:
            self._timeout_cb()

    def _timeout_cb(self) -> None:
        # aiosmtpd hangs up without a word; say why first, as Postfix does (RFC 5321 4.2.2: 421).
        if self.transport is not None and not self.transport.is_closing():
            _write(self.transport, b"421 4.4.2 spamd: timeout exceeded, closing connection\r\n")
        super()._timeout_cb()

    def connection_lost(self, error: Exception | None) -> None:
        if not self.refused:
            self.filter.scorer.metrics.session_closed(self.filter.way_in)
        self.filter.sessions.discard(self)
        super().connection_lost(error)

    async def smtp_DATA(self, arg: str | None) -> None:
        # aiosmtpd's DATA reads line by line (a readuntil, a log call and a list append
        # per line: ~0.5 ms of the event loop for an average trec07p message, as much as
        # scoring it). This reads in 64 KiB chunks up to <CRLF>.<CRLF>; the rest of the
        # command (checks, the hook, the reply) is as aiosmtpd does it.
        if await self.check_helo_needed() or await self.check_auth_needed("DATA"):
            return
        assert self.envelope is not None
        if not self.envelope.rcpt_tos:
            await self.push("503 Error: need RCPT command")
            return
        if arg:
            await self.push("501 Syntax: DATA")
            return
        # The idle timeout is reset per command; a DATA transfer (and its scoring and
        # delivery) gets its own, longer bound. Shutdown waits for it to finish.
        self._reset_timeout(self.data_timeout_s)
        self.filter.transaction_started()
        self.in_data = True
        try:
            await self.push("354 End data with <CR><LF>.<CR><LF>")
            content = await self._read_data()
            if content is None:
                refused = self.data_refused("552 5.3.4 Error: Too much mail data")  # before the envelope is reset
                self._set_post_data_state()
                await self.push(refused)
                return
            self.envelope.content = self.envelope.original_content = content
            status = await self._call_handler_hook("DATA")
            self._set_post_data_state()
            await self.push(status)
        finally:
            self.in_data = False
            self.filter.transaction_ended()
            if self.transport is not None:
                self._reset_timeout()

    def data_refused(self, status: str) -> str:
        """The answer to a DATA refused whole (LMTP repeats it for each recipient)."""
        return status

    async def _read_data(self) -> bytes | None:
        """The message up to <CRLF>.<CRLF>, dot-stuffing undone; None if over the size limit (read all the same)."""
        reader = self._reader
        limit = self.data_size_limit or 0
        buf = bytearray(b"\r\n")  # so that an empty message (".\r\n" at once) ends like any other
        dropped = 0
        while True:
            end = buf.find(b"\r\n.\r\n", max(0, len(buf) - 65536 - 4))
            if end != -1:
                break
            if limit and len(buf) + dropped > limit + 2:
                dropped += len(buf) - 4  # over the limit: keep reading to the end, keep nothing
                del buf[:-4]
            chunk = await reader.read(65536)
            if not chunk:
                raise ConnectionResetError("connection closed during DATA")
            buf += chunk
        extra = bytes(buf[end + 5 :])
        if extra:
            # Only a client pipelining without PIPELINING sends more; hand it back to the
            # command loop (aiosmtpd itself reaches into the reader's buffer for STARTTLS).
            reader._buffer[:0] = extra  # type: ignore[attr-defined]
        if dropped or (limit and end - 2 > limit):
            return None
        return bytes(buf[: end + 2]).replace(b"\r\n.", b"\r\n")[2:]


class RelayRefused(Exception):
    """The next hop answered the message with a permanent (5xx) rejection."""

    def __init__(self, code: int, text: str):
        super().__init__(code, text)
        self.code, self.text = code, text


def relay_message(config: Config, envelope: Envelope, data: bytes) -> dict[str, tuple[int, bytes]]:
    """Hand the message to the configured next hop (blocking; run in a thread).

    Returns the recipients the next hop refused while it accepted others.
    Raises RelayRefused for a permanent rejection, OSError/SMTPException otherwise.
    """
    s = config.smtp
    data = _BARE_LF_RE.sub(b"\r\n", data)  # smtplib sends bytes as they are; SMTP wants CRLF
    options = [o for o in envelope.mail_options if o.upper().startswith(("BODY=", "SMTPUTF8"))]
    with smtplib.SMTP(
        s.next_hop_host, s.next_hop_port, local_hostname=HOSTNAME, timeout=s.next_hop_timeout_s
    ) as client:
        try:
            return client.sendmail(envelope.mail_from or "", envelope.rcpt_tos, data, mail_options=options)
        except smtplib.SMTPRecipientsRefused as e:
            codes = [code for code, _ in e.recipients.values()]
            if codes and all(code >= 500 for code in codes):
                code, text = next(iter(e.recipients.values()))
                raise RelayRefused(code, _text(text)) from None
            raise
        except (smtplib.SMTPSenderRefused, smtplib.SMTPDataError) as e:
            if e.smtp_code >= 500:
                raise RelayRefused(e.smtp_code, _text(e.smtp_error)) from None
            raise


class Sessions:
    """A listener's sessions: those open, messages in flight, the drain at shutdown; its handler hooks' base."""

    way_in = "smtp"  # the metrics' label and the log events' prefix

    def __init__(self, scorer: Scorer, on_error: Callable[..., None]):
        self.scorer = scorer
        self.on_error = on_error
        self.sessions: set[FilterSMTP] = set()
        self.in_flight = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self.accepted = 0

    def transaction_started(self) -> None:
        """DATA began: shutdown waits for it (transfer, scoring, delivery) to finish."""
        self.in_flight += 1
        self.idle.clear()

    def transaction_ended(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self.idle.set()

    async def handle_exception(self, error: Exception) -> str:
        # aiosmtpd's default answers 500 with the exception text: a filter's own failure
        # must make the sender retry, and must not show internals.
        log.error(f"{self.way_in}_session_failed", error=f"{type(error).__name__}: {error}", exc_info=error)
        self.on_error(f"{self.way_in}_session_failed", error=f"{type(error).__name__}: {error}")
        return "451 4.3.0 Internal error, try again later"

    async def drain(self, timeout: float) -> None:  # noqa: ASYNC109  a grace period: on timeout it goes on to close the rest, which a caller's timeout would cancel
        """Close sessions between messages now (421), wait for messages in flight, then close the rest."""
        # At once, not after the drain: an idle session must not start a message meanwhile.
        self._close_sessions(in_data=False)
        try:
            await asyncio.wait_for(self.idle.wait(), timeout)
        except TimeoutError:
            log.warning(f"{self.way_in}_drain_timeout", in_flight=self.in_flight)
        self._close_sessions()

    def _close_sessions(self, in_data: bool | None = None) -> None:
        for session in list(self.sessions):
            if in_data is not None and session.in_data != in_data:
                continue
            if session.transport is not None and not session.transport.is_closing():
                _write(session.transport, b"421 4.3.2 spamd shutting down, try again later\r\n")
                session.transport.close()


class SmtpHandler(Sessions):
    """aiosmtpd handler hooks. `config` is read per call, so a reload applies to the next message."""

    def __init__(
        self,
        config: Callable[[], Config],
        scorer: Scorer,
        mailboxes: list[Mailbox],
        on_error: Callable[..., None],
        writers: DeliveryProcesses | None = None,
        on_delivered: Callable[[Mailbox, Location], None] | None = None,
    ):
        super().__init__(scorer, on_error)
        self.config = config
        self.mailboxes = mailboxes
        self.writers = writers  # delivery processes; None: the daemon's threads write
        self.on_delivered = on_delivered  # (mailbox, location): the watcher, which never sees these deliveries

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        config = self.config()
        if len(envelope.rcpt_tos) >= config.smtp.max_recipients:
            return "452 4.5.3 Too many recipients"
        if config.smtp.mode == "deliver" and self._mailbox_for(config, address) is None:
            return "550 5.1.1 No such user here"
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(options)
        return "250 2.1.5 OK"

    def _layer_user(self, config: Config, envelope: Envelope, mailboxes: list[Mailbox | None]) -> str | None:
        """Whose layer scores this message: the recipients' one user, or None (the shared model) for several.

        Deliver mode: the Maildir user every recipient's mail goes to (`mailboxes`, one
        per recipient); relay: the recipients' one local part (spamd.people.users.recipients_user).
        """
        if config.smtp.mode == "relay":
            return self.scorer.engine.layer_user(recipients_user(list(envelope.rcpt_tos)))
        users = {m.layer_user if m is not None else None for m in mailboxes}
        return users.pop() if len(users) == 1 else None

    def _mailbox_for(self, config: Config, recipient: str) -> Mailbox | None:
        # One Maildir per user (under maildir.root, or several paths): the recipient must be one of them.
        return mailbox_for(recipient, self.mailboxes, per_user=bool(config.maildir.root) or len(self.mailboxes) > 1)

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        started = time.perf_counter()
        config = self.config()
        raw = envelope.original_content or b""
        peer = session.peer[0] if isinstance(session.peer, tuple) else str(session.peer)
        # Each recipient's Maildir, looked up once for the layer, the delivery and the log line (it was
        # looked up for each: 1.3 us a look-up among 20 users' Maildirs, timeit; 4 us a message under bench_smtp --users 20).
        mailboxes = [self._mailbox_for(config, r) for r in envelope.rcpt_tos] if config.smtp.mode == "deliver" else []
        layer_user = self._layer_user(config, envelope, mailboxes)
        try:
            client = SmtpSession(peer, envelope.mail_from or "", session.host_name or "")
            scored = await self.scorer.score_beside_the_loop(raw, layer_user, client)
        except StoreUnavailableError as e:  # the shared model (Redis) is down: the sender retries
            log.error("smtp_scoring_failed", peer=peer, error=str(e))
            self.on_error("smtp_scoring_failed", error=str(e))
            return "451 4.3.0 Spam filter model unavailable, try again later"
        if config.smtp.mode == "relay":
            status = await self._relay(config, envelope, scored, peer)
            where: dict[str, object] = {"via": "relay"}
        else:
            status, folders = await self._deliver(config, mailboxes, scored, peer)
            users = {m.user for m in mailboxes if m is not None}
            where = {"via": "maildir", "delivered_to": folders, "user_name": ",".join(sorted(users))}
        if status.startswith("250"):
            self.accepted += 1
            self.scorer.scored(scored, raw, started, way_in="smtp", peer=peer, **where)
            if (
                config.smtp.mode == "deliver"
                and config.maildir.autolearn
                and scored.score.verdict is not Verdict.UNSURE
            ):
                label = Label.SPAM if scored.score.verdict is Verdict.SPAM else Label.HAM
                try:
                    self.scorer.learn(raw, label, "autolearn", user=False, layer_user=layer_user, peer=peer)
                except SpamdError as e:  # delivered already: a 451 now would deliver it twice
                    log.error("autolearn_failed", peer=peer, error=str(e))
                    self.on_error("autolearn_failed", error=str(e))
        return status

    async def _deliver(
        self, config: Config, mailboxes: list[Mailbox | None], scored: Scored, peer: str
    ) -> tuple[str, list[str]]:
        targets: list[Mailbox] = []
        for mailbox in mailboxes:  # None only if refused at RCPT
            if mailbox is not None and mailbox not in targets:
                targets.append(mailbox)
        delivered: list[str] = []
        for mailbox in targets:
            try:
                loc = await deliver(mailbox, scored, config.maildir.fsync, self.writers)
            except OSError as e:
                # Copies already written stay: a retry duplicates them rather than losing any.
                what = "disk full" if e.errno == errno.ENOSPC else e.strerror
                what = f"{e.filename}: {what}" if e.filename else what
                log.error("smtp_delivery_failed", peer=peer, maildir=str(mailbox.root), error=what)
                self.on_error("smtp_delivery_failed", maildir=str(mailbox.root), error=what)
                if e.errno in (errno.ENOSPC, errno.EDQUOT):
                    return "452 4.3.1 Insufficient system storage, try again later", delivered
                return "451 4.3.0 Local delivery failed, try again later", delivered
            if self.on_delivered is not None:
                self.on_delivered(mailbox, loc)
            # The path from the Maildir's directory on ("Maildir/.Junk/new/<name>"), joined as strings:
            # Path.relative_to took 5.5 us of the loop's time a delivery (timeit, a 2-core machine).
            delivered.append("/".join(part for part in (mailbox.root.name, loc.folder, loc.sub, loc.name) if part))
        return "250 2.0.0 OK delivered", delivered

    async def _relay(self, config: Config, envelope: Envelope, scored: Scored, peer: str) -> str:
        next_hop = f"{config.smtp.next_hop_host}:{config.smtp.next_hop_port}"
        try:
            refused = await asyncio.to_thread(relay_message, config, envelope, scored.data)
        except RelayRefused as e:
            log.warning("smtp_relay_refused", peer=peer, next_hop=next_hop, code=e.code, reply=e.text)
            return f"{e.code} 5.0.0 Next hop refused the message: {e.text}"[:500]
        except (OSError, smtplib.SMTPException) as e:
            log.error("smtp_relay_failed", peer=peer, next_hop=next_hop, error=f"{type(e).__name__}: {e}")
            self.on_error("smtp_relay_failed", next_hop=next_hop, error=f"{type(e).__name__}: {e}")
            return "451 4.4.1 Next hop unavailable, try again later"
        if refused:
            # Accepted for the others; these bounce at the next hop's discretion, not ours.
            log.error("smtp_relay_partly_refused", peer=peer, next_hop=next_hop, refused=sorted(refused))
            self.on_error("smtp_relay_partly_refused", refused=sorted(refused))
        return "250 2.0.0 OK relayed"
