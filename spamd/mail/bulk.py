"""How bulk mail announces itself, as tokens: List-Unsubscribe (one-click), Feedback-ID, a mail service provider's marks.

A shop's newsletter goes out through a mail service provider that adds
RFC 8058 one-click unsubscription (required of bulk senders by the big
mailbox providers since 2024), a Feedback-ID and its own headers; a throwaway
phishing sender rarely bothers. All of it is the message's own claim.
"""

from __future__ import annotations

import re

from spamd.mail.domains import clean_host, registrable_domain
from spamd.mail.links import split_url
from spamd.mail.message import ParsedMessage
from spamd.mail.senders_claimed import header_org

# Headers a mail service provider adds, by the provider (a small hand-made list).
ESP_HEADERS = {
    "x-sg-eid": "sendgrid",
    "x-sg-id": "sendgrid",
    "x-ses-outgoing": "amazon-ses",
    "x-mailgun-sid": "mailgun",
    "x-mailgun-tag": "mailgun",
    "x-mc-user": "mailchimp",
    "x-mandrill-user": "mailchimp",
    "x-sfmc-stack": "salesforce",
    "x-job": "salesforce",
    "x-marketoid": "marketo",
    "x-pm-message-id": "postmark",
    "x-msys-api": "sparkpost",
    "x-csa-complaints": "csa",
    "x-hs-cid": "hubspot",
    "x-klaviyo-message-id": "klaviyo",
    "x-campaign": "campaign",
    "x-campaignid": "campaign",
    "x-mailer-sid": "campaign",
}
_UNSUBSCRIBE_URI_RE = re.compile(r"<([^<>]{1,2000})>")
_LIST_ID_RE = re.compile(r"<([^<>\s]{1,253})>")


def unsubscribe_tokens(msg: ParsedMessage, from_org: str) -> list[str]:
    """List-Unsubscribe's kinds of address, one-click (RFC 8058), and whether its web address is the sender's."""
    value = msg.header("list-unsubscribe")
    if not value:
        return ["bulk:no-unsubscribe"]
    uris = [u.strip().lower() for u in _UNSUBSCRIBE_URI_RE.findall(value)[:10]]
    web = [u for u in uris if u.startswith("https://") or u.startswith("http://")]
    kinds = sorted({"web" if u in web else "mailto" if u.startswith("mailto:") else "other" for u in uris})
    tokens = ["bulk:unsubscribe-" + ("+".join(kinds) or "unbracketed")]
    one_click = "list-unsubscribe=one-click" in msg.header("list-unsubscribe-post").lower().replace(" ", "")
    if one_click:
        tokens.append(
            "bulk:one-click" if any(u.startswith("https://") for u in web) else "bulk:one-click-without-https"
        )
    if web and from_org:
        org = registrable_domain(split_url(web[0])[0])
        tokens.append("bulk:unsubscribe-" + ("same-org" if org == from_org else "other-org"))
    return tokens


def feedback_id_tokens(value: str) -> list[str]:
    """Feedback-ID (Gmail's a:b:c:SenderId): present, its field count, and the sender id (what names the mailer)."""
    fields = value.strip().split(":")
    return [
        "bulk:feedback-id",
        f"bulk:feedback-id-fields:{min(len(fields), 6)}",
        "bulk:feedback-id-sender:" + fields[-1].strip().lower()[:30],
    ]


def bulk_tokens(msg: ParsedMessage) -> list[str]:
    """Tokens of how the message announces itself as bulk mail (or that it does not)."""
    from_org = header_org(msg, "from")
    tokens = unsubscribe_tokens(msg, from_org)
    feedback_id = msg.header("feedback-id")
    if feedback_id:
        tokens += feedback_id_tokens(feedback_id)
    marks = {ESP_HEADERS[name] for name in msg.first.keys() & ESP_HEADERS.keys()}
    if " x-mailgun-" in " " + " ".join(msg.first):  # no field name holds a space
        marks.add("mailgun")
    tokens += ["bulk:esp:" + esp for esp in sorted(marks)]
    precedence = msg.header("precedence").strip().lower()
    if precedence:
        tokens.append("bulk:precedence:" + precedence[:20])
    list_id = _LIST_ID_RE.search(msg.header("list-id"))
    if list_id:
        org = registrable_domain(clean_host(list_id.group(1)))
        tokens.append("bulk:list-id-" + ("same-org" if org == from_org else "other-org"))
    return tokens
