"""Host names as organisations: registrable domains (Public Suffix List), IP literals, punycode, look-alikes.

Shared by the sender-claim, link and bulk-mail token families. Pure functions on
strings: no DNS, no network (the suffix list ships inside the `publicsuffixlist`
package). It says what a name is, not whether anyone may use it.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import re

from publicsuffixlist import PublicSuffixList

from spamd.mail.normalize import CONFUSABLES

MAX_HOST_CHARS = 253  # the DNS limit
MAX_LABEL_CHARS = 63
_HOST_CHARS_RE = re.compile(r"[^a-z0-9.\-_\u0080-\U0010ffff]")
# Letters that read as Latin ones: the Cyrillic and Greek look-alikes of the text's
# normalizer (one table, spamd.mail.normalize), and what only names use: digits in place
# of letters in ASCII names, and the Latin script g and dotless i of IDN names (seen in
# phishing domains; unmeasured which matter most).
_SKELETON = CONFUSABLES | str.maketrans({"0": "o", "1": "l", "3": "e", "5": "s", "\u0261": "g", "\u0131": "i"})


@functools.cache
def _suffix_list() -> PublicSuffixList:
    """The Public Suffix List, loaded once on first use rather than at import.

    Without the punycode copy of each IDN rule (accept_encoded_idn): loading 0.33 ->
    0.07 s, paid by every process that scores (each `spamctl classify`, each worker of
    `spamctl eval`); `registrable_domain` looks xn-- hosts up decoded instead.
    """
    return PublicSuffixList(accept_encoded_idn=False)


def load_suffix_list() -> None:
    """Load the Public Suffix List now: a process about to fork its workers loads it once for all of them.

    Each forked worker of `spamctl classify` and `spamctl eval` loaded it at its first
    message: 50-100 ms of CPU each, while the parent waited for their first answers.
    """
    _suffix_list()


def clean_host(host: str) -> str:
    """A host name lower-cased, without a port, userinfo, trailing dot or characters no host has; '' if none is left."""
    host = host.strip().lower().rpartition("@")[2]
    if host.startswith("["):  # an IPv6 literal: [::1]:443
        return host[: host.find("]") + 1] if "]" in host else ""
    host = host.partition(":")[0].strip(".")[:MAX_HOST_CHARS]
    return "" if _HOST_CHARS_RE.search(host) else host


def is_ip_literal(host: str) -> bool:
    """Whether a cleaned host is an IPv4 or a bracketed IPv6 address (also dotted numbers like 3232235777)."""
    if host.startswith("["):
        return True
    if not host or not host[-1].isdigit():
        return False
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host.replace(".", "").isdigit()  # 3232235777, 0x... left aside
    return True


@functools.lru_cache(maxsize=8192)
def registrable_domain(host: str) -> str:
    """The registrable domain of a cleaned host: mktg.torrid.com -> torrid.com, a.b.co.uk -> b.co.uk.

    An IP literal is itself; a public suffix alone (com, co.uk) or a name with
    empty or overlong labels is itself too. Cached: a call on the list costs 30 us,
    and mail repeats its few domains.
    """
    if not host or is_ip_literal(host):
        return host
    labels = host.split(".")
    if "" in labels or max(map(len, labels)) > MAX_LABEL_CHARS:
        return host
    found = _suffix_list().privatesuffix(unicode_host(host) if is_punycode(host) else host)
    # As many labels of the host as of what was found: the xn-- form stays as the mail wrote it.
    return ".".join(labels[-1 - found.count(".") :]) if found else host


def organisation_label(domain: str) -> str:
    """The registrable domain's own label, what names the organisation: torrid.com -> torrid, b.co.uk -> b."""
    return domain.partition(".")[0]


def is_punycode(host: str) -> bool:
    """Whether any label of the host is an IDN in its ASCII form (xn--)."""
    return host.startswith("xn--") or ".xn--" in host


def unicode_host(host: str) -> str:
    """The host with its xn-- labels decoded (each label at most 63 characters: punycode's decoder is quadratic)."""
    if not is_punycode(host):
        return host
    labels = []
    for label in host.split("."):
        if label.startswith("xn--") and len(label) <= MAX_LABEL_CHARS:
            with contextlib.suppress(UnicodeError, ValueError):  # not punycode after all: kept as it is
                label = label[4:].encode("ascii").decode("punycode")
        labels.append(label)
    return ".".join(labels)


def skeleton(name: str) -> str:
    """A name with look-alike characters mapped to the Latin letters they imitate: paypa1 -> paypal, аpple -> apple."""
    return name.translate(_SKELETON)


def looks_alike(name: str, other: str) -> bool:
    """Two different names that read alike: the same skeleton, or one edit apart when both are 5+ characters."""
    if name == other or not name or not other:
        return False
    if skeleton(name) == skeleton(other):
        return True
    return min(len(name), len(other)) >= 5 and abs(len(name) - len(other)) <= 1 and _one_edit(name, other)


def _one_edit(a: str, b: str) -> bool:
    """Whether a and b differ by one substituted, inserted or deleted character (a != b)."""
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    if len(a) == len(b):
        return a[i + 1 :] == b[i + 1 :]
    return a[i:] == b[i + 1 :]
