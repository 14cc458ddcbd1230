#!/usr/bin/env python3
"""What seeing through disguises costs: analysis time with [parser] normalize, hidden_text and word_salad on and off.

Parses and tokenizes the first --messages of each index (read into memory once)
in this process, with the three switches off, each alone and all three (the
default), interleaved, --rounds times; prints the best round's microseconds of
CPU time per message (process time, which other work on the machine disturbs
less than the clock) and each setting's cost over "off" as a share of the
analysis time. The target is at most 10% for the normaliser.

    nice -n 10 python scripts/costs/disguise_cost.py ../shared/corpora/trec07p-dev/full/index \\
        ../shared/corpora/spamassassin/index
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from spamd.config import ParserConfig
from spamd.evaluation.trec import index_messages, read_index
from spamd.mail.message import parse_message, strip_own_headers
from spamd.mail.normalize import normalize
from spamd.mail.tokenize import tokenize

SETTINGS = {
    "off": {"normalize": False, "hidden_text": False, "word_salad": False},
    "normalize": {"normalize": True, "hidden_text": False, "word_salad": False},
    "hidden_text": {"normalize": False, "hidden_text": True, "word_salad": False},
    "word_salad": {"normalize": False, "hidden_text": False, "word_salad": True},
    "all": {"normalize": True, "hidden_text": True, "word_salad": True},
}


def analysis_seconds(raws: list[bytes], limits: ParserConfig) -> float:
    started = time.process_time()
    for raw in raws:
        tokenize(parse_message(strip_own_headers(raw), limits))
    return time.process_time() - started


def normalizer_share(raws: list[bytes]) -> float:
    """The normaliser's CPU time as a share of analysis with everything on, message by message (one load for both).

    Each message is analyzed, then its texts as the parser left them are normalized again:
    a second normalize of normalized text does the same checks, so it costs what the first did.
    """
    limits, analysis, normalizing = ParserConfig(), 0.0, 0.0
    for raw in raws:
        started = time.process_time()
        parsed = parse_message(strip_own_headers(raw), limits)
        tokenize(parsed)
        middle = time.process_time()
        for text in parsed.texts:
            normalize(text)
        analysis, normalizing = analysis + middle - started, normalizing + time.process_time() - middle
    return normalizing / analysis


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index", type=Path, nargs="+")
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for index in args.index:
        entries = read_index(index)[: args.messages]
        raws = [raw for _, raw in index_messages(entries, on_skip=lambda entry, reason: None)]
        best = dict.fromkeys(SETTINGS, float("inf"))
        for _ in range(args.rounds):
            for name, switches in SETTINGS.items():
                limits = dataclasses.replace(ParserConfig(), **switches)
                best[name] = min(best[name], analysis_seconds(raws, limits))
        per_message = {name: 1e6 * seconds / len(raws) for name, seconds in best.items()}
        cells = ", ".join(
            f"{name} {us:.0f} us/msg ({100 * (us / per_message['off'] - 1):+.1f}%)" for name, us in per_message.items()
        )
        print(f"{index}: {len(raws)} messages, best of {args.rounds}: {cells}")
        share = min(normalizer_share(raws) for _ in range(args.rounds))
        print(f"{index}: the normaliser's share of analysis time (each message in turn): {100 * share:.1f}%")


if __name__ == "__main__":
    main()
