"""Where a message's links go, as tokens: registrable domains, text that names another domain, odd hosts, pixels.

Phishing copies a brand's words and images but must send people to its own
host: an IP address, a look-alike or punycode name, a shortener or an open
redirector, or a link whose visible text names the brand's domain. The brand's
own mail links to the brand's domains. Read from the URLs in HTML attributes and
in the text, and from the HTML markup (anchor text, 1x1 images); no URL is
fetched or resolved.
"""

from __future__ import annotations

import functools
import html
import re

from spamd.mail.domains import (
    clean_host,
    is_ip_literal,
    is_punycode,
    looks_alike,
    organisation_label,
    registrable_domain,
    skeleton,
    unicode_host,
)
from spamd.mail.message import ParsedMessage
from spamd.mail.senders_claimed import split_address

MAX_URLS = 100  # per message: the first ones; a link farm says what it is by then
MAX_ANCHORS = 100
MAX_MARKUP_CHARS = 200_000  # of each HTML part, for anchors and images
# URL shorteners (their registrable domains; a small list of the common ones).
SHORTENERS = frozenset(
    {
        "bit.ly",
        "bitly.com",
        "tinyurl.com",
        "t.co",
        "goo.gl",
        "ow.ly",
        "is.gd",
        "buff.ly",
        "rebrand.ly",
        "cutt.ly",
        "shorturl.at",
        "rb.gy",
        "t.ly",
        "tiny.cc",
        "s.id",
        "lnkd.in",
        "v.gd",
        "bl.ink",
        "short.io",
        "qrco.de",
        "tiny.one",
    }
)
_TEXT_URL_RE = re.compile(r"(?:https?://|www\.)[^\s<>\"'()\[\]{}]{1,2000}")
# A URL inside another one's path or query: what an open redirector forwards to.
_INNER_URL_RE = re.compile(r"(?:https?|http)(?::|%3a)(?:/|%2f){2}([^/?#&%\s\"'<>]{1,253})")
# An anchor's start tag, and its href: the text up to "</a" is then found on its own.
# One pattern for the whole anchor, lazy over its tag and its text, was 45% of the
# families' time on modern-dev's HTML.
# A tag ends at the next "<" as well: "<a <a <a ..." rescanned 2,000 characters from
# each "<a" (seconds for a 200 KB part), stopping at "<" reads each character once.
# Read in the markup as it is, case aside (re.I), lowering only the few bits read: with
# each URL read once and the look-alike test cached, link_tokens on modern-dev 101.6 ->
# 64.4 us a message, trec07p-dev 42.4 -> 36.9 (the same tokens; thread CPU time, best
# of 7 interleaved rounds).
_ANCHOR_START_RE = re.compile(r"<a\s[^<>]{0,2000}+>", re.I)
_ANCHOR_END_RE = re.compile(r"</a", re.I)
_HREF_RE = re.compile(r"href\s*=\s*[\"']?([^\"'\s>]{1,2000})", re.I)
MAX_ANCHOR_TEXT = 500
_TAG_RE = re.compile(r"<[^>]{0,2000}>")
_IMG_RE = re.compile(r"<img\s[^<>]{0,2000}+>", re.I)
_ONE_PIXEL_RE = re.compile(r"""(?:width|height)\s*(?:=\s*["']?|:\s*)[01](?:px)?(?![0-9])""", re.I)
# Visible text that is a domain or URL: "www.paypal.com", "https://paypal.com/login".
_TEXT_DOMAIN_RE = re.compile(r"(?:https?://)?((?:[a-z0-9\-]{1,63}\.){1,8}[a-z]{2,24})(?:[/:?#]\S*)?")


def split_url(url: str) -> tuple[str, str, bool]:
    """A lower-cased URL -> (cleaned host, the rest after the host, whether it had userinfo before the host)."""
    rest = url.partition("://")[2] if "://" in url[:12] else url
    end = len(rest)
    for stop in "/?#\\":
        found = rest.find(stop, 0, end)
        if found != -1:
            end = found
    authority = rest[:end]
    return clean_host(authority), rest[end:], "@" in authority


def message_urls(msg: ParsedMessage) -> list[str]:
    """The first MAX_URLS URLs of a message, lower-cased: its HTML links, or the URLs of its text when it has none.

    The visible text of HTML mail names domains the links need not go to ("www.paypal.com"
    over a link elsewhere): counted as link targets, they would hide what the anchors show.
    """
    if msg.urls:
        return msg.urls[:MAX_URLS]
    urls: list[str] = []
    for text in msg.texts:
        if len(urls) >= MAX_URLS:
            break
        if "://" in text or "www." in text.lower():
            urls = urls + _TEXT_URL_RE.findall(text.lower(), 0, 1_000_000)[: MAX_URLS - len(urls)]
    return urls


