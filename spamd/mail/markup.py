"""HTML as its reader sees it: the visible text, the URLs in its attributes, and what it hid.

Split from spamd.mail.message, which calls it for every HTML part. It does not
parse HTML into a tree: tags are cut by pattern, blocks a reader never sees dropped.
"""

from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING

from spamd.config import ParserConfig
from spamd.mail.hidden import cut_hidden
from spamd.mail.normalize import join_split_words, normalize

if TYPE_CHECKING:
    from spamd.mail.message import ParsedMessage


_INVISIBLE_BLOCKS = (("<script", "</script"), ("<style", "</style"), ("<!--", "-->"), ("<head", "</head"))
# Possessive quantifiers where giving characters back can never make a match (the
# next character must be one the run stops at): the same matches without the
# backtracking attempts (tags 16.4 -> 15.9 us/msg, URLs 5.5 -> 4.6 on trec07p-dev).
# A tag's inside is "[^<>]" spelled as ranges, which re compiles to one bitmap test
# per character rather than a negation of two comparisons (tags 16.1 -> 12.5 us/msg).
_TAG_RE = re.compile(r"<[a-zA-Z/!][\x00-;=?-\U0010ffff]*+>")
# URLs as attribute values (href=, src=, action=), matched on lower-cased markup.
# Anchoring on "=" rather than on the attribute name: 1.92 s -> 0.15 s over the
# trec07p-dev HTML, and it finds every URL the tokenizer uses (http(s) and www).
_URL_ATTR_RE = re.compile(r"""=\s*+["']?+((?:https?:|www\.)[^"'\s<>]++)""")


def _drop_blocks(text: str, lower: str, start_tag: str, end_tag: str) -> tuple[str, str]:
    """Remove each start_tag ... end_tag block in linear time (an unclosed one runs to the end)."""
    if start_tag not in lower:
        return text, lower
    keep, keep_lower, pos = [], [], 0
    while True:
        start = lower.find(start_tag, pos)
        if start == -1:
            keep.append(text[pos:])
            keep_lower.append(lower[pos:])
            break
        keep.append(text[pos:start])
        keep_lower.append(lower[pos:start])
        end = lower.find(end_tag, start + len(start_tag))
        if end == -1:
            break
        close = lower.find(">", end)
        pos = len(lower) if close == -1 else close + 1
    return " ".join(keep), " ".join(keep_lower)


# A decimal character reference of more than 7 digits names no character (past
# U+10FFFF): html.unescape gives U+FFFD for it, but raises ValueError from int()
# past 4,300 digits, and that lost the text of the whole message ("&#" + 5,000
# digits in one HTML part ended the walk). Such a number is shortened first to
# one that unescapes alike: leading zeros dropped, more than 7 digits -> 8 nines.
_LONG_DECIMAL_REF_RE = re.compile(r"&#([0-9]{8,})")


def _short_decimal_ref(match: re.Match[str]) -> str:
    digits = match.group(1).lstrip("0") or "0"
    return "&#" + (digits if len(digits) <= 7 else "99999999")


def html_to_text(
    markup: str, into: ParsedMessage | None = None, limits: ParserConfig | None = None
) -> tuple[str, list[str]]:
    """Visible text of an HTML document (no script, style, comments) and the URLs in its attributes.

    With `limits` whose hidden_text is on, elements hidden by inline CSS are left out of
    the text and their text goes to `into.hidden` (spamd.mail.hidden); with normalize on,
    words split by inline tags or comments are joined (recorded in `into.obfuscations`).
    """
    # Offsets found in `lower` cut `markup`, so both must be as long: U+0130 (İ) is the
    # one character whose lower() is two ("i" + U+0307). Thirty of them before a
    # <script> block shifted the cut by thirty: the block's text became visible and
    # as much of the real text was dropped.
    lower = (markup.replace("\u0130", "I") if "\u0130" in markup else markup).lower()
    urls = _URL_ATTR_RE.findall(lower)
    if limits is not None and into is not None:
        if limits.normalize and "<" in markup:
            markup, joined = join_split_words(markup)
            if joined:
                into.obfuscations.append("split")
                lower = (markup.replace("\u0130", "I") if "\u0130" in markup else markup).lower()
        if limits.hidden_text:
            markup, lower, hidden, kinds = cut_hidden(markup, lower)
            for chunk in hidden:
                text = html_to_text(chunk)[0]
                into.hidden.append(normalize(text)[0] if limits.normalize else text)
            into.hidden_kinds.extend(kinds)
    for start_tag, end_tag in _INVISIBLE_BLOCKS:
        markup, lower = _drop_blocks(markup, lower, start_tag, end_tag)
    text = _TAG_RE.sub(" ", markup)
    if "&#" in text:
        text = _LONG_DECIMAL_REF_RE.sub(_short_decimal_ref, text)
    return html.unescape(text), urls
