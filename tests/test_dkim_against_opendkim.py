"""spamd's DKIM verdicts against Debian's OpenDKIM library (libopendkim11, through ctypes) on signed mail and
on mail changed after signing: spamd never passes what OpenDKIM fails.

Both check the same messages with the same keys, fetched from our loopback zone through one
resolver. Where they differ, spamd is the stricter, and the tests name each such case: dkimpy's
rules, which spamd keeps (a From added above the signed one breaks the signature; a head line
that is no field, "Subject :", makes the head unreadable). The one way round: a bare LF, which
spamd reads as a line end (as dkimpy, and as Postfix passes mail on: each made a CRLF) and
OpenDKIM fails. 20,000 random edits after the signature found nothing else (max_examples
raised once by hand; the suite runs 300).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spamd.mail.auth.dkim import verify_signatures
from spamd.mail.auth.dns import Budget, CachingResolver
from spamd_lab.opendkim_library import OpenDkim, library_missing
from tests.auth_helpers import SigningKeys, mail, published_zone
from tests.daemon_helpers import crlf

pytestmark = pytest.mark.real_program(library_missing())

BODIES = [
    "Hello,\r\n\r\nyour parcel is on its way.\r\n",
    "",
    "trailing spaces   \r\n\ttabs\tand  runs   of spaces\r\n\r\n\r\n",
    "<html><body><p>Sale <b>today</b></p></body></html>\r\n" * 3,
    "a long line " * 200 + "\r\n",
    "Grüße aus Zürich: 50 % Rabatt\r\n",
]
CANONICALIZATIONS = [(b"relaxed", b"relaxed"), (b"relaxed", b"simple"), (b"simple", b"simple")]


def mutations(signed: bytes) -> Iterator[tuple[str, bytes]]:
    head, _, body = signed.partition(b"\r\n\r\n")
    yield "unchanged", signed
    yield "a line appended to the body", signed + b"Click http://phish.example/login\r\n"
    yield "empty lines appended to the body", signed + b"\r\n\r\n"
    yield "spaces before a line end", head + b"\r\n\r\n" + body.replace(b"\r\n", b"  \r\n", 1)
    yield "a space doubled", head + b"\r\n\r\n" + body.replace(b" ", b"  ", 1)
    yield "a From added on top", b"From: Bank <security@bank.example>\r\n" + signed
    yield "a Subject added on top", b"Subject: changed\r\n" + signed
    yield "a Subject added below", head + b"\r\nSubject: changed\r\n\r\n" + body
    yield "a field name's case", signed.replace(b"Subject:", b"SUBJECT:", 1)
    yield "a space before a colon", signed.replace(b"Subject:", b"Subject :", 1)
    yield "a field folded", signed.replace(b"Subject: ", b"Subject:\r\n ", 1)
    yield "an unsigned field added", b"X-Added: yes\r\n" + signed
    yield "the Subject changed", signed.replace(b"Subject: ", b"Subject: Re: ", 1)


@pytest.fixture(scope="module")
def verifiers(test_keys: SigningKeys) -> Iterator[tuple[Callable[[bytes], str | None], Callable[[bytes], str | None]]]:
    """(spamd, OpenDKIM): each one's result for shop.example's signature of a message (RSA or Ed25519), None
    where it gives none."""
    with published_zone(test_keys) as zone:
        resolver = CachingResolver((zone.address,))
        opendkim = OpenDkim(resolver)

        def ours(raw: bytes) -> str | None:
            found = [s.result for s in verify_signatures(raw, resolver, Budget(10.0)) if s.domain == "shop.example"]
            return found[0] if found else None

        def theirs(raw: bytes) -> str | None:
            found = [result for domain, result in opendkim.verify(raw) if domain == "shop.example"]
            return found[0] if found else None

        yield ours, theirs


# Where spamd is stricter than OpenDKIM: dkimpy's rules, which spamd keeps. (spamd's, OpenDKIM's) verdict
# by the header canonicalization.
STRICTER: dict[str, dict[bytes, tuple[str | None, str | None]]] = {
    # dkimpy hashes a From field more than h= names it: one added above the signed one breaks the
    # signature. OpenDKIM takes the bottom one, as h= picks, and passes.
    "a From added on top": {b"relaxed": ("fail", "pass"), b"simple": ("fail", "pass")},
    # dkimpy refuses a head with a line that is no field (the name ends at the colon): no result.
    # OpenDKIM reads it, and relaxed canonicalization takes the space away.
    "a space before a colon": {b"relaxed": (None, "pass"), b"simple": (None, "fail")},
}


@pytest.mark.parametrize("canonicalize", CANONICALIZATIONS, ids=lambda c: b"/".join(c).decode())
@pytest.mark.parametrize("key", ["shop", "shop_ed25519"])
def test_spamd_passes_what_opendkim_passes_and_nothing_it_fails(
    test_keys: SigningKeys, verifiers: tuple[Callable[[bytes], str | None], Callable[[bytes], str | None]],
    canonicalize: tuple[bytes, bytes], key: str,
) -> None:  # fmt: skip
    ours, theirs = verifiers
    seen: dict[str, set[tuple[str | None, str | None]]] = {}
    for body in BODIES:
        signed = getattr(test_keys, key).sign(mail(body=body, subject="Your order"), canonicalize=canonicalize)
        for name, raw in mutations(signed):
            verdict = (ours(raw), theirs(raw))
            assert verdict != ("pass", "fail"), (name, body[:40])
            seen.setdefault(name, set()).add(verdict)
    assert seen["unchanged"] == {("pass", "pass")}
    assert seen["a line appended to the body"] == {("fail", "fail")}
    assert seen["an unsigned field added"] == {("pass", "pass")}
    for name, verdicts in seen.items():
        if name in STRICTER:
            assert verdicts == {STRICTER[name][canonicalize[0]]}, (name, verdicts)
        else:
            assert all(a == b for a, b in verdicts), (name, verdicts)


EDIT_BYTES = st.binary(max_size=6) | st.sampled_from(
    [b" ", b"\t", b"\r\n", b"\r\n ", b":", b"\r\n\r\n", b"From: a@b.example\r\n"]
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    key=st.sampled_from(["shop", "shop_ed25519"]),
    body=st.sampled_from(BODIES),
    canonicalize=st.sampled_from(CANONICALIZATIONS),
    edits=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 4), EDIT_BYTES), min_size=1, max_size=3),
)
def test_no_edit_after_signing_passes_spamd_and_fails_opendkim(
    test_keys: SigningKeys, verifiers: tuple[Callable[[bytes], str | None], Callable[[bytes], str | None]],
    key: str, body: str, canonicalize: tuple[bytes, bytes], edits: list[tuple[float, int, bytes]],
) -> None:  # fmt: skip
    """Any bytes put anywhere after the signature (replacing up to 4): spamd passes nothing OpenDKIM fails, but
    where the two read line ends differently. spamd reads a bare LF as a line end, as dkimpy does and as Postfix
    hands the message on (it makes each a CRLF); OpenDKIM fails such a message, and passes it with CRLFs."""
    raw = getattr(test_keys, key).sign(mail(body=body, subject="Your order"), canonicalize=canonicalize)
    signature_end = raw.index(b"\r\nFrom: ") + 2  # dkimpy puts its DKIM-Signature on top
    for where, removed, inserted in edits:
        at = signature_end + int(where * (len(raw) - signature_end))
        raw = raw[:at] + inserted + raw[at + removed :]
    ours, theirs = verifiers
    if (ours(raw), theirs(raw)) == ("pass", "fail"):
        assert theirs(crlf(raw)) == "pass"
