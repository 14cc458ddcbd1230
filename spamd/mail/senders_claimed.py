"""Who a message claims to come from, as tokens: the display name against the address, and the domains that should agree.

Brand phishing writes the brand in the display name and sends from a throwaway
domain ("Walmart Notices Center <walmartnoticescenter@sinhil.com>"); the brand's
own mail names itself and sends from its domain ("Torrid <info@mktg.torrid.com>").
Every domain here is compared by its registrable domain (domains.py). All of it is
what the message says about itself, unverified: the model weighs it, nothing trusts
it. The DKIM-Signature's d= is read as a claim only (its token says `claimed:`);
sender authentication verifies signatures elsewhere.
"""

from __future__ import annotations

import functools
import re

from spamd.mail.domains import clean_host, is_ip_literal, organisation_label, registrable_domain
from spamd.mail.message import ParsedMessage

PREFIX_FROM_ORG = "from-org:"
# The public suffix the From's domain was registered under (shop, com.br, sa.com): a
# throwaway sender's new domain is unknown here, where it registers them is not. A claim
# (spamd.model.families.CLAIM_PREFIXES): toward spam only. hard-dev's later half after its
# first, full feedback: spam to Junk 76.1% -> 80.6%, ham 1.82% both, (1-ROCA)% 2.06 -> 2.01;
# 20 development streams full / errors 0.992 / 0.997 (docs/accuracy.md "Where a sender
# registers its domains").
PREFIX_FROM_SUFFIX = "from-suffix:"
MAX_NAME_WORDS = 8
# Free-mail providers: anyone can take a company's name there (a small list of the
# big ones; their registrable domains).
FREEMAIL_DOMAINS = frozenset(
    {
        "gmail.com",
        "googlemail.com",
        "yahoo.com",
        "yahoo.co.uk",
        "yahoo.co.jp",
        "ymail.com",
        "outlook.com",
        "hotmail.com",
        "hotmail.co.uk",
        "live.com",
        "msn.com",
        "aol.com",
        "icloud.com",
        "me.com",
        "mac.com",
        "gmx.com",
        "gmx.de",
        "gmx.net",
        "web.de",
        "mail.com",
        "mail.ru",
        "yandex.ru",
        "yandex.com",
        "proton.me",
        "protonmail.com",
        "zoho.com",
        "qq.com",
        "163.com",
        "126.com",
        "naver.com",
        "rediffmail.com",
        "libero.it",
        "orange.fr",
        "laposte.net",
        "t-online.de",
        "seznam.cz",
        "wp.pl",
        "o2.pl",
        "inbox.ru",
        "bk.ru",
        "list.ru",
        "rambler.ru",
        "tutanota.com",
        "gmx.at",
    }
)
# Display-name words that say "an organisation", not a person (with an all-caps word
# such as USPS or AAA). A small hand-made list; unmeasured word by word.
ORGANISATION_WORDS = frozenset(
    {
        "support",
        "team",
        "service",
        "services",
        "customer",
        "customers",
        "account",
        "accounts",
        "security",
        "billing",
        "bank",
        "center",
        "centre",
        "department",
        "admin",
        "administrator",
        "notification",
        "notifications",
        "notice",
        "notices",
        "alert",
        "alerts",
        "update",
        "updates",
        "helpdesk",
        "help",
        "desk",
        "inc",
        "llc",
        "ltd",
        "corp",
        "corporation",
        "official",
        "office",
        "delivery",
        "shipping",
        "payment",
        "payments",
        "rewards",
        "member",
        "members",
        "care",
        "online",
        "store",
        "shop",
        "verification",
        "mailbox",
        "webmail",
        "it",
        "administration",
        "group",
        "company",
    }
)
# Words a display name carries whoever sends: not an organisation's name.
_FILLER_WORDS = frozenset(
    {
        "the",
        "and",
        "for",
        "from",
        "via",
        "your",
        "you",
        "our",
        "with",
        "no",
        "reply",
        "noreply",
        "do",
        "not",
        "mail",
        "email",
    }
)
_NAME_WORD_RE = re.compile(r"[^\W_]{3,30}")
# A domain written inside the display name: "paypal.com", "service@paypal.com".
_NAME_DOMAIN_RE = re.compile(r"(?:[a-z0-9\-]{1,63}\.){1,8}[a-z]{2,24}")
_ADDRESS_END_RE = re.compile(r"[\s>;,]")
_DKIM_DOMAIN_RE = re.compile(r"(?:^|;)\s*d\s*=\s*([^;\s]{1,253})")


