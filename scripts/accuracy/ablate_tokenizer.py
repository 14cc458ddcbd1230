#!/usr/bin/env python3
"""Rerun the tokenizer measurements: the TREC protocol with one token family removed at a time.

Each tokenizer rule emits tokens with its own prefix, so removing a rule is a
filter on the tokenizer's output; everything else (parser, model, thresholds) is
the real code path. Prints (1-ROCA)% and hm% at sm%=0.1 per corpus, full
tokenizer first. This is how the figures in spamd/mail/tokenize.py were obtained.

    python scripts/accuracy/ablate_tokenizer.py                  # both corpora
    python scripts/accuracy/ablate_tokenizer.py --corpus spamassassin
    python scripts/accuracy/ablate_tokenizer.py --index ~/mail/index   # a TREC index of one's own mail

Files of an index that are no mail message (empty, binary) or cannot be read are
named on stderr and left out.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from spamd.config import Config
from spamd.errors import SpamdError
from spamd.evaluation.measures import hm_at_sm, one_minus_roca
from spamd.evaluation.trec import index_messages, read_index
from spamd.mail.message import parse_message, strip_own_headers
from spamd.mail.tokenize import tokenize
from spamd.model.bayes import Label, MultinomialNB, featurize

CORPORA = Path(__file__).resolve().parents[3] / "shared" / "corpora"
INDEXES = {"trec07p-dev": CORPORA / "trec07p-dev/full/index", "spamassassin": CORPORA / "spamassassin/index"}

_HEADER_TOKEN_RE = re.compile(
    r"(header|subject|x-mailer|content-type|org|from|to|cc|reply-to|sender|return-path|received|message-id|date)"
    r"(-shape|-first-shape|-zone|-count|-local-shape)?[:@]"
)

# Token families by how their tokens look.
FAMILIES: dict[str, Callable[[str], bool]] = {
    "header presence (header:)": lambda t: t.startswith("header:"),
    "subject word pairs": lambda t: t.startswith("subject:") and " " in t,
    "url path words (urlpath:)": lambda t: t.startswith("urlpath:"),
    "url hosts (url:)": lambda t: t.startswith("url:"),
    "non-ASCII runs (nonascii:)": lambda t: t.startswith("nonascii:"),
    "MIME structure (part:, filename-ext:, defect:)": lambda t: t.startswith(("part:", "filename-ext:", "defect:")),
    "Received hosts (received:)": lambda t: t.startswith("received:"),
    "Message-ID domain": lambda t: t.startswith("message-id@"),
    "Date zone and shape": lambda t: t.startswith(("date-zone:", "date-shape:")),
    "header shapes (*-shape:, to-count:)": lambda t: "-shape:" in t.split(" ")[0] or t.startswith("to-count:"),
    "all header-tagged tokens": lambda t: _HEADER_TOKEN_RE.match(t) is not None,
}


def online(tokens_per_message: list[tuple[Label, list[str]]], config: Config) -> tuple[float, float]:
    model = MultinomialNB(config.model)
    scores = np.empty(len(tokens_per_message))
    is_spam = np.empty(len(tokens_per_message), dtype=bool)
    for i, (label, tokens) in enumerate(tokens_per_message):
        features = featurize(tokens, config.model.hash_bits)
        scores[i] = model.score(features).log_odds
        is_spam[i] = label == Label.SPAM
        model.learn_one(features, label)
    return one_minus_roca(scores, is_spam), hm_at_sm(scores, is_spam)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog=f"Without --corpus or --index: both corpora under {CORPORA}."
    )
    parser.add_argument("--corpus", choices=sorted(INDEXES), action="append", help="a development corpus (repeatable)")
    parser.add_argument("--index", type=Path, action="append", default=[], help="a TREC index (repeatable)")
    args = parser.parse_args()
    config = Config()
    indexes = {name: INDEXES[name] for name in args.corpus or ([] if args.index else list(INDEXES))}
    if not all(index.exists() for index in indexes.values()):
        print(f"corpora not found under {CORPORA}", file=sys.stderr)
        return 2
    indexes.update({str(index): index for index in args.index})
    names = list(indexes)
    tokenized = {}
    for name in names:
        tokenized[name] = [
            (entry.label, tokenize(parse_message(strip_own_headers(raw), config.parser)))
            for entry, raw in index_messages(read_index(indexes[name]))
        ]
    print(f"{'tokens removed':<48}" + "".join(f"{n:>28}" for n in names))
    rows = [("none (full tokenizer)", lambda t: False), *FAMILIES.items()]
    for label, drop in rows:
        cells = []
        for name in names:
            data = [(lab, [t for t in toks if not drop(t)]) for lab, toks in tokenized[name]]
            roca, hm = online(data, config)
            cells.append(f"{roca:.4f} / hm {hm:5.2f}")
        print(f"{label:<48}" + "".join(f"{c:>28}" for c in cells), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SpamdError as e:  # an index that cannot be read or has a line that is no entry: one line, no traceback
        sys.exit(f"{Path(sys.argv[0]).name}: {e}")
