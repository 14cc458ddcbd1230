"""Sender authentication through Debian's real Postfix: OpenDKIM and OpenDMARC in front of spamd, and spamd's own SPF.

Every milter asks our DNS zone on loopback (tests/dns_helpers.py, the test keys and
records of tests/auth_helpers.py; OpenDMARC reads the zone's DMARC records from a file,
tests/milter_auth_helpers.py says why). Mail comes from smtplib as if from outside:
Postfix's XCLIENT names the client's address and HELO, which Postfix reports to every
milter. The configuration is docs/postfix.md's, read from the page, with our ports and
authserv-id (`mx.test`).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest

from spamd.frontends.milter import (
    SMFIC_BODY,
    SMFIC_BODYEOB,
    SMFIC_CONNECT,
    SMFIC_EOH,
    SMFIC_HEADER,
    SMFIC_HELO,
    SMFIC_MAIL,
    SMFIC_OPTNEG,
    SMFIC_QUIT,
    SMFIC_RCPT,
    SMFIR_ADDHEADER,
    SMFIR_CONTINUE,
    packet,
)
from spamd.model.bayes import Label
from tests.auth_helpers import SigningKeys, mail, published_zone
from tests.daemon_helpers import crlf
from tests.dns_helpers import ZoneServer
from tests.milter_auth_helpers import (
    AUTHSERV_ID,
    ELSEWHERE,
    OUTSIDE_CLIENTS,
    SHOP_SERVER,
    AuthMilters,
    auth_milters_main_cf,
    auth_milters_missing,
    delivered,
    field,
    head_of,
    running_auth_milters,
    running_trusting_spamd,
    send_from,
)
from tests.postfix_helpers import Postfix, Sink, Spamd, free_port, message, milter_main_cf, running_postfix

pytestmark = pytest.mark.real_program(auth_milters_missing())


@pytest.fixture(scope="module")
def zone(test_keys: SigningKeys) -> Iterator[ZoneServer]:
    with published_zone(test_keys) as zone:  # DKIM keys; _dmarc.shop.example p=reject, _dmarc.other.example p=none
        zone.txt("shop.example", f"v=spf1 ip4:{SHOP_SERVER} -all")
        zone.txt("mail.shop.example", f"v=spf1 ip4:{SHOP_SERVER} -all")  # its HELO name, checked for bounces
        zone.txt("soft.example", f"v=spf1 ip4:{SHOP_SERVER} ~all")
        zone.txt("relay6.example", "v=spf1 ip6:2001:db8::/32 -all")
        zone.silent.add("silent.example")
        yield zone


@pytest.fixture(scope="module")
def sink() -> Iterator[Sink]:
    with Sink() as sink:
        yield sink


# ---------------------------------------------------------------- OpenDKIM and OpenDMARC in front, spamd trusting them


@pytest.fixture(scope="module")
def milters(zone: ZoneServer) -> Iterator[AuthMilters]:
    with running_auth_milters(zone) as milters:
        yield milters


@pytest.fixture(scope="module")
def trusting_spamd(tmp_path_factory: pytest.TempPathFactory, zone: ZoneServer) -> Iterator[Spamd]:
    with running_trusting_spamd(tmp_path_factory.mktemp("trusting"), zone) as spamd:
        yield spamd


# A second listener of the same Postfix without the docs' header_checks line: what it is there for.
UNCHECKED_PORT = free_port()


@pytest.fixture(scope="module")
def postfix(sink: Sink, milters: AuthMilters, trusting_spamd: Spamd) -> Iterator[Postfix]:
    assert trusting_spamd.milter_port is not None
    main = auth_milters_main_cf(milters, trusting_spamd.milter_port) | OUTSIDE_CLIENTS
    unchecked = (
        f"127.0.0.1:{UNCHECKED_PORT} inet n - n - - smtpd\n  -o receive_override_options=no_header_body_checks\n"
    )
    with running_postfix(sink.port, main=main, services=unchecked) as postfix:
        yield postfix


def test_a_signed_message_passes_as_opendkim_and_opendmarc_found_it(
    postfix: Postfix, sink: Sink, milters: AuthMilters, test_keys: SigningKeys
) -> None:
    raw = test_keys.shop.sign(mail(subject="milters-signed"))
    head = delivered(postfix, sink, milters, raw, "milters-signed", ELSEWHERE)
    # Both milters' results sit at the top, above Postfix's own Received header.
    [dmarc, dkim, received] = head[:3]
    assert dmarc.startswith(f"Authentication-Results: {AUTHSERV_ID}; dmarc=pass"), head
    assert dkim.startswith(f"Authentication-Results: {AUTHSERV_ID}; dkim=pass"), head
    assert received.startswith("Received: from mail.shop.example") and f"[{ELSEWHERE}]" in received, head
    assert field(head, "X-Spam-Auth") == [
        f"source=authserv-id {AUTHSERV_ID}; dkim=pass header.d=shop.example; "
        "dmarc=pass header.from=shop.example policy.published-domain-policy=reject"
    ]


def test_a_forged_from_without_a_signature_fails_dmarc(postfix: Postfix, sink: Sink, milters: AuthMilters) -> None:
    head = delivered(postfix, sink, milters, mail(subject="milters-forged-from"), "milters-forged-from", ELSEWHERE)
    [auth] = field(head, "X-Spam-Auth")
    assert auth.startswith(f"source=authserv-id {AUTHSERV_ID}; dmarc=fail header.from=shop.example"), auth
    assert "dkim=" not in auth
    assert "policy.published-domain-policy=reject" in auth  # OpenDMARC writes the policy in a comment


def test_content_appended_past_a_signatures_l_bytes_is_not_the_senders_though_opendkim_passes_it(
    postfix: Postfix, sink: Sink, milters: AuthMilters, test_keys: SigningKeys
) -> None:
    """A shop signs with l=; someone appends a phish to a copy and sends it on. OpenDKIM passes the signature
    and OpenDMARC passes DMARC on it; spamd, trusting them, reads the signature's l= and takes neither."""
    signed = test_keys.shop.sign(mail(subject="milters-length-limited"), length=True)
    raw = signed + b"\r\nYour account is locked: http://phish.example/login\r\n"
    head = delivered(postfix, sink, milters, raw, "milters-length-limited", ELSEWHERE)
    results = field(head, "Authentication-Results")
    assert any(r.startswith(f"{AUTHSERV_ID}; dkim=pass") for r in results), results
    assert f"{AUTHSERV_ID}; dmarc=pass (p=reject dis=none) header.from=shop.example" in results, results
    assert field(head, "X-Spam-Auth") == [
        f"source=authserv-id {AUTHSERV_ID}; dkim=policy header.d=shop.example; "
        "dmarc=fail header.from=shop.example policy.published-domain-policy=reject"
    ]


