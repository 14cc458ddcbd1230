#!/usr/bin/env python3
"""Analysis time a message (raw bytes -> hashed features) with the mail-evidence families off and on, interleaved.

On a shared machine a run's speed drifts by more than the families cost, so the two
settings are timed in alternation over the same chunk of messages, round after
round, and each chunk keeps its fastest time per setting: the ratio of the sums is
what to read. Timed in the thread's CPU time (time.thread_time), not the wall clock:
time spent waiting for a core while other processes run is not counted. One process; the messages are read into memory first; the Public
Suffix List is loaded before timing (once per process, 0.07 s). Also each family
alone, the same way.

    python scripts/costs/evidence_cost.py ../shared/corpora/trec07p-dev/full/index --messages 2000
    python scripts/costs/evidence_cost.py ../shared/corpora/modern-dev/index
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from spamd.config import Config, ModelConfig
from spamd.evaluation.trec import mail_entries, read_index
from spamd.learning.classifier import Classifier
from spamd.mail.domains import registrable_domain
from spamd.mail.message import read_message_file
from spamd.mail.tokenize import EVIDENCE_FAMILIES
from spamd.model.bayes import Features, featurize

CHUNK = 100


def analyzer(families: tuple[str, ...]) -> Callable[[bytes], Features]:
    """raw -> features under the default config with `families` switched on and the others off."""
    config = Config(model=ModelConfig(**{name: name in families for name in EVIDENCE_FAMILIES}))  # type: ignore[arg-type]
    classifier = Classifier(config, None)  # type: ignore[arg-type]
    bits = config.model.hash_bits
    return lambda raw: featurize(classifier.tokens(raw), bits)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index", type=Path)
    parser.add_argument("--messages", type=int, default=2000, help="the index's first N mail messages")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    raws = [read_message_file(e.path) for e in mail_entries(read_index(args.index))[: args.messages]]
    if not raws:
        print(f"{args.index}: no mail message", file=sys.stderr)
        return 1
    registrable_domain("warm.example.com")  # the list's one-off load, outside the timing
    settings = {"off": (), **{name: (name,) for name in EVIDENCE_FAMILIES}, "all four": tuple(EVIDENCE_FAMILIES)}
    analyzers = {name: analyzer(families) for name, families in settings.items()}
    chunks = [raws[i : i + CHUNK] for i in range(0, len(raws), CHUNK)]
    best = {name: [float("inf")] * len(chunks) for name in settings}
    for _ in range(args.rounds):
        for place, chunk in enumerate(chunks):
            for name, analyze in analyzers.items():
                start = time.thread_time()
                for raw in chunk:
                    analyze(raw)
                best[name][place] = min(best[name][place], time.thread_time() - start)
    base = sum(best["off"])
    print(
        f"index: {args.index}, {len(raws):,} messages, fastest of {args.rounds} interleaved rounds per chunk of {CHUNK}"
    )
    for name in settings:
        total = sum(best[name])
        print(f"{name:>18}: {1e6 * total / len(raws):8.0f} us a message, {total / base:.3f}x off")
    return 0


if __name__ == "__main__":
    sys.exit(main())