@functools.lru_cache(maxsize=4096)
def host_tokens(host: str) -> tuple[str, tuple[str, ...]]:
    """A cleaned host's registrable domain and what the host itself says: IP, punycode, IDN, shortener.

    Cached (a host is at most 253 characters: under 2 MB for 4,096): mail repeats its
    link hosts, and a campaign repeats them across messages.
    """
    org = registrable_domain(host)
    tokens: list[str] = []
    if is_ip_literal(host):
        tokens.append("link:ip-host")
    elif is_punycode(host):
        tokens.append("link:punycode")
        decoded = organisation_label(registrable_domain(unicode_host(host)))
        if skeleton(decoded).isascii():
            tokens.append("link:punycode-latin-lookalike")
    elif not host.isascii():
        tokens.append("link:idn")
    if org in SHORTENERS:
        tokens.append("link:shortener")
    return org, tuple(tokens)


@functools.lru_cache(maxsize=4096)
def _looks_alike_sender(org: str, from_label: str) -> bool:
    """Whether a link's registrable domain reads like the sender's (cached: a message repeats its pairs)."""
    return looks_alike(organisation_label(org), from_label)


def url_tokens(url: str, from_label: str) -> tuple[str, list[str]]:
    """One URL's registrable domain and its tokens: IP host, punycode, look-alike, shortener, redirector, userinfo."""
    host, rest, userinfo = split_url(url)
    if not host:
        return "", ["link:no-host"]
    org, host_found = host_tokens(host)
    tokens = list(host_found)
    if userinfo:
        tokens.append("link:userinfo")
    if from_label and _looks_alike_sender(org, from_label):
        tokens.append("link:lookalike-sender")
    inner = _INNER_URL_RE.search(rest)
    if inner:
        target = registrable_domain(clean_host(inner.group(1)))
        tokens.append("link:redirect-" + ("same-org" if target == org else "other-org"))
    return org, tokens


def anchor_tokens(markup: str, url_orgs: dict[str, str]) -> list[str]:
    """Anchors whose visible text names a domain: the same registrable domain as the href, or another."""
    tokens: list[str] = []
    for number, start in enumerate(_ANCHOR_START_RE.finditer(markup, 0, MAX_MARKUP_CHARS)):
        if number == MAX_ANCHORS:
            break
        closed = _ANCHOR_END_RE.search(markup, start.end(), min(start.end() + MAX_ANCHOR_TEXT + 3, MAX_MARKUP_CHARS))
        inner = markup[start.end() : closed.start()] if closed else ""
        if "." not in inner:  # no domain in it (most anchors): nothing more to read
            continue
        text = _TAG_RE.sub("", inner) if "<" in inner else inner
        if "." not in text and "&" not in text:  # the dots were in tags (an image's URL): no domain shown
            continue
        text = text.lower()
        text = (html.unescape(text) if "&" in text else text).strip()
        named = _TEXT_DOMAIN_RE.fullmatch(text)
        found_href = _HREF_RE.search(start.group(0))
        if not named or "." not in text or not found_href:
            continue
        href = found_href.group(1).lower()
        shown = registrable_domain(clean_host(named.group(1)))
        target = url_orgs.get(href) or registrable_domain(split_url(html.unescape(href))[0])
        if shown == target:
            tokens.append("link-text:same-domain")
        else:
            tokens += ["link-text:other-domain", "link-text-names:" + shown]
    return tokens


def pixel_tokens(markup: str) -> list[str]:
    """A tracking pixel (an image 0 or 1 pixel wide or high) once, if any."""
    for tag in _IMG_RE.findall(markup, 0, MAX_MARKUP_CHARS):
        if len(_ONE_PIXEL_RE.findall(tag)) >= 2:
            return ["link:tracking-pixel"]
    return []


def count_bucket(n: int) -> str:
    """0, 1, 2, 3-4, 5-8, 9+: how many distinct link domains, coarse enough to recur."""
    return "0" if n == 0 else "1" if n == 1 else "2" if n == 2 else "3-4" if n <= 4 else "5-8" if n <= 8 else "9+"


def link_tokens(msg: ParsedMessage) -> list[str]:
    """Tokens of where the message's links go (each kind of finding once per message)."""
    from_label = organisation_label(registrable_domain(split_address(msg.header("from"))[1]))
    orgs: dict[str, str] = {}
    found: set[str] = set()
    for url in dict.fromkeys(message_urls(msg)):  # each URL once: mail repeats its links
        org, tokens = url_tokens(url, from_label)
        orgs[url] = org
        found.update(tokens)
    distinct = {org for org in orgs.values() if org}
    tokens = sorted(found) + ["link-org:" + org for org in sorted(distinct)]
    tokens.append("link-domains:" + count_bucket(len(distinct)))
    if from_label and distinct:
        tokens.append(
            "link-org:" + ("has-sender" if any(organisation_label(o) == from_label for o in distinct) else "no-sender")
        )
    for markup in msg.html:
        tokens += anchor_tokens(markup, orgs)
        tokens += pixel_tokens(markup)
    return list(dict.fromkeys(tokens))