@pytest.mark.parametrize(
    "claim",
    [
        "dkim=pass header.d=shop.example header.s=sel1; dmarc=pass header.from=shop.example",
        # No DKIM result in it, so OpenDKIM would leave it; OpenDMARC would take its SPF pass as its
        # own and pass DMARC on it; and spamd as a milter never sees Postfix's Received header, so
        # the header would sit in what it trusts: only Postfix's header_checks stands in the way.
        "spf=pass smtp.mailfrom=shop.example",
        "dmarc=pass header.from=shop.example",
    ],
)
def test_results_a_message_brings_claiming_our_id_are_removed_before_anyone_believes_them(
    postfix: Postfix, sink: Sink, milters: AuthMilters, claim: str
) -> None:
    marker = f"milters-claim-{claim.split('=')[0]}"
    raw = f"Authentication-Results: {AUTHSERV_ID}; {claim}\r\n".encode() + mail(subject=marker)
    head = delivered(postfix, sink, milters, raw, marker, ELSEWHERE)
    assert claim not in "\n".join(head), head
    assert field(head, "Authentication-Results") == [
        f"{AUTHSERV_ID}; dmarc=fail (p=reject dis=none) header.from=shop.example"
    ]
    [auth] = field(head, "X-Spam-Auth")
    assert "pass" not in auth, auth
    assert "dmarc=fail header.from=shop.example" in auth, auth


def test_without_header_checks_opendkim_removes_a_dkim_claim(
    postfix: Postfix, sink: Sink, milters: AuthMilters
) -> None:
    marker = "milters-unchecked-dkim"
    claim = f"Authentication-Results: {AUTHSERV_ID}; dkim=pass header.d=shop.example\r\n"
    head = delivered(postfix, sink, milters, claim.encode() + mail(subject=marker), marker, ELSEWHERE, UNCHECKED_PORT)
    assert field(head, "Authentication-Results") == [
        f"{AUTHSERV_ID}; dmarc=fail (p=reject dis=none) header.from=shop.example"
    ]
    [auth] = field(head, "X-Spam-Auth")
    assert "pass" not in auth, auth


