"""The LMTP listener (RFC 2033): score at final delivery, once per recipient's user, and answer per recipient.

Postfix hands mail here after alias expansion (`virtual_transport = lmtp:inet:...`),
so each recipient names one mailbox. The message is analyzed once and scored with
each distinct user's layer (`Scorer.score_for_users`); recipients whose users got the
same X-Spam-* headers go on together, one LMTP transaction per header set, to the
next hop (Dovecot's lmtp), or into spamd's own Maildirs when there is none. Each
recipient's reply is the next hop's reply for that recipient, as it gave it; a
recipient whose scoring or hand-on failed for a while gets a 4xx alone. Nothing is
answered 250 before the next hop answered 250 for it, or before the Maildir copy
is in new/ (and on disk with fsync on). The session itself (peer allow-list,
timeouts, chunked DATA, the yield while commands are pipelined) is the SMTP
listener's (`FilterSMTP`). No model logic here.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import re
import smtplib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog
from aiosmtpd.lmtp import LMTP
from aiosmtpd.smtp import SMTP, Envelope, Session

from spamd.config import Config
from spamd.config.addresses import parse_host_port
from spamd.engine.scoring import Scored, Scorer
from spamd.errors import SpamdError, StoreUnavailableError
from spamd.frontends.delivery import DeliveryProcesses
from spamd.frontends.maildir.deliver import deliver
from spamd.frontends.maildir.layout import Location
from spamd.frontends.maildir.mailbox import Mailbox, mailbox_for
from spamd.frontends.smtp import HOSTNAME, FilterSMTP, Sessions
from spamd.mail.auth.spf import SmtpSession
from spamd.model.bayes import Label, Verdict
from spamd.people.users import recipients_user

log = structlog.get_logger()

SCORING_FAILED = "451 4.3.0 Spam filter model unavailable, try again later"
NEXT_HOP_FAILED = "451 4.4.1 Next hop unavailable, try again later"
NEXT_HOP_BROKE = "451 4.4.2 Next hop closed the connection before answering, try again later"
INTERNAL_ERROR = "451 4.3.0 Internal error, try again later"
NO_SUCH_USER = "550 5.1.1 No such user here"
_BARE_LF_RE = re.compile(rb"(?<!\r)\n")


class FilterLMTP(FilterSMTP, LMTP):
    """The SMTP listener's session speaking LMTP: LHLO (HELO and EHLO refused, as aiosmtpd's LMTP does),
    and a DATA refused whole answered once for each recipient."""

    def data_refused(self, status: str) -> str:
        assert self.envelope is not None
        return "\r\n".join([status] * max(1, len(self.envelope.rcpt_tos)))


def reply_line(code: int, text: bytes | str) -> str:
    """An LMTP reply from smtplib's (code, text) as one line; a code that is no reply at all is a 451."""
    line = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    line = " ".join(line.split())  # a multi-line reply (smtplib joins them with \n) on one line
    if not 200 <= code <= 599:
        return f"{NEXT_HOP_BROKE} ({line})"[:500] if line else NEXT_HOP_BROKE
    return f"{code} {line}"[:500]