# Cached: the same From is read by three families, and senders repeat. A value is at
# most 4,096 characters (the parser's cap): 1,024 of them are at most 16 MB.
@functools.lru_cache(maxsize=1024)
def split_address(value: str) -> tuple[str, str]:
    """A From-like value -> (display name, the address's domain, cleaned); either may be ''.

    "Name <a@b.c>" and "a@b.c (Name)" both; no quadratic patterns: "@" is found
    by str.rfind, and the domain runs to the first character no domain has.
    """
    lt = value.rfind("<")
    if lt != -1:
        gt = value.find(">", lt)
        address = value[lt + 1 : gt if gt != -1 else len(value)]
        display = value[:lt]
    else:
        address, _, comment = value.partition("(")
        display = comment.rpartition(")")[0] if ")" in comment else comment
    at = address.rfind("@")
    domain = clean_host(_ADDRESS_END_RE.split(address[at + 1 :].strip(), maxsplit=1)[0]) if at != -1 else ""
    return display.strip().strip("\"'").strip(), domain


def header_org(msg: ParsedMessage, name: str) -> str:
    """The registrable domain of an address header's address, or ''."""
    value = msg.header(name)
    return registrable_domain(split_address(value)[1]) if value else ""


def display_name_tokens(display: str, org: str) -> list[str]:
    """The display name's words against the From's registrable domain, and a domain written in the name."""
    lowered = display.lower()
    words = [w for w in dict.fromkeys(_NAME_WORD_RE.findall(lowered)) if w not in _FILLER_WORDS][:MAX_NAME_WORDS]
    if not words:
        return ["from-name:none"]
    label = organisation_label(org).replace("-", "")
    # The organisation's label spelled out by the name's words run together ("Bank of
    # America" for bankofamerica.com; "of" is too short to be a word here): those words match.
    compact = "".join(_NAME_WORD_RE.findall(lowered))
    start = compact.find(label) if len(label) >= 4 else -1
    tokens: list[str] = []
    matched = False
    for word in words:
        at = compact.find(word)
        if label and (word in label or start != -1 and start <= at and at + len(word) <= start + len(label)):
            tokens.append("from-name-in-domain:" + word)
            matched = True
        else:
            tokens.append("from-name-not-in-domain:" + word)
    tokens.append("from-name-domain:" + ("match" if matched else "nomatch"))
    claimed = _NAME_DOMAIN_RE.search(lowered)
    if claimed:
        named = registrable_domain(clean_host(claimed.group(0)))
        tokens += [
            "from-name-claims:" + named,
            "from-name-address:" + ("same" if named == org else "other"),
        ]
    return tokens


def organisation_like(display: str) -> bool:
    """Whether a display name reads as a company's rather than a person's."""
    words = display.split()
    if any(w.lower().strip(".,:;!-") in ORGANISATION_WORDS for w in words):
        return True
    return any(len(w) >= 3 and w.isupper() and w.isalpha() for w in words)


def agreement_token(name: str, org: str, from_org: str) -> list[str]:
    """`<name>-org:<domain>` and whether it is the From's registrable domain."""
    if not org:
        return []
    return [f"{name}-org:{org}", f"{name}:{'same' if org == from_org else 'other'}-org"]


def claimed_sender_tokens(msg: ParsedMessage) -> list[str]:
    """Tokens of who the message says sent it: display name vs domain, Reply-To, Return-Path, DKIM d=, free mail."""
    display, domain = split_address(msg.header("from"))
    org = registrable_domain(domain)
    tokens = [PREFIX_FROM_ORG + (org or "none")]
    suffix = org.partition(".")[2]
    if suffix and not is_ip_literal(org):
        tokens.append(PREFIX_FROM_SUFFIX + suffix)
    tokens += display_name_tokens(display, org)
    reply_org = header_org(msg, "reply-to")
    tokens += agreement_token("reply-to", reply_org, org)
    tokens += agreement_token("return-path", header_org(msg, "return-path"), org)
    if org in FREEMAIL_DOMAINS:
        tokens.append("from-freemail:" + ("organisation-name" if organisation_like(display) else "person-name"))
    if reply_org in FREEMAIL_DOMAINS and org not in FREEMAIL_DOMAINS:
        tokens.append("reply-to:freemail-from-other")
    signature = msg.header("dkim-signature")
    if signature:
        found = _DKIM_DOMAIN_RE.search(signature)
        if found:
            tokens += agreement_token("claimed:dkim", registrable_domain(clean_host(found.group(1))), org)
    return tokens