def test_without_header_checks_a_claimed_spf_pass_is_believed_by_opendmarc_and_spamd(
    postfix: Postfix, sink: Sink, milters: AuthMilters
) -> None:
    """Why docs/postfix.md's header_checks line is required (its list of what each part does)."""
    marker = "milters-unchecked-spf"
    claim = f"Authentication-Results: {AUTHSERV_ID}; spf=pass smtp.mailfrom=shop.example\r\n"
    head = delivered(postfix, sink, milters, claim.encode() + mail(subject=marker), marker, ELSEWHERE, UNCHECKED_PORT)
    # OpenDKIM left it (no DKIM result in it); OpenDMARC passed DMARC on it; spamd, seeing no Received
    # header of Postfix's above it, took it for one of the milters' own.
    assert field(head, "Authentication-Results") == [
        f"{AUTHSERV_ID}; dmarc=pass (p=reject dis=none) header.from=shop.example",
        f"{AUTHSERV_ID}; spf=pass smtp.mailfrom=shop.example",
    ], head
    [auth] = field(head, "X-Spam-Auth")
    assert "spf=pass smtp.mailfrom=shop.example; dmarc=pass header.from=shop.example" in auth, auth


# ---------------------------------------------------------------- spamd alone as the milter: SPF for the client Postfix reports


@pytest.fixture(scope="module")
def spf_spamd(tmp_path_factory: pytest.TempPathFactory, zone: ZoneServer) -> Iterator[Spamd]:
    config = f'[auth]\nspf = true\nnameservers = ["{zone.address}"]\ndns_budget_s = 10.0\n'
    spamd = Spamd(tmp_path_factory.mktemp("spf"), config, milter=True).start()
    yield spamd
    spamd.stop()


@pytest.fixture(scope="module")
def spf_postfix(sink: Sink, spf_spamd: Spamd) -> Iterator[Postfix]:
    main = milter_main_cf(f"inet:127.0.0.1:{spf_spamd.milter_port}") | OUTSIDE_CLIENTS
    with running_postfix(sink.port, main=main) as postfix:
        yield postfix


@pytest.mark.parametrize(
    ("client", "helo", "mail_from", "sender", "expected"),
    [
        (SHOP_SERVER, "mail.shop.example", "bounce@shop.example", "deals@shop.example",
         "spf=pass smtp.mailfrom=shop.example; dmarc=pass header.from=shop.example policy.published-domain-policy=reject"),
        (ELSEWHERE, "mail.shop.example", "bounce@shop.example", "deals@shop.example",
         "spf=fail smtp.mailfrom=shop.example; dmarc=fail header.from=shop.example policy.published-domain-policy=reject"),
        (ELSEWHERE, "mx.soft.example", "news@soft.example", "news@soft.example", "spf=softfail smtp.mailfrom=soft.example; dmarc=none header.from=soft.example"),
        (ELSEWHERE, "mx.nothing.example", "x@nothing.example", "x@nothing.example", "spf=none smtp.mailfrom=nothing.example; dmarc=none header.from=nothing.example"),
        # A bounce (empty MAIL FROM) is checked for its HELO name.
        (SHOP_SERVER, "mail.shop.example", "", "postmaster@mail.shop.example",
         "spf=pass smtp.mailfrom=mail.shop.example; dmarc=pass header.from=mail.shop.example policy.published-domain-policy=reject"),
        # A domain whose DNS never answers: a temporary error once the budget is spent, and the mail is scored.
        (ELSEWHERE, "mx.silent.example", "x@silent.example", "x@silent.example",
         "spf=temperror smtp.mailfrom=silent.example; dmarc=temperror header.from=silent.example"),
    ],
)  # fmt: skip
def test_spf_of_the_client_postfix_reports(
    spf_postfix: Postfix, sink: Sink, client: str, helo: str, mail_from: str, sender: str, expected: str
) -> None:
    marker = f"spf-{client}-{mail_from or 'null-sender'}"
    raw = message(Label.HAM, marker).replace(b"From: ", f"From: {sender}\nX-Old-From: ".encode(), 1)
    send_from(spf_postfix, client, helo, mail_from, raw)
    [data] = sink.wait_for(marker, timeout=60)
    head = head_of(data)
    assert field(head, "X-Spam-Auth") == [f"source=spamd; {expected}"], head
    assert len(field(head, "X-Spam-Status")) == 1