def hand_on(
    next_hop: str, timeout: float, mail_from: str, recipients: list[str], data: bytes, mail_options: list[str]
) -> list[str]:
    """One LMTP transaction with the next hop (blocking; run in a thread): its reply for each recipient, in order.

    Raises OSError or SMTPException if no reply for any recipient came (the connection, LHLO
    or MAIL failed for a while); replies missing after DATA (a connection cut) are 451.
    """
    host, port = (next_hop, 0) if next_hop.startswith("/") else parse_host_port(next_hop, "[lmtp] next_hop")
    data = _BARE_LF_RE.sub(b"\r\n", data)  # smtplib sends bytes as they are; LMTP wants CRLF
    client = smtplib.LMTP(host, port, local_hostname=HOSTNAME, timeout=timeout)
    try:
        code, text = client.ehlo()  # LHLO
        if code != 250:
            raise smtplib.SMTPHeloError(code, text)
        wanted = {"8bitmime": "BODY=", "smtputf8": "SMTPUTF8"}
        options = [
            o for o in mail_options if any(o.upper().startswith(w) and client.has_extn(e) for e, w in wanted.items())
        ]
        code, text = client.mail(mail_from, options)
        if code != 250:
            if code < 500:
                raise smtplib.SMTPSenderRefused(code, text, mail_from)
            return [reply_line(code, text)] * len(recipients)
        replies: list[str | None] = []
        accepted: list[int] = []
        for i, recipient in enumerate(recipients):
            code, text = client.rcpt(recipient)
            if code in (250, 251):
                accepted.append(i)
                replies.append(None)
            else:
                replies.append(reply_line(code, text))
        if accepted:
            try:
                code, text = client.data(data)
            except smtplib.SMTPDataError as e:  # DATA itself refused: each accepted recipient gets that
                for i in accepted:
                    replies[i] = reply_line(e.smtp_code, e.smtp_error)
                accepted = []
            for n, i in enumerate(accepted):
                if n:
                    try:
                        code, text = client.getreply()
                    except smtplib.SMTPServerDisconnected:
                        break  # the rest stay None: 451, and Postfix tries them again
                replies[i] = reply_line(code, text)
        return [NEXT_HOP_BROKE if r is None else r for r in replies]
    finally:
        with contextlib.suppress(OSError, smtplib.SMTPException):
            client.quit()
        client.close()


@dataclass
class Group:
    """Recipients whose users' scorings gave the same headers: one copy, one transaction."""

    scored: Scored
    users: list[str | None] = field(default_factory=list)
    recipients: list[str] = field(default_factory=list)


