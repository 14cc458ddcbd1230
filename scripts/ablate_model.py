#!/usr/bin/env python3
"""Feature families and estimation choices of the naive Bayes, each measured on every stream under full and errors-only feedback.

The candidates a top-tier TREC filter suggests, tried inside spamd's multinomial NB:
binary (presence) or other stored counts instead of round(4 log(1 + tf)); hashed
character n-grams of the first N characters of the decoded headers and text;
orthogonal sparse bigrams (word pairs at distance 1-4, the gap in the feature) of
the body; each family weighted; the smoothing and the evidence prior. The messages
are parsed and tokenized by spamd's own code once per stream (cached under
--work); each candidate is then an online run of the same count arithmetic as
spamd.model (featurize, token_log_odds, the verdict thresholds), with each extra
family hashed into a table of its own beside the tokens' so that a weight can be
given per family. The feedback is spamd.feedback's, as `spamctl eval --feedback`
gives it: `full`, every message trained with its gold label after it is scored
(TREC); `errors`, only the messages whose verdict was wrong or Unsure; `people`, the
simulated mailbox owner (seed 1), who corrects some mistakes late and sorts half of
the Unsure mail. Under `errors` every Unsure message is labelled, so a candidate
that scores more mail Unsure is given more labels: read its Unsure % beside it.

Prints a Markdown table: per candidate and protocol, the geometric mean over the
streams of its (1-ROCA)% over the default's, the worst stream's ratio, and the two
development corpora. --streams picks the indexes; with --variants all, each is also
rewritten into spamd.variants' derived streams (what the defaults are chosen on).

    python scripts/ablate_model.py --variants all \\
        ../shared/corpora/trec07p-dev/full/index ../shared/corpora/spamassassin/index
    python scripts/ablate_model.py --candidates binary,cng4-w0.3 ~/mail/index

Files of an index that are no mail message (empty, binary) or cannot be read are
named on stderr and left out. Takes 2-3 minutes a candidate for both corpora and
their 18 derived streams on 2 cores, once the streams are cached.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import pickle
import sys
import tempfile
from dataclasses import dataclass, field
from multiprocessing import Pool
from pathlib import Path

import numpy as np

from spamd.config import Config, ModelConfig
from spamd.evaluation import IndexEntry, one_minus_roca, read_index, read_mail, say_skipped
from spamd.message import parse_message, strip_own_headers
from spamd.feedback import Event, Feedback, Protocol
from spamd.model import Label, MultinomialNB, Verdict, featurize, token_log_odds, verdict_of
from spamd.tokenize import tokenize, words
from spamd.variants import VARIANTS, write_variant

# What an analyzed message keeps for every candidate: its tokens, and the decoded
# headers and text the n-gram families read.
Analyzed = tuple[list[str], str, str]


@dataclass(frozen=True)
class Candidate:
    name: str
    stored: str = "log"  # log: round(4 log(1 + tf)); binary: 1; log2: round(2 log(1 + tf))
    char_ngrams: int = 0  # n of the character n-grams (0: none)
    ngram_chars: int = 3000  # ... over the first this many characters of headers + text
    osb: bool = False  # orthogonal sparse bigrams of the body's words
    ngram_weight: float = 1.0
    osb_weight: float = 1.0
    model: dict[str, float] = field(default_factory=dict)  # ModelConfig overrides


CANDIDATES = [
    Candidate("default"),
    Candidate("binary", stored="binary"),
    Candidate("log2", stored="log2"),
    Candidate("osb", osb=True),
    Candidate("osb-w0.3", osb=True, osb_weight=0.3),
    Candidate("cng4", char_ngrams=4),
    Candidate("cng4-w0.3", char_ngrams=4, ngram_weight=0.3),
    Candidate("cng3-w0.3", char_ngrams=3, ngram_weight=0.3),
    Candidate("cng5-w0.3", char_ngrams=5, ngram_weight=0.3),
    Candidate("osb+cng4-w0.3", osb=True, osb_weight=0.3, char_ngrams=4, ngram_weight=0.3),
    Candidate("alpha0.1", model={"alpha": 0.1}),
    Candidate("evidence6", model={"evidence_prior": 6.0}),
    Candidate("evidence9", model={"evidence_prior": 9.0}),
    Candidate("alpha0.1-evidence6", model={"alpha": 0.1, "evidence_prior": 6.0}),
    # The table's size: more collisions in fewer buckets (the default is 22: 32 MiB).
    Candidate("hash_bits16", model={"hash_bits": 16}),
    Candidate("hash_bits18", model={"hash_bits": 18}),
    Candidate("hash_bits20", model={"hash_bits": 20}),
    Candidate("hash_bits24", model={"hash_bits": 24}),
]
_BY_NAME = {c.name: c for c in CANDIDATES}
_CONFIG = Config()


def analyze(path: str) -> Analyzed | str:
    raw, why = read_mail(path)
    if raw is None:
        return why
    msg = parse_message(strip_own_headers(raw), _CONFIG.parser)
    head = "\n".join(f"{name}: {value}" for name, value in msg.headers)
    return tokenize(msg), head[:8000], "\n".join(msg.texts)[:16000]


def cached_stream(index: Path, work: Path) -> tuple[Path, int]:
    """The stream's messages analyzed once and pickled, keyed by the index's place and content: (the pickle, messages).

    (The derived streams' indexes are alike word for word: only their directories differ.)
    """
    key = hashlib.blake2b(str(index.resolve()).encode() + b"\0" + index.read_bytes(), digest_size=8).hexdigest()
    cache = work / f"analyzed-{key}.pickle"
    if cache.exists():
        return cache, len(pickle.loads(cache.read_bytes()))
    entries: list[IndexEntry] = read_index(index)
    with Pool(2) as pool:
        analyzed = pool.map(analyze, [str(e.path) for e in entries], chunksize=64)
    stream = []
    for entry, result in zip(entries, analyzed):
        if isinstance(result, str):
            say_skipped(entry, result)
        else:
            stream.append((str(entry.label).lower().endswith("spam"), result))
    cache.write_bytes(pickle.dumps(stream))
    return cache, len(stream)


def stream_name(index: Path) -> str:
    """trec07p-dev for ../shared/corpora/trec07p-dev/full/index, spamassassin for .../spamassassin/index."""
    parts = [p for p in index.resolve().parent.parts if p not in ("full", "partial")]
    return parts[-1] if index.name == "index" else index.name


def osb_tokens(body_words: list[str], reach: int = 4) -> list[str]:
    """Word pairs at distance 1..reach, the distance in the feature (CRM114's OSB)."""
    return [f"osb{d}:{a} {body_words[i + d]}" for i, a in enumerate(body_words) for d in range(1, reach + 1) if i + d < len(body_words)]


def families(candidate: Candidate, item: Analyzed) -> list[tuple[list[str], float]]:
    tokens, head, text = item
    found = [(tokens, 1.0)]
    if candidate.osb:
        found.append((osb_tokens(words(text)[:500]), candidate.osb_weight))
    if candidate.char_ngrams:
        source, n = (head + "\n" + text)[: candidate.ngram_chars], candidate.char_ngrams
        found.append((["g:" + g for g in {source[i : i + n] for i in range(len(source) - n + 1)}], candidate.ngram_weight))
    return found


def stored_counts(candidate: Candidate, counts: np.ndarray) -> np.ndarray:
    if candidate.stored == "binary":
        return np.ones_like(counts)
    if candidate.stored == "log2":
        return np.maximum(1, np.rint(2 * np.log1p(counts))).astype(np.uint32)
    return MultinomialNB.stored_counts(counts)


def run(candidate: Candidate, stream: list[tuple[bool, Analyzed]], protocol: str) -> tuple[float, int]:
    """One online run under `protocol` (spamd.feedback's full, errors or people, seed 1): (1-ROCA)%, trained, Unsure%."""
    config = ModelConfig(**candidate.model)
    bits = config.hash_bits
    n_families = 1 + candidate.osb + bool(candidate.char_ngrams)
    counts = np.zeros((2, n_families << bits), np.uint32)  # one table per family, side by side
    token_totals, doc_totals, distinct = np.zeros(2, np.int64), np.zeros(2, np.int64), 0
    scores, labels = np.empty(len(stream)), np.empty(len(stream), bool)
    trained = unsure = 0
    feedback = Feedback(Protocol(feedback=protocol))
    waiting: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def learn(event: Event) -> None:
        nonlocal distinct, trained
        ids, message_counts = waiting[event.message]
        if not feedback.waits_for(event.message):
            del waiting[event.message]
        label = int(event.label)
        added = stored_counts(candidate, message_counts)
        both = counts.take(ids, axis=1)
        distinct += len(ids) - int(np.count_nonzero(both[0] | both[1]))
        counts[label][ids] = both[label] + added
        token_totals[label] += int(added.sum())
        doc_totals[label] += 1
        trained += 1

    for number, (is_spam, item) in enumerate(stream):
        for event in feedback.due(number):  # each message is labelled at most once here: no ledger needed
            learn(event)
        ids_parts, count_parts, weight_parts = [], [], []
        for place, (tokens, weight) in enumerate(families(candidate, item)):
            features = featurize(tokens, bits)
            ids_parts.append(features.ids.astype(np.int64) + (place << bits))
            count_parts.append(features.counts)
            weight_parts.append(np.full(len(features.ids), weight))
        ids, weights = np.concatenate(ids_parts), np.concatenate(weight_parts)
        score = 0.0
        if len(ids) and doc_totals.all():
            log_odds = token_log_odds(config, counts.take(ids, axis=1), token_totals, distinct)
            score = float((log_odds * weights).sum()) / (weights.sum() + config.neutral_tokens)
        scores[number], labels[number] = score, is_spam
        verdict = verdict_of(config, score).verdict
        unsure += verdict is Verdict.UNSURE
        waiting[number] = (ids, np.concatenate(count_parts))
        for event in feedback.observe(number, Label(int(is_spam)), verdict, score):
            learn(event)
        if not feedback.waits_for(number):
            waiting.pop(number, None)
    return one_minus_roca(scores, labels), trained, 100.0 * unsure / max(1, len(stream))


def _job(task: tuple[Candidate, str, Path, str]) -> tuple[str, str, str, float, int, float]:
    candidate, protocol, cache, name = task
    return (candidate.name, protocol, name, *run(candidate, pickle.loads(cache.read_bytes()), protocol))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="candidates: " + ", ".join(_BY_NAME))
    parser.add_argument("index", type=Path, nargs="+")
    parser.add_argument("--variants", default="original", help="comma-separated names from spamd.variants, or 'all'")
    parser.add_argument("--candidates", default="all", help="comma-separated candidate names (the default is always run)")
    parser.add_argument("--feedback", default="full,errors,people", help="comma-separated: full, errors, people (seed 1)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "spamd-ablate-model")
    args = parser.parse_args()
    names = list(_BY_NAME) if args.candidates == "all" else ["default", *[n for n in args.candidates.split(",") if n != "default"]]
    unknown = [n for n in names if n not in _BY_NAME]
    if unknown:
        parser.error(f"unknown candidates: {', '.join(unknown)}")
    variants = [v for v in VARIANTS if v != "original"] if args.variants == "all" else [v for v in args.variants.split(",") if v != "original"]
    protocols = args.feedback.split(",")
    args.work.mkdir(parents=True, exist_ok=True)
    caches: list[tuple[str, Path]] = []
    for index in args.index:
        if not index.is_file():
            print(f"ablate_model.py: no index at {index}", file=sys.stderr)
            return 2
        for variant in ["original", *variants]:
            variants_dir = args.work / hashlib.blake2b(str(index.resolve()).encode(), digest_size=6).hexdigest()
            path = index if variant == "original" else write_variant(index, variant, variants_dir)
            cache, size = cached_stream(path, args.work)
            name = stream_name(index) + ("" if variant == "original" else f", {variant}")
            caches.append((name, cache))
            print(f"analyzed {name}: {size} messages", file=sys.stderr)
    tasks = [(_BY_NAME[n], p, cache, name) for n in names for p in protocols for name, cache in caches]
    results: dict[tuple[str, str, str], tuple[float, int, float]] = {}
    with Pool(2) as pool:
        for candidate, protocol, name, roca, trained, unsure in pool.imap_unordered(_job, tasks):
            results[candidate, protocol, name] = (roca, trained, unsure)
    first, second = caches[0][0], caches[min(len(caches) - 1, 1 + len(variants))][0]
    header = "| candidate | " + " | ".join(f"{p}: geo-mean ratio | worst | {first} | {second} | Unsure %" for p in protocols) + " |"
    print(header)
    print("|" + "---|" * (1 + 5 * len(protocols)))
    for n in names:
        cells = [n]
        for p in protocols:
            ratios = [results[n, p, s][0] / results["default", p, s][0] for s, _ in caches if results["default", p, s][0] > 0]
            unsure = sum(results[n, p, s][2] for s, _ in caches) / len(caches)
            cells += [f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}", f"{max(ratios):.2f}",
                      f"{results[n, p, first][0]:.4f}", f"{results[n, p, second][0]:.4f}", f"{unsure:.1f}"]  # fmt: skip
        print("| " + " | ".join(cells) + " |")
    print(f"\n{len(caches)} streams; ratios are the candidate's (1-ROCA)% over the default's on the same stream and "
          "protocol; Unsure % is the mean over the streams of the mail scored Unsure.")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