def milter_conversation(port: int, connect: bytes, helo: str, mail_from: str, raw: bytes) -> dict[str, str]:
    """One message through a milter client of our own speaking version 2 (every event answered);
    the headers spamd asks to add. For what Postfix does not send here: IPv6 clients, other families."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock, sock.makefile("rb") as replies:

        def exchange(command: bytes, data: bytes = b"") -> tuple[bytes, bytes]:
            sock.sendall(packet(command, data))
            (length,) = struct.unpack("!I", replies.read(4))
            answer = replies.read(length)
            return answer[:1], answer[1:]

        assert exchange(SMFIC_OPTNEG, struct.pack("!III", 2, 0x1FF, 0))[0] == SMFIC_OPTNEG
        head, body = raw.split(b"\r\n\r\n", 1)
        for command, data in [
            (SMFIC_CONNECT, connect),
            (SMFIC_HELO, helo.encode() + b"\0"),
            (SMFIC_MAIL, f"<{mail_from}>".encode() + b"\0"),
            (SMFIC_RCPT, b"<user@example.com>\0"),
            *((SMFIC_HEADER, line.replace(b": ", b"\0", 1) + b"\0") for line in head.split(b"\r\n")),
            (SMFIC_EOH, b""),
            (SMFIC_BODY, body),
        ]:
            assert exchange(command, data)[0] == SMFIR_CONTINUE, command
        added: dict[str, str] = {}
        command, data = exchange(SMFIC_BODYEOB)
        while command != SMFIR_CONTINUE:
            if command == SMFIR_ADDHEADER:
                name, value = data.split(b"\0")[:2]
                added[name.decode()] = value.decode()
            (length,) = struct.unpack("!I", replies.read(4))
            answer = replies.read(length)
            command, data = answer[:1], answer[1:]
        sock.sendall(packet(SMFIC_QUIT))
    return added


def inet_connect(family: bytes, address: str) -> bytes:
    """A connect event as Sendmail's libmilter reads it: host name, family, port, address."""
    return b"client.test\0" + family + struct.pack("!H", 25) + address.encode() + b"\0"


@pytest.mark.parametrize(
    ("connect", "mail_from", "sender", "expected"),
    [
        (inet_connect(b"6", "2001:db8::5"), "x@relay6.example", "x@relay6.example",
         "source=spamd; spf=pass smtp.mailfrom=relay6.example; dmarc=none header.from=relay6.example"),
        (inet_connect(b"6", "IPv6:2001:db9::5"), "x@relay6.example", "x@relay6.example",
         "source=spamd; spf=fail smtp.mailfrom=relay6.example; dmarc=none header.from=relay6.example"),
        # An IPv4 client on a dual-stack listener: checked as the IPv4 address it is.
        (inet_connect(b"6", f"::ffff:{SHOP_SERVER}"), "bounce@shop.example", "deals@shop.example",
         "source=spamd; spf=pass smtp.mailfrom=shop.example; dmarc=pass header.from=shop.example policy.published-domain-policy=reject"),
        # A local submission (no address): nothing to check, so no X-Spam-Auth for unsigned mail.
        (b"localhost\0L\0\0/run/submission\0", "bounce@shop.example", "deals@shop.example", None),
        (inet_connect(b"4", "not-an-address"), "bounce@shop.example", "deals@shop.example", None),
    ],
)  # fmt: skip
def test_spf_of_a_client_address_in_each_form_the_connect_event_gives_it(
    spf_spamd: Spamd, connect: bytes, mail_from: str, sender: str, expected: str | None
) -> None:
    assert spf_spamd.milter_port is not None
    raw = crlf(message(Label.HAM, "spf-forms").replace(b"From: ", f"From: {sender}\nX-Old-From: ".encode(), 1))
    added = milter_conversation(spf_spamd.milter_port, connect, "client.test", mail_from, raw)
    assert "X-Spam-Status" in added
    assert added.get("X-Spam-Auth") == expected, added