class LmtpHandler(Sessions):
    """aiosmtpd handler hooks for LMTP. `config` is read per call, so a reload applies to the next message."""

    way_in = "lmtp"

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
        self.writers = writers
        self.on_delivered = on_delivered
        # Recipients answered, by outcome: delivered (2xx), deferred (4xx), refused (5xx).
        self.recipients = {"delivered": 0, "deferred": 0, "refused": 0}
        self.address: tuple[str, int] | None = None

    async def start(self) -> asyncio.AbstractServer:
        """Listen on `[lmtp] listen`: a SpamdError naming the key if the address cannot be had."""
        loop = asyncio.get_running_loop()
        host, port = parse_host_port(self.config().lmtp.listen, "[lmtp] listen")
        try:
            server = await loop.create_server(lambda: FilterLMTP(self, self.config().lmtp, loop), host, port)
        except OSError as e:
            raise SpamdError(f"cannot listen for LMTP on {host}:{port}: {e.strerror} ([lmtp] listen)") from None
        self.address = server.sockets[0].getsockname()[:2]
        return server

    def started_fields(self) -> dict[str, object]:
        """lmtp_host / lmtp_port (the bound port when 0 was asked) / lmtp_next_hop for the daemon_started line."""
        assert self.address is not None
        return {
            "lmtp_host": self.address[0],
            "lmtp_port": self.address[1],
            "lmtp_next_hop": self.config().lmtp.next_hop or "maildir",
        }

    def stats(self) -> dict[str, object]:
        """`spamctl stats`' lmtp_* figures."""
        return {
            "lmtp_listen": None if self.address is None else "{}:{}".format(*self.address),
            "lmtp_next_hop": self.config().lmtp.next_hop or "maildir",
            "lmtp_sessions": len(self.sessions),
            "lmtp_in_flight": self.in_flight,
            "lmtp_accepted": self.accepted,
            "lmtp_recipients": dict(self.recipients),
        }

    async def handle_EHLO(
        self, server: SMTP, session: Session, envelope: Envelope, hostname: str, responses: list[str]
    ) -> list[str]:
        # RFC 2033 4.1: an LMTP server must support both; aiosmtpd answers pipelined commands in order.
        session.host_name = hostname  # what aiosmtpd does itself when there is no hook
        return [responses[0], "250-PIPELINING", "250-ENHANCEDSTATUSCODES", *responses[1:]]

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        config = self.config()
        if len(envelope.rcpt_tos) >= config.lmtp.max_recipients:
            return "452 4.5.3 Too many recipients"
        if not config.lmtp.next_hop and self._mailbox_for(config, address) is None:
            return NO_SUCH_USER
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(options)
        return "250 2.1.5 OK"

    def _mailbox_for(self, config: Config, recipient: str) -> Mailbox | None:
        return mailbox_for(recipient, self.mailboxes, per_user=bool(config.maildir.root) or len(self.mailboxes) > 1)

    def _user_of(self, config: Config, recipient: str) -> tuple[bool, str | None]:
        """(served, layer user): the recipient's Maildir user without a next hop, else its local part."""
        if config.lmtp.next_hop:
            return True, self.scorer.engine.layer_user(recipients_user([recipient]))
        mailbox = self._mailbox_for(config, recipient)
        return mailbox is not None, None if mailbox is None else mailbox.layer_user

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        """One reply per accepted RCPT, in their order (RFC 2033 4.2), duplicates included."""
        recipients = list(envelope.rcpt_tos)
        peer = session.peer[0] if isinstance(session.peer, tuple) else str(session.peer)
        try:
            answers = await self._transaction(self.config(), session, envelope, peer)
        except Exception as e:  # a bug of spamd's own: every recipient is tried again later
            log.error("lmtp_session_failed", peer=peer, error=f"{type(e).__name__}: {e}", exc_info=e)
            self.on_error("lmtp_session_failed", error=f"{type(e).__name__}: {e}")
            answers = {}
        replies = [answers.get(r, INTERNAL_ERROR) for r in recipients]
        for reply in replies:
            self.recipients["delivered" if reply[0] == "2" else "deferred" if reply[0] == "4" else "refused"] += 1
        if any(r[0] == "2" for r in replies):
            self.accepted += 1
        return "\r\n".join(replies)

    async def _transaction(self, config: Config, session: Session, envelope: Envelope, peer: str) -> dict[str, str]:
        started = time.perf_counter()
        raw = envelope.original_content or b""
        answers: dict[str, str] = {}
        by_user: dict[str | None, list[str]] = {}
        for recipient in dict.fromkeys(envelope.rcpt_tos):  # distinct, in order
            served, user = self._user_of(config, recipient)
            if not served:  # its Maildir went away since RCPT (a reload)
                answers[recipient] = NO_SUCH_USER
                continue
            by_user.setdefault(user, []).append(recipient)
        if not by_user:
            return answers
        client = SmtpSession(peer, envelope.mail_from or "", session.host_name or "")
        users = list(by_user)
        groups: dict[tuple[tuple[str, str], ...], Group] = {}
        for user, scored in zip(users, await self.scorer.score_for_users(raw, users, client), strict=True):
            if isinstance(scored, StoreUnavailableError):
                log.error("lmtp_scoring_failed", peer=peer, layer_user=user, error=str(scored))
                self.on_error("lmtp_scoring_failed", error=str(scored))
                answers.update(dict.fromkeys(by_user[user], SCORING_FAILED))
                continue
            group = groups.setdefault(scored.headers, Group(scored))
            group.users.append(user)
            group.recipients.extend(by_user[user])
        sends = [self._send(config, envelope, group, peer) for group in groups.values()]
        # One copy (the usual case, one recipient or users who agree) is awaited here, not as a task of its own.
        outcomes = [await sends[0]] if len(sends) == 1 else await asyncio.gather(*sends)
        for group, replies in zip(groups.values(), outcomes, strict=True):
            answers.update(replies)
            delivered = [r for r in group.recipients if replies[r][0] == "2"]
            if delivered:
                self._scored(config, raw, group, started, peer, delivered, by_user)
        return answers

    async def _send(self, config: Config, envelope: Envelope, group: Group, peer: str) -> dict[str, str]:
        if not config.lmtp.next_hop:
            return await self._deliver(config, group, peer)
        next_hop = config.lmtp.next_hop
        options = list(envelope.mail_options)
        try:
            replies = await asyncio.to_thread(
                hand_on,
                next_hop,
                config.lmtp.next_hop_timeout_s,
                envelope.mail_from or "",
                group.recipients,
                group.scored.data,
                options,
            )
        except (OSError, smtplib.SMTPException) as e:
            log.error("lmtp_next_hop_failed", peer=peer, next_hop=next_hop, error=f"{type(e).__name__}: {e}")
            self.on_error("lmtp_next_hop_failed", next_hop=next_hop, error=f"{type(e).__name__}: {e}")
            return dict.fromkeys(group.recipients, NEXT_HOP_FAILED)
        answers = dict(zip(group.recipients, replies, strict=True))
        for recipient, reply in answers.items():
            if reply[0] != "2":
                log.warning(
                    "lmtp_recipient_not_delivered", peer=peer, next_hop=next_hop, recipient=recipient, reply=reply
                )
        return answers

    async def _deliver(self, config: Config, group: Group, peer: str) -> dict[str, str]:
        """Into each recipient's Maildir, once per Maildir: 250 once it is in new/ (and on disk with fsync)."""
        answers: dict[str, str] = {}
        by_mailbox: dict[Mailbox, list[str]] = {}
        for recipient in group.recipients:
            mailbox = self._mailbox_for(config, recipient)
            if mailbox is None:
                answers[recipient] = NO_SUCH_USER
            else:
                by_mailbox.setdefault(mailbox, []).append(recipient)
        for mailbox, recipients in by_mailbox.items():
            try:
                loc = await deliver(mailbox, group.scored, config.maildir.fsync, self.writers)
            except OSError as e:
                what = f"{e.filename}: {e.strerror}" if e.filename else str(e.strerror)
                log.error("lmtp_delivery_failed", peer=peer, maildir=str(mailbox.root), error=what)
                self.on_error("lmtp_delivery_failed", maildir=str(mailbox.root), error=what)
                full = e.errno in (errno.ENOSPC, errno.EDQUOT)
                reply = "452 4.2.2 Mailbox full, try again later" if full else "451 4.3.0 Local delivery failed"
                answers.update(dict.fromkeys(recipients, reply))
                continue
            if self.on_delivered is not None:
                self.on_delivered(mailbox, loc)
            folder = loc.folder or "INBOX"
            answers.update({r: f"250 2.0.0 <{r}> delivered to {folder}" for r in recipients})
        return answers

    def _scored(
        self,
        config: Config,
        raw: bytes,
        group: Group,
        started: float,
        peer: str,
        delivered: list[str],
        by_user: dict[str | None, list[str]],
    ) -> None:
        """The canonical line (and live accuracy's verdict) once per user some copy was delivered to."""
        for user in group.users:
            mine = [r for r in by_user[user] if r in delivered]
            if not mine:
                continue
            scored = Scored(group.scored.data, group.scored.classified, group.scored.headers, user)
            via = config.lmtp.next_hop or "maildir"
            self.scorer.scored(
                scored, raw, started, way_in="lmtp", peer=peer, via=via, user_name=user or "", recipients=mine
            )
            if not config.lmtp.next_hop and config.maildir.autolearn and scored.score.verdict is not Verdict.UNSURE:
                label = Label.SPAM if scored.score.verdict is Verdict.SPAM else Label.HAM
                try:
                    self.scorer.learn(raw, label, "autolearn", user=False, layer_user=user, peer=peer)
                except SpamdError as e:  # delivered already: a 451 now would deliver it twice
                    log.error("autolearn_failed", peer=peer, error=str(e))
                    self.on_error("autolearn_failed", error=str(e))
