"""Sender authentication through Debian's real Postfix with Debian's real rspamd as the verifying milter in front of spamd.

rspamd asks only our DNS zone on loopback (tests/dns_helpers.py, the test keys and records
of tests/auth_helpers.py) and runs on a configuration of its own with docs/postfix.md's
milter_headers lines (tests/milter_auth_helpers.py says why not Debian's). Mail comes from
smtplib as if from outside, through Postfix's XCLIENT.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.auth_helpers import SigningKeys, mail, published_zone
from tests.dns_helpers import ZoneServer
from tests.milter_auth_helpers import (
    AUTHSERV_ID,
    OUTSIDE_CLIENTS,
    MilterProgram,
    delivered,
    field,
    rspamd_main_cf,
    rspamd_missing,
    running_rspamd,
    running_trusting_spamd,
)
from tests.postfix_helpers import Postfix, Sink, Spamd, running_postfix

pytestmark = pytest.mark.real_program(rspamd_missing())


@pytest.fixture(scope="module")
def zone(test_keys: SigningKeys) -> Iterator[ZoneServer]:
    with published_zone(test_keys) as zone:
        yield zone


@pytest.fixture(scope="module")
def sink() -> Iterator[Sink]:
    with Sink() as sink:
        yield sink


@pytest.fixture(scope="module")
def rspamd(zone: ZoneServer) -> Iterator[MilterProgram]:
    with running_rspamd(zone) as milter:
        yield milter


@pytest.fixture(scope="module")
def trusting_spamd(tmp_path_factory: pytest.TempPathFactory, zone: ZoneServer) -> Iterator[Spamd]:
    with running_trusting_spamd(tmp_path_factory.mktemp("trusting-rspamd"), zone) as spamd:
        yield spamd


@pytest.fixture(scope="module")
def postfix(sink: Sink, rspamd: MilterProgram, trusting_spamd: Spamd) -> Iterator[Postfix]:
    assert trusting_spamd.milter_port is not None
    # rspamd names itself by the name Postfix gives milters (its myhostname): the MX's host name.
    main = rspamd_main_cf(rspamd, trusting_spamd.milter_port) | OUTSIDE_CLIENTS | {"myhostname": AUTHSERV_ID}
    with running_postfix(sink.port, main=main) as postfix:
        yield postfix


SPF_NONE = "spf=none smtp.mailfrom=shop.example"  # the zone publishes no SPF record for shop.example


def test_a_signed_message_passes_as_rspamd_found_it(
    postfix: Postfix, sink: Sink, rspamd: MilterProgram, test_keys: SigningKeys
) -> None:
    head = delivered(postfix, sink, rspamd, test_keys.shop.sign(mail(subject="rspamd-signed")), "rspamd-signed")
    [results] = field(head, "Authentication-Results")
    assert results.startswith(f"{AUTHSERV_ID}; dkim=pass header.d=shop.example header.s=sel1"), head
    assert "dmarc=pass (policy=reject) header.from=shop.example" in results, results
    # The policy from rspamd's comment, as from OpenDMARC's.
    assert field(head, "X-Spam-Auth") == [
        f"source=authserv-id {AUTHSERV_ID}; dkim=pass header.d=shop.example; {SPF_NONE}; "
        "dmarc=pass header.from=shop.example policy.published-domain-policy=reject"
    ]


def test_a_forged_from_fails_dmarc_with_rspamds_quoted_reason_read_whole(
    postfix: Postfix, sink: Sink, rspamd: MilterProgram
) -> None:
    head = delivered(postfix, sink, rspamd, mail(subject="rspamd-forged-from"), "rspamd-forged-from")
    [results] = field(head, "Authentication-Results")
    assert 'dmarc=fail reason="No valid SPF, No valid DKIM" header.from=shop.example (policy=reject)' in results
    # Split at each space, the reason's words made the whole header count for nothing: spamd verified
    # the message itself and, unsigned and without SPF, reported nothing. rspamd's "dkim=none" (not
    # signed) is no signature, as when spamd verifies.
    assert field(head, "X-Spam-Auth") == [
        f"source=authserv-id {AUTHSERV_ID}; {SPF_NONE}; "
        "dmarc=fail header.from=shop.example policy.published-domain-policy=reject"
    ]


def test_results_a_message_brings_claiming_our_id_are_removed_before_rspamd_or_spamd_see_them(
    postfix: Postfix, sink: Sink, rspamd: MilterProgram
) -> None:
    claim = "dkim=pass header.d=shop.example header.s=sel1; dmarc=pass (policy=reject) header.from=shop.example"
    raw = f"Authentication-Results: {AUTHSERV_ID}; {claim}\r\n".encode() + mail(subject="rspamd-claim")
    head = delivered(postfix, sink, rspamd, raw, "rspamd-claim")
    [results] = field(head, "Authentication-Results")
    assert claim not in results and "dmarc=fail" in results, head
    [auth] = field(head, "X-Spam-Auth")
    assert "pass" not in auth and "dmarc=fail header.from=shop.example" in auth, auth


def test_content_appended_past_a_signatures_l_bytes_is_not_the_senders(
    postfix: Postfix, sink: Sink, rspamd: MilterProgram, test_keys: SigningKeys
) -> None:
    """rspamd, as OpenDKIM, passes an l= signature and DMARC on it whatever follows the l= bytes."""
    signed = test_keys.shop.sign(mail(subject="rspamd-length-limited"), length=True)
    raw = signed + b"\r\nYour account is locked: http://phish.example/login\r\n"
    head = delivered(postfix, sink, rspamd, raw, "rspamd-length-limited")
    [results] = field(head, "Authentication-Results")
    assert "dkim=pass header.d=shop.example header.s=sel1" in results and "dmarc=pass (policy=reject)" in results
    assert field(head, "X-Spam-Auth") == [
        f"source=authserv-id {AUTHSERV_ID}; dkim=policy header.d=shop.example; {SPF_NONE}; "
        "dmarc=fail header.from=shop.example policy.published-domain-policy=reject"
    ]
