"""The milter listener: Postfix (or Sendmail) shows spamd each message; spamd answers at its end.

Speaks the Sendmail milter protocol (version 6, as Postfix's src/milter/milter8.c does)
on the daemon's event loop. At end of message it scores the reassembled message through
the Scorer, for the one user the envelope recipients name (spamd.people.users.recipients_user;
several users: the shared model alone), and answers with header changes (remove every X-Spam-* header the message
arrived with, add spamd's own), a 554 5.7.1 refusal at `milter.reject_at`, or a
451 4.7.1 tempfail for its own failures, so the MTA keeps the message and nothing is
lost. With `[auth] spf` it also takes the SMTP session the MTA saw (the client's address,
HELO, MAIL FROM) for SPF. It never re-injects or stores mail (the MTA does) and holds no
model logic.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct
import time
from collections.abc import Callable

import structlog

from spamd.config import Config
from spamd.engine.scoring import Scored, Scorer
from spamd.mail.auth.spf import SmtpSession
from spamd.people.users import recipient_name, recipients_user

log = structlog.get_logger()

# Commands, MTA -> milter (sendmail libmilter/mfdef.h, Postfix milter8.c).
SMFIC_ABORT = b"A"
SMFIC_BODY = b"B"
SMFIC_CONNECT = b"C"
SMFIC_MACRO = b"D"
SMFIC_BODYEOB = b"E"
SMFIC_HELO = b"H"
SMFIC_QUIT_NC = b"K"
SMFIC_HEADER = b"L"
SMFIC_MAIL = b"M"
SMFIC_EOH = b"N"
SMFIC_OPTNEG = b"O"
SMFIC_QUIT = b"Q"
SMFIC_RCPT = b"R"
SMFIC_DATA = b"T"
SMFIC_UNKNOWN = b"U"

# Replies, milter -> MTA.
SMFIR_ADDHEADER = b"h"
SMFIR_CHGHEADER = b"m"
SMFIR_CONTINUE = b"c"
SMFIR_REPLYCODE = b"y"

# Actions the milter asks to be allowed (SMFIF_*).
SMFIF_ADDHDRS = 0x01
SMFIF_CHGHDRS = 0x10
ACTIONS = SMFIF_ADDHDRS | SMFIF_CHGHDRS

# Protocol flags (SMFIP_*): events not to be sent, and events not to be replied to.
SMFIP_NOCONNECT = 1 << 0
SMFIP_NOHELO = 1 << 1
SMFIP_NOMAIL = 1 << 2
SMFIP_NORCPT = 1 << 3
SMFIP_NOEOH = 1 << 6
SMFIP_NR_HDR = 1 << 7
SMFIP_NOUNKNOWN = 1 << 8
SMFIP_NODATA = 1 << 9
SMFIP_NR_CONN = 1 << 12
SMFIP_NR_HELO = 1 << 13
SMFIP_NR_MAIL = 1 << 14
SMFIP_NR_RCPT = 1 << 15
SMFIP_NR_DATA = 1 << 16
SMFIP_NR_UNKN = 1 << 17
SMFIP_NR_EOH = 1 << 18
SMFIP_NR_BODY = 1 << 19
# spamd needs only the recipients (whose layer scores the message), the headers and the
# body: everything else is skipped, and recipients, headers and body chunks go unanswered
# (one round trip per message instead of one per recipient and header), where the MTA
# offers it. Postfix 3.x offers all of these with milter_protocol = 6.
WANTED_PROTOCOL = (
    SMFIP_NOCONNECT | SMFIP_NOHELO | SMFIP_NOMAIL | SMFIP_NOEOH | SMFIP_NOUNKNOWN
    | SMFIP_NODATA | SMFIP_NR_RCPT | SMFIP_NR_HDR | SMFIP_NR_BODY
)  # fmt: skip
# With `[auth] spf` the session's events come too (the client's address, HELO, MAIL FROM), unanswered
# where the MTA offers it, as the recipients are: no round trip more per message.
SESSION_EVENTS = SMFIP_NOCONNECT | SMFIP_NOHELO | SMFIP_NOMAIL
SESSION_NO_REPLY = SMFIP_NR_CONN | SMFIP_NR_HELO | SMFIP_NR_MAIL
# The connect event's address families (SMFIA_*): only a TCP client has an address SPF can check.
INET_FAMILIES = (b"4", b"6")
# A host name or address longer than this is not one (RFC 1035: 255); a longer one is cut, and fails.
MAX_NAME_BYTES = 512
NO_REPLY_FLAGS = {
    SMFIC_CONNECT: SMFIP_NR_CONN,
    SMFIC_HELO: SMFIP_NR_HELO,
    SMFIC_MAIL: SMFIP_NR_MAIL,
    SMFIC_RCPT: SMFIP_NR_RCPT,
    SMFIC_DATA: SMFIP_NR_DATA,
    SMFIC_UNKNOWN: SMFIP_NR_UNKN,
    SMFIC_HEADER: SMFIP_NR_HDR,
    SMFIC_EOH: SMFIP_NR_EOH,
    SMFIC_BODY: SMFIP_NR_BODY,
}
PROTOCOL_VERSION = 6

# Postfix sends body chunks of at most 65,535 bytes and headers of at most
# header_size_limit (102,400 by default); a bigger length prefix is not a milter client.
MAX_PACKET_BYTES = 1024 * 1024
# X-Spam-* headers removed per message; a message with more is not one an MTA relays.
MAX_OWN_HEADERS = 1000
# Packets handled before letting other connections in: a client's whole buffer of tiny
# packets is read without the loop ever waiting.
YIELD_EVERY = 64
OWN_HEADER_PREFIX = b"x-spam-"

TEMPFAIL_INTERNAL = "451 4.7.1 spamd: internal error, try again later"
TEMPFAIL_TOO_BIG = "451 4.7.1 spamd: message too big to scan, try again later"
REJECT_SPAM = "554 5.7.1 spamd: message refused as spam"


class MilterProtocolError(Exception):
    """The peer does not speak the milter protocol (or breaks it): the connection is closed."""


def packet(command: bytes, data: bytes = b"") -> bytes:
    """One milter packet: 4-byte big-endian length (command included), command, data."""
    return struct.pack("!I", len(data) + 1) + command + data


def _first_string(data: bytes) -> str:
    """The first NUL-terminated string of a HELO or MAIL packet (MAIL's ESMTP arguments follow it)."""
    return data.split(b"\0", 1)[0][:MAX_NAME_BYTES].decode("utf-8", "replace").strip()


def _cstrings(data: bytes) -> list[bytes]:
    """NUL-terminated strings of a packet (a missing last NUL is tolerated)."""
    parts = data.split(b"\0")
    return parts[:-1] if parts and parts[-1] == b"" else parts


class Message:
    """One message as the MTA shows it: headers and body reassembled (CRLF), counted whole.

    Keeps only as many bytes as the parser reads (the verdict is the same); never parses.
    """

    def __init__(self, keep_bytes: int, max_bytes: int):
        self.keep_bytes = keep_bytes  # the parser reads no further (parser.max_bytes)
        self.max_bytes = max_bytes
        self.kept = bytearray()
        self.size = 0
        self.in_body = False
        self.own_headers: dict[bytes, int] = {}  # X-Spam-* name as sent first -> occurrences
        self.own_count = 0
        self.started = time.perf_counter()

    @property
    def too_big(self) -> bool:
        return self.size > self.max_bytes

    def _add(self, data: bytes) -> None:
        self.size += len(data)
        room = self.keep_bytes - len(self.kept)
        if room > 0:
            self.kept += data[:room]

    def header(self, name: bytes, value: bytes) -> None:
        if name.lower().startswith(OWN_HEADER_PREFIX):
            # Counted per name, case-insensitively, as Postfix's cleanup finds them by index.
            key = next((k for k in self.own_headers if k.lower() == name.lower()), name)
            self.own_headers[key] = self.own_headers.get(key, 0) + 1
            self.own_count += 1
        # Folded values come with LF between their lines (Sendmail's form); one space after
        # the colon was eaten by the MTA and is put back.
        value = value.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
        self._add(name + b": " + value + b"\r\n")

    def body(self, chunk: bytes) -> None:
        if not self.in_body:
            self.in_body = True
            self._add(b"\r\n")
        self._add(chunk)

    def raw(self) -> bytes:
        if not self.in_body:
            self.body(b"")
        return bytes(self.kept)


class MilterServer:
    """Milter connections: the peer check, one session task each, the drain at shutdown.

    `config` is read per message, so a reload applies to the next one; it never scores itself.
    """

    def __init__(self, config: Callable[[], Config], scorer: Scorer, on_error: Callable[..., None]):
        self.config = config
        self.scorer = scorer
        self.on_error = on_error
        self.sessions: set[MilterSession] = set()
        self.in_flight = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self.draining = False

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) and peer else str(peer)
        if host.startswith("::ffff:") and "." in host:
            host = host.removeprefix("::ffff:")  # IPv4 peer on a dual-stack listener
        if host not in self.config().smtp.allowed_peers or self.draining:
            if not self.draining:
                log.warning("milter_peer_refused", peer=host)
                self.scorer.metrics.session_refused("milter")
            writer.close()
            return
        session = MilterSession(self, reader, writer, host)
        self.sessions.add(session)
        self.scorer.metrics.session_opened("milter")
        try:
            await session.run()
        finally:
            self.scorer.metrics.session_closed("milter")
            self.sessions.discard(session)
            session.end_message()
            writer.close()

    def message_started(self) -> None:
        self.in_flight += 1
        self.idle.clear()

    def message_ended(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self.idle.set()

    async def drain(self, timeout: float) -> None:  # noqa: ASYNC109  a grace period: on timeout it goes on to close the rest, which a caller's timeout would cancel
        """Close connections between messages now, wait for messages in flight, then close the rest."""
        self.draining = True
        for session in list(self.sessions):
            if session.message is None:
                session.close()
        try:
            await asyncio.wait_for(self.idle.wait(), timeout)
        except TimeoutError:
            log.warning("milter_drain_timeout", in_flight=self.in_flight)
        for session in list(self.sessions):
            session.close()


class MilterSession:
    """One MTA connection: option negotiation, then any number of messages (ABORT or end of body ends one).

    Answers only what was not negotiated away; a peer that breaks the protocol is disconnected, not argued with.
    """

    def __init__(self, server: MilterServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str):
        self.server = server
        self.reader = reader
        self.writer = writer
        self.peer = peer
        self.negotiated = False
        self.no_reply: set[bytes] = set()
        self.macros: dict[str, str] = {}
        self.message: Message | None = None
        # The envelope's recipients by the name each gives, two at most: a second name
        # already means no one user (recipients_user), so a flood of RCPTs holds nothing.
        self.recipients: dict[str, str] = {}
        # The SMTP session the MTA saw, for SPF (only with `[auth] spf`: else these events are skipped).
        self.client_ip = ""
        self.helo = ""
        self.mail_from = ""
        self.deadline = 0.0
        sock = writer.get_extra_info("socket")
        self.quickack = sock if sock is not None and hasattr(socket, "TCP_QUICKACK") else None

    def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()

    async def run(self) -> None:
        handled = 0
        try:
            while not self.writer.is_closing():
                command, data = await self._read_packet()
                if not await self._dispatch(command, data):
                    return
                handled += 1
                if handled % YIELD_EVERY == 0:
                    await asyncio.sleep(0)
        except asyncio.IncompleteReadError:
            if self.message is not None:
                log.warning("milter_client_vanished", peer=self.peer, during="message", **self._ids())
        except TimeoutError:  # (before OSError, its base class)
            # The MTA applies its milter_default_action (tempfail) to a message in progress.
            log.warning("milter_timeout", peer=self.peer, during="message" if self.message else "idle", **self._ids())
        except OSError as e:
            log.warning("milter_client_vanished", peer=self.peer, error=f"{type(e).__name__}: {e}", **self._ids())
        except MilterProtocolError as e:
            log.warning("milter_protocol_error", peer=self.peer, error=str(e))
        except Exception as e:  # a bug of spamd's own: the MTA sees the connection close and tempfails
            log.error(
                "milter_session_failed", peer=self.peer, error=f"{type(e).__name__}: {e}", exc_info=e, **self._ids()
            )
            self.server.on_error("milter_session_failed", error=f"{type(e).__name__}: {e}")

    def _ids(self) -> dict[str, str]:
        return {"queue_id": self.macros["i"]} if "i" in self.macros else {}

    async def _read_packet(self) -> tuple[bytes, bytes]:
        config = self.server.config().milter
        timeout = config.idle_timeout_s if self.message is None else max(0.0, self.deadline - time.monotonic())
        if self.quickack:
            # Postfix writes a message's packets without waiting for replies (no_reply flags) and
            # Nagle holds each small write until the last is acknowledged, which Linux delays up
            # to 40 ms: acknowledging at once took the client's wait per message through Postfix
            # from 52.9 to 30.1 ms (scripts/speed/bench_postfix.py, 300 messages, 4 clients; 13.8 with
            # no filter). It is a one-shot flag, so it is set again before every read.
            self.quickack.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        async with asyncio.timeout(timeout):
            (length,) = struct.unpack("!I", await self.reader.readexactly(4))
            if not 1 <= length <= MAX_PACKET_BYTES:
                raise MilterProtocolError(f"packet length {length} outside 1..{MAX_PACKET_BYTES}")
            data = await self.reader.readexactly(length)
        return data[:1], data[1:]

    async def _send(self, *packets: bytes) -> None:
        self.writer.write(b"".join(packets))
        # A peer that never reads its replies must not hold the session forever.
        async with asyncio.timeout(self.server.config().milter.idle_timeout_s):
            await self.writer.drain()

    async def _continue(self, command: bytes) -> None:
        if command not in self.no_reply:
            await self._send(packet(SMFIR_CONTINUE))

    def _start_message(self) -> Message:
        if self.message is None:
            config = self.server.config()
            self.message = Message(config.parser.max_bytes, config.milter.max_message_bytes)
            self.deadline = time.monotonic() + config.milter.message_timeout_s
            self.server.message_started()
        return self.message

    def end_message(self) -> None:
        self.recipients.clear()
        if self.message is not None:
            self.message = None
            self.server.message_ended()

    async def _dispatch(self, command: bytes, data: bytes) -> bool:
        """Handle one packet; False ends the connection."""
        if not self.negotiated:
            if command != SMFIC_OPTNEG:
                raise MilterProtocolError(f"expected option negotiation first, got command {command!r}")
            await self._negotiate(data)
            return True
        if command == SMFIC_MACRO:
            self._macros(data)
        elif command == SMFIC_HEADER:
            fields = _cstrings(data)
            if len(fields) != 2 or not fields[0]:
                raise MilterProtocolError("header packet without a name and a value")
            message = self._start_message()
            message.header(fields[0], fields[1])
            if message.own_count > MAX_OWN_HEADERS:
                raise MilterProtocolError(f"more than {MAX_OWN_HEADERS} X-Spam-* headers in one message")
            await self._continue(command)
        elif command == SMFIC_BODY:
            self._start_message().body(data)
            await self._continue(command)
        elif command == SMFIC_EOH:
            self._start_message()
            await self._continue(command)
        elif command == SMFIC_BODYEOB:
            message = self._start_message()
            if data:  # Sendmail's libmilter accepts a last chunk with the end of body
                message.body(data)
            await self._end_of_message(message)
            self.end_message()
            if self.server.draining:
                return False
        elif command == SMFIC_ABORT:
            self.end_message()
        elif command in (SMFIC_CONNECT, SMFIC_HELO, SMFIC_MAIL, SMFIC_RCPT, SMFIC_DATA, SMFIC_UNKNOWN):
            if command in (SMFIC_CONNECT, SMFIC_MAIL):  # a new envelope: nothing of an old message stays
                self.end_message()
            if command == SMFIC_CONNECT:
                self._connect(data)
            elif command == SMFIC_HELO:
                self.helo = _first_string(data)
            elif command == SMFIC_MAIL:
                self.mail_from = _first_string(data)
            elif command == SMFIC_RCPT:
                self._recipient(data)
            await self._continue(command)
        elif command == SMFIC_QUIT:
            return False
        elif command == SMFIC_QUIT_NC:  # the MTA reuses the connection for another SMTP session
            self.end_message()
            self.macros.clear()
            self.client_ip = self.helo = self.mail_from = ""
        elif command == SMFIC_OPTNEG:
            raise MilterProtocolError("option negotiation repeated")
        else:
            raise MilterProtocolError(f"unknown command {command!r}")
        return True

    async def _negotiate(self, data: bytes) -> None:
        if len(data) < 12:
            raise MilterProtocolError(f"option negotiation of {len(data)} bytes, expected 12")
        version, actions, protocol = struct.unpack("!III", data[:12])
        if version < 2:
            raise MilterProtocolError(f"milter protocol version {version} is too old (2 or later)")
        if actions & ACTIONS != ACTIONS:
            # Without them spamd could neither mark the message nor remove forged verdicts.
            raise MilterProtocolError(f"the MTA does not allow adding and changing headers (actions 0x{actions:x})")
        wanted = WANTED_PROTOCOL
        auth = self.server.config().auth
        if auth.enabled and auth.spf:
            wanted = (wanted & ~SESSION_EVENTS) | SESSION_NO_REPLY
        chosen = wanted & protocol
        self.no_reply = {command for command, flag in NO_REPLY_FLAGS.items() if chosen & flag}
        self.negotiated = True
        log.debug(
            "milter_negotiated",
            peer=self.peer,
            version=version,
            actions=hex(actions),
            offered=hex(protocol),
            chosen=hex(chosen),
        )
        await self._send(packet(SMFIC_OPTNEG, struct.pack("!III", min(version, PROTOCOL_VERSION), ACTIONS, chosen)))

    def _connect(self, data: bytes) -> None:
        """The client's address from the connect event: host name NUL, family, port, address NUL."""
        self.client_ip = self.helo = self.mail_from = ""
        _, sep, rest = data.partition(b"\0")
        if not sep or rest[:1] not in INET_FAMILIES or len(rest) < 4:
            return  # a local submission (unix socket, unknown family): no address to check
        address = rest[3:].split(b"\0", 1)[0][:MAX_NAME_BYTES].decode("ascii", "replace")
        try:
            parsed = ipaddress.ip_address(address.removeprefix("IPv6:").removeprefix("ipv6:"))
        except ValueError:
            log.warning("milter_client_address_unreadable", peer=self.peer, address=address[:64], **self._ids())
            return
        if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
            parsed = parsed.ipv4_mapped
        self.client_ip = str(parsed)

    def _session(self) -> SmtpSession | None:
        """The SMTP session the MTA reported, for SPF; None without a client address."""
        return SmtpSession(self.client_ip, self.mail_from, self.helo) if self.client_ip else None

    def _recipient(self, data: bytes) -> None:
        # The first string is the address as the client gave it, "<alice@example.com>";
        # ESMTP arguments follow. A message's recipients all come before its headers.
        fields = _cstrings(data)
        if not fields or len(self.recipients) >= 2:
            return
        address = fields[0][:512].decode("utf-8", "replace").strip().removeprefix("<").removesuffix(">")
        self.recipients.setdefault(recipient_name(address), address)

    def _layer_user(self) -> str | None:
        """Whose layer scores the message: the recipients' one user, or None (several users, none, a bad name)."""
        if not self.recipients:
            return None
        return self.server.scorer.engine.layer_user(recipients_user(self.recipients.values()))

    def _macros(self, data: bytes) -> None:
        # Only what the log line uses: the queue id ("i", sent with the end of message).
        fields = _cstrings(data[1:])
        for name, value in zip(fields[::2], fields[1::2], strict=False):  # a last name with no value is dropped
            if name.strip(b"{}") == b"i":
                self.macros["i"] = value[:64].decode("ascii", "replace")

    async def _end_of_message(self, message: Message) -> None:
        config = self.server.config()
        ids = self._ids()
        if message.too_big:
            log.warning("milter_message_refused", peer=self.peer, reason="too_big", bytes=message.size,
                        limit=config.milter.max_message_bytes, reply=TEMPFAIL_TOO_BIG, **ids)  # fmt: skip
            await self._send(packet(SMFIR_REPLYCODE, TEMPFAIL_TOO_BIG.encode() + b"\0"))
            return
        raw = message.raw()
        layer_user = self._layer_user()
        if layer_user is not None:
            ids["user_name"] = layer_user
        try:
            scored = await self.server.scorer.score_beside_the_loop(raw, layer_user, self._session())
        except Exception as e:  # spamd's own failure: the MTA keeps the message and the sender retries
            log.error("milter_scoring_failed", peer=self.peer, error=f"{type(e).__name__}: {e}", exc_info=e, **ids)
            self.server.on_error("milter_scoring_failed", error=f"{type(e).__name__}: {e}")
            await self._send(packet(SMFIR_REPLYCODE, TEMPFAIL_INTERNAL.encode() + b"\0"))
            return
        reject_at = config.milter.reject_at
        if reject_at and scored.score.probability >= reject_at:
            await self._send(packet(SMFIR_REPLYCODE, REJECT_SPAM.encode() + b"\0"))
            action = "rejected"
        else:
            await self._send(*self._header_changes(message, scored), packet(SMFIR_CONTINUE))
            action = "marked"
        self.server.scorer.scored(scored, raw, message.started, way_in="milter", peer=self.peer, via="milter", action=action,
                                  removed_headers=message.own_count, **ids)  # fmt: skip

    def _header_changes(self, message: Message, scored: Scored) -> list[bytes]:
        changes = []
        for name, count in message.own_headers.items():
            # Highest index first, so a removal never renumbers one still to come.
            for index in range(count, 0, -1):
                changes.append(packet(SMFIR_CHGHEADER, struct.pack("!I", index) + name + b"\0\0"))
        for header, text in scored.headers:
            changes.append(
                packet(SMFIR_ADDHEADER, header.encode("ascii") + b"\0" + text.encode("ascii", "replace") + b"\0")
            )
        return changes
