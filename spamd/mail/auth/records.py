"""Tag=value lists (RFC 6376 section 3.2): DKIM-Signature, ARC-Seal, DKIM keys and DMARC records.

Any text gives a dict or a RecordError naming what is wrong; it does not check
what the tags mean (dkim.py and dmarc.py do).
"""

from __future__ import annotations

import re

from spamd.errors import SpamdError

_TAG_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_FOLDING = re.compile(r"[ \t\r\n]+")
MAX_RECORD = 8192  # longer than any real signature or policy record; longer is refused


class RecordError(SpamdError):
    """A signature, key or policy record that is not a tag list."""


def parse_tag_list(text: str | bytes) -> dict[str, str]:
    """`tag=value; ...` as a dict, tag names kept as written, values with folding whitespace removed."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if len(text) > MAX_RECORD:
        raise RecordError(f"a tag list of {len(text)} characters (at most {MAX_RECORD})")
    tags: dict[str, str] = {}
    for part in text.split(";"):
        if not part.strip():
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or not _TAG_NAME.match(name):
            raise RecordError(f"not a tag=value pair: {part.strip()[:60]!r}")
        if name in tags:
            raise RecordError(f"tag {name!r} appears twice")
        tags[name] = _FOLDING.sub("", value) if name in ("b", "bh", "p") else value.strip()
    return tags
