#!/usr/bin/env python3
"""Count the messages of a TREC index that yield no body tokens, or no tokens at all, and say why.

Text that vanishes silently is the worst parser defect: a message with no body
tokens is scored on its headers alone, and one with no tokens at all is 0.5 for
any model. For each such message the reason is guessed from its structure (no
text part, an empty or whitespace-only text, only attachments, text that is all
words longer than the tokenizer keeps, a parser cap) and the counts per reason
are printed, with up to --examples file names for each.

    python scripts/accuracy/audit_text.py ../shared/corpora/spamassassin/index ../shared/corpora/trec07p-dev/full/index
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

from spamd.config import load_config
from spamd.errors import SpamdError
from spamd.evaluation.trec import IndexEntry, index_messages, read_index, say_skipped
from spamd.mail.message import parse_message, strip_own_headers
from spamd.mail.tokenize import MAX_WORD, body_tokens, tokenize


def why_no_body_tokens(parsed) -> str:
    if not parsed.parts and not parsed.texts:
        return "no MIME part at all"
    text_parts = [p for p in parsed.parts if p.content_type.startswith("text/")]
    if not text_parts and not any(t.strip() for t in parsed.texts):
        kinds = sorted({p.content_type for p in parsed.parts})
        return f"no text part (only {', '.join(kinds)[:60]})"
    joined = " ".join(parsed.texts)
    if not joined.strip():
        if any(p.size == 0 for p in text_parts):
            return "empty text part"
        if parsed.defects:
            return f"text lost to a defect ({', '.join(sorted(set(parsed.defects)))[:60]})"
        return "text part with only markup or whitespace"
    if all(len(w) > MAX_WORD for w in joined.split()):
        return "every word longer than MAX_WORD (unsegmented script, encoded junk)"
    return "text without letters or digits"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index", type=Path, nargs="+")
    parser.add_argument("--examples", type=int, default=3)
    args = parser.parse_args()
    limits = load_config(None).parser
    for index in args.index:
        reasons: Counter[str] = Counter()
        examples: dict[str, list[str]] = defaultdict(list)
        entries = read_index(index)
        no_tokens = 0
        skipped: list[IndexEntry] = []

        def skip(entry: IndexEntry, reason: str, skipped: list[IndexEntry] = skipped) -> None:
            skipped.append(entry)
            say_skipped(entry, reason)

        for entry, raw in index_messages(entries, on_skip=skip):
            parsed = parse_message(strip_own_headers(raw), limits)
            if body_tokens(parsed):
                continue
            if not tokenize(parsed):
                no_tokens += 1
            reason = why_no_body_tokens(parsed)
            reasons[reason] += 1
            if len(examples[reason]) < args.examples:
                examples[reason].append(f"{entry.label} {entry.name}")
        print(
            f"{index}: {len(entries) - len(skipped)} messages ({len(skipped)} skipped: no mail message or unreadable), "
            f"{sum(reasons.values())} without body tokens, {no_tokens} without any token"
        )
        for reason, n in reasons.most_common():
            print(f"  {n:6d}  {reason}")
            for example in examples[reason]:
                print(f"          {example}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SpamdError as e:  # an index that cannot be read or has a line that is no entry: one line, no traceback
        sys.exit(f"{Path(sys.argv[0]).name}: {e}")
