#!/usr/bin/env python3
"""Feature families, estimation choices and training rules of the naive Bayes, each measured on every stream under three feedbacks.

The candidates a top-tier TREC filter suggests, tried inside spamd's multinomial NB,
each a set of [model] settings: binary (presence) or other stored counts instead of
round(4 log(1 + tf)); hashed character n-grams of the first N characters of the
decoded headers and text; orthogonal sparse bigrams (word pairs at distance 1-4, the
gap in the feature) of the body; each family weighted (spamd/model/families.py); the
smoothing and the evidence prior. The messages are parsed and tokenized by spamd's
own code once per stream (cached under --work, with the decoded headers and text the
families read). Also Rennie's weight normalization and the class prior ([model]
switches), and the training rule ([model] train_margin, the trainer's thick threshold:
a message its score already files right by the margin is not learned). Each candidate is then
an online run of spamd.model.bayes's MultinomialNB (learn_one, score) on the families of spamd.model.families, hashed into the one table as
spamd hashes them, or with --family-tables each family into a table of its own (what
the collisions between families cost). The feedback is spamd.evaluation.feedback's, as `spamctl eval --feedback`
gives it: `full`, every message trained with its gold label after it is scored
(TREC); `errors`, only the messages whose verdict was wrong or Unsure; `people`, the
simulated mailbox owner (seed 1), who corrects some mistakes late and sorts half of
the Unsure mail. Under `errors` every Unsure message is labelled, so a candidate
that scores more mail Unsure is given more labels: read its Unsure % beside it.

Prints a Markdown table: per candidate and protocol, the geometric mean over the
streams of its (1-ROCA)% over the default's, the worst stream's ratio, and the two
development corpora. --streams picks the indexes; with --variants all, each is also
rewritten into spamd_lab.variants' derived streams (what the defaults are chosen on).

    python scripts/accuracy/ablate_model.py --variants all \\
        ../shared/corpora/trec07p-dev/full/index ../shared/corpora/spamassassin/index
    python scripts/accuracy/ablate_model.py --candidates binary,cng4-w0.3 ~/mail/index
    python scripts/accuracy/ablate_model.py --time --candidates wnorm,prior ~/mail/index   # us a message in score, learn_one

The n-grams are read from at most 8,000 characters of headers and 16,000 of text
(what the cache keeps): the same as spamd for ngram_chars up to 8,000.

Files of an index that are no mail message (empty, binary) or cannot be read are
named on stderr and left out. Takes 2-3 minutes a candidate for both corpora and
their 18 derived streams on 2 cores, once the streams are cached.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import pickle
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from multiprocessing import Pool
from pathlib import Path

import numpy as np

from spamd.config import AuthConfig, Config, ModelConfig
from spamd.evaluation.feedback import Event, Feedback, People, Protocol
from spamd.evaluation.trec import IndexEntry, one_minus_roca, read_index, read_mail, say_skipped
from spamd.learning.outcomes import left_unlearned
from spamd.mail.auth.outcomes import outcome_tokens
from spamd.mail.auth.verify import Authenticator
from spamd.mail.message import parse_message, strip_own_headers
from spamd.mail.tokenize import EVIDENCE_FAMILIES, evidence_tokens, salad_tokens, tokenize
from spamd.model.bayes import Features, Label, MultinomialNB, Verdict, featurize
from spamd.model.families import (
    evidence_families,
    families_of,
    is_weighted,
    join_families,
    message_sources,
    salad_weights,
)
from spamd.people.senders import from_address

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from spamd_lab.variants import VARIANTS, write_variant  # noqa: E402

# What an analyzed message keeps for every candidate: its tokens, the decoded
# headers and text the n-gram families read, each mail-evidence family's tokens, and how many
# of its tokens (the last) are word salad's ([model] salad_tokens).
Analyzed = tuple[list[str], str, str, dict[str, list[str]], int]
# Part of the cache key: a cache written by another version of the analysis is not read.
_ANALYSIS_VERSION = b"evidence-3+salad-2"
# Sender authentication as the analysis runs it offline (no DNS: a corpus's keys are long
# gone; each look-up is a temporary error), trusting the Authentication-Results of these
# authserv-ids below any number of Received headers when --trusted-authserv-ids names them.
_AUTH = AuthConfig(dns_budget_s=0.0)


@dataclass(frozen=True)
class Candidate:
    name: str
    model: dict[str, object] = field(default_factory=dict)  # ModelConfig overrides


CANDIDATES = [
    Candidate("default"),
    Candidate("binary", {"stored_counts": "binary"}),
    Candidate("log2", {"stored_counts": "log2"}),
    Candidate("osb", {"osb": True}),
    Candidate("osb-w0.3", {"osb": True, "osb_weight": 0.3}),
    Candidate("cng4", {"char_ngrams": 4}),
    Candidate("cng4-w0.3", {"char_ngrams": 4, "ngram_weight": 0.3}),
    Candidate("cng3-w0.3", {"char_ngrams": 3, "ngram_weight": 0.3}),
    Candidate("cng5-w0.3", {"char_ngrams": 5, "ngram_weight": 0.3}),
    Candidate("osb+cng4-w0.3", {"osb": True, "osb_weight": 0.3, "char_ngrams": 4, "ngram_weight": 0.3}),
    # The same in four times the buckets: the families' collisions with the tokens, thinned.
    Candidate(
        "osb+cng4-w0.3-bits24", {"osb": True, "osb_weight": 0.3, "char_ngrams": 4, "ngram_weight": 0.3, "hash_bits": 24}
    ),
    Candidate("alpha0.1", {"alpha": 0.1}),
    Candidate("evidence6", {"evidence_prior": 6.0}),
    Candidate("evidence9", {"evidence_prior": 9.0}),
    Candidate("alpha0.1-evidence6", {"alpha": 0.1, "evidence_prior": 6.0}),
    # The table's size: more collisions in fewer buckets (the default is 22: 32 MiB).
    Candidate("hash_bits16", {"hash_bits": 16}),
    Candidate("hash_bits18", {"hash_bits": 18}),
    Candidate("hash_bits20", {"hash_bits": 20}),
    Candidate("hash_bits24", {"hash_bits": 24}),
    # Estimation and the training rule (docs/accuracy.md "Feature families and estimation").
    Candidate("wnorm", {"weight_normalization": True}),
    Candidate("prior", {"class_prior": True}),
    Candidate("wnorm+prior", {"weight_normalization": True, "class_prior": True}),
    # The training rule: [model] train_margin (the default is 2; inf learns every message).
    Candidate("margin-inf", {"train_margin": math.inf}),
    Candidate("margin0.5", {"train_margin": 0.5}),
    Candidate("margin1", {"train_margin": 1.0}),
    Candidate("margin1.5", {"train_margin": 1.5}),
    Candidate("margin3", {"train_margin": 3.0}),
    Candidate("margin4", {"train_margin": 4.0}),
    # The score over the most decisive tokens only ([model] decisive_tokens; docs/accuracy.md "First contact").
    Candidate("decisive30", {"decisive_tokens": 30}),
    Candidate("decisive75", {"decisive_tokens": 75}),
    Candidate("decisive150", {"decisive_tokens": 150}),
    # A run of word salad weighing at most this many tokens ([model] salad_tokens; docs/accuracy.md "First contact").
    Candidate("salad0", {"salad_tokens": 0.0}),
    Candidate("salad2", {"salad_tokens": 2.0}),
    Candidate("salad3", {"salad_tokens": 3.0}),
    Candidate("salad5", {"salad_tokens": 5.0}),
    Candidate("salad10", {"salad_tokens": 10.0}),
    Candidate("salad20", {"salad_tokens": 20.0}),
    Candidate("salad40", {"salad_tokens": 40.0}),
    # The mail-evidence families (spamd/mail/senders_claimed.py, links.py, attachments.py, bulk.py).
    # sender_claims is on by default: "sender_claims" and its pairs were measured when it
    # was not (they now equal the defaults and the other family); no-sender_claims is without.
    Candidate("sender_claims", {"sender_claims": True}),
    Candidate("no-sender_claims", {"sender_claims": False}),
    Candidate("link_targets", {"link_targets": True}),
    Candidate("attachment_kinds", {"attachment_kinds": True}),
    Candidate("bulk_marks", {"bulk_marks": True}),
    Candidate(
        "evidence-all", {"sender_claims": True, "link_targets": True, "attachment_kinds": True, "bulk_marks": True}
    ),
    Candidate("sender_claims+bulk_marks", {"sender_claims": True, "bulk_marks": True}),
    Candidate("sender_claims+link_targets", {"sender_claims": True, "link_targets": True}),
    Candidate("sender_claims+attachment_kinds", {"sender_claims": True, "attachment_kinds": True}),
    # Sender authentication's outcomes as tokens (spamd/mail/auth/outcomes.py).
    Candidate("auth_outcomes", {"auth_outcomes": True}),
]
_BY_NAME = {c.name: c for c in CANDIDATES}
_CONFIG = Config()


_AUTHENTICATORS: dict[AuthConfig, Authenticator] = {}


def _authenticator(config: AuthConfig) -> Authenticator:
    """One per process and config (its resolver reads the system's configuration once)."""
    if config not in _AUTHENTICATORS:
        _AUTHENTICATORS[config] = Authenticator(config)
    return _AUTHENTICATORS[config]


def analyze(path: str) -> Analyzed | str:
    raw, why = read_mail(path)
    if raw is None:
        return why
    stripped = strip_own_headers(raw)
    msg = parse_message(stripped, _CONFIG.parser)
    head, text = message_sources(msg)
    evidence = {name: evidence_tokens(msg, [name]) for name in EVIDENCE_FAMILIES}
    auth = _authenticator(_AUTH).verify(stripped, msg.headers, from_address(msg.header("from")))
    evidence["auth_outcomes"] = outcome_tokens(auth)
    return tokenize(msg), head[:8000], text[:16000], evidence, len(salad_tokens(msg))


def cached_stream(index: Path, work: Path) -> tuple[Path, int]:
    """The stream's messages analyzed once and pickled, keyed by the index's place and content: (the pickle, messages).

    (The derived streams' indexes are alike word for word: only their directories differ.)
    """
    trusted = ",".join(_AUTH.trusted_authserv_ids).encode()
    key = hashlib.blake2b(
        _ANALYSIS_VERSION + trusted + str(index.resolve()).encode() + b"\0" + index.read_bytes(), digest_size=8
    ).hexdigest()
    cache = work / f"analyzed-{key}.pickle"
    if cache.exists():
        return cache, len(pickle.loads(cache.read_bytes()))
    entries: list[IndexEntry] = read_index(index)
    with Pool(2) as pool:
        analyzed = pool.map(analyze, [str(e.path) for e in entries], chunksize=64)
    stream = []
    for entry, result in zip(entries, analyzed, strict=True):
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


def features(config: ModelConfig, item: Analyzed, family_tables: bool) -> Features:
    """The message's features under `config`'s families: in the one table as spamd makes them, or a table per family."""
    tokens, head, text, evidence, salad = item
    capped = salad_weights(tokens, salad, config)
    claims = [t for name in evidence_families(config) for t in evidence[name]]
    if config.auth_outcomes:
        claims = claims + evidence["auth_outcomes"]
    tokens = tokens + claims
    if capped is not None and claims:
        capped = np.concatenate([capped, np.ones(len(claims))])
    families = families_of(head, text, config)
    if not family_tables or not families:
        joined, weights = join_families(tokens, families, config, capped)
        return featurize(joined, config.hash_bits, weights)
    parts = [featurize(tokens, config.hash_bits), *(featurize(found, config.hash_bits) for found, _ in families)]
    family_weights = [1.0, *(weight for _, weight in families)]
    return Features(
        np.concatenate([f.ids + np.uint32(place << config.hash_bits) for place, f in enumerate(parts)]),
        np.concatenate([f.counts for f in parts]),
        np.concatenate([np.full(len(f), w) for f, w in zip(parts, family_weights, strict=True)])
        if is_weighted(config)
        else None,
    )


def run(
    candidate: Candidate, stream: list[tuple[bool, Analyzed]], protocol: str, family_tables: bool = False
) -> tuple[float, int, float, float]:
    """One online run under `protocol` (spamd.evaluation.feedback's full, errors or people, seed 1): (1-ROCA)%, trained,
    Unsure % of all mail, Unsure % of the ham."""
    config = ModelConfig(**candidate.model)  # type: ignore[arg-type]
    tables = 1 + config.osb + bool(config.char_ngrams) if family_tables else 1
    # A table per family, side by side: 2 more bits of buckets hold up to four.
    model = MultinomialNB(replace(config, hash_bits=config.hash_bits + 2) if tables > 1 else config)
    scores, labels = np.empty(len(stream)), np.empty(len(stream), bool)
    trained = unsure = ham_unsure = 0
    feedback = Feedback(feedback_protocol(protocol))
    waiting: dict[int, Features] = {}

    def learn(event: Event) -> None:
        nonlocal trained
        message = waiting[event.message]
        if not feedback.waits_for(event.message):
            del waiting[event.message]
        label = Label(int(event.label))
        source = feedback.protocol.trainer_source(event.source)
        if left_unlearned(config, label, source, lambda: model.score(message)):
            return  # spamd.engine.trainer.Trainer's thick threshold, as spamctl eval applies it
        model.learn_one(message, label)
        trained += 1

    for number, (is_spam, item) in enumerate(stream):
        for event in feedback.due(number):  # each message is labelled at most once here: no ledger needed
            learn(event)
        message = features(config, item, tables > 1)
        score = model.score(message)
        scores[number], labels[number] = score.log_odds, is_spam
        unsure += score.verdict is Verdict.UNSURE
        ham_unsure += score.verdict is Verdict.UNSURE and not is_spam
        waiting[number] = message
        for event in feedback.observe(number, Label(int(is_spam)), score.verdict, score.log_odds):
            learn(event)
        if not feedback.waits_for(number):
            waiting.pop(number, None)
    hams = max(1, len(stream) - int(labels.sum()))
    return one_minus_roca(scores, labels), trained, 100.0 * unsure / max(1, len(stream)), 100.0 * ham_unsure / hams


def feedback_protocol(name: str) -> Protocol:
    """`full`, `errors`, `people` (seed 1) or `people-sN`: the simulated owner with seed N (what is noise, what effect)."""
    feedback, _, seed = name.partition("-s")
    return Protocol(feedback=feedback, people=People(seed=int(seed) if seed else 1))


def model_time(candidate: Candidate, stream: list[tuple[bool, Analyzed]], rounds: int = 3) -> tuple[float, float]:
    """Microseconds a message spends in score and in learn_one under full feedback (features made beforehand): best of `rounds`."""
    config = ModelConfig(**candidate.model)  # type: ignore[arg-type]
    made = [(Label(int(is_spam)), features(config, item, False)) for is_spam, item in stream]
    best = (math.inf, math.inf)
    for _ in range(rounds):
        model, scoring, learning = MultinomialNB(config), 0.0, 0.0
        for label, message in made:
            start = time.perf_counter()
            model.score(message)
            middle = time.perf_counter()
            model.learn_one(message, label)
            scoring, learning = scoring + middle - start, learning + time.perf_counter() - middle
        best = (min(best[0], 1e6 * scoring / len(made)), min(best[1], 1e6 * learning / len(made)))
    return best


def _job(task: tuple[Candidate, str, Path, str, bool]) -> tuple[str, str, str, float, int, float, float]:
    candidate, protocol, cache, name, family_tables = task
    return (candidate.name, protocol, name, *run(candidate, pickle.loads(cache.read_bytes()), protocol, family_tables))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="candidates: " + ", ".join(_BY_NAME))
    parser.add_argument("index", type=Path, nargs="+")
    parser.add_argument(
        "--variants", default="original", help="comma-separated names from spamd_lab.variants, or 'all'"
    )
    parser.add_argument(
        "--candidates", default="all", help="comma-separated candidate names (the default is always run)"
    )
    parser.add_argument(
        "--feedback",
        default="full,errors,people",
        help="comma-separated: full, errors, people (seed 1), people-s2 (seed 2)...",
    )
    parser.add_argument(
        "--family-tables",
        action="store_true",
        help="hash each family into a table of its own (spamd hashes them all into one)",
    )
    parser.add_argument(
        "--time",
        action="store_true",
        help="only time each candidate's score and learn_one on the first stream, one process (no table of accuracy)",
    )
    parser.add_argument(
        "--trusted-authserv-ids",
        default="",
        help="comma-separated: trust these Authentication-Results however deep below the Received headers "
        "(the corpus's original receivers, as if they were your own servers; a measurement, not a deployment)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write every stream's figures here")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "spamd-ablate-model")
    args = parser.parse_args()
    if args.trusted_authserv_ids:
        global _AUTH  # read by the analysis in the pool's forked workers
        _AUTH = AuthConfig(
            dns_budget_s=0.0, trusted_authserv_ids=tuple(args.trusted_authserv_ids.split(",")), trusted_hops=1000
        )
    names = (
        list(_BY_NAME)
        if args.candidates == "all"
        else ["default", *[n for n in args.candidates.split(",") if n != "default"]]
    )
    unknown = [n for n in names if n not in _BY_NAME]
    if unknown:
        parser.error(f"unknown candidates: {', '.join(unknown)}")
    variants = (
        [v for v in VARIANTS if v != "original"]
        if args.variants == "all"
        else [v for v in args.variants.split(",") if v != "original"]
    )
    protocols = args.feedback.split(",")
    args.work.mkdir(parents=True, exist_ok=True)
    caches: list[tuple[str, Path]] = []
    sizes_by_name: list[tuple[str, int]] = []
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
            sizes_by_name.append((name, size))
            print(f"analyzed {name}: {size} messages", file=sys.stderr)
    if args.time:
        stream = pickle.loads(caches[0][1].read_bytes())
        print(
            f"| candidate | score us/msg | learn_one us/msg |  ({caches[0][0]}, full feedback, best of 3)\n|---|---|---|"
        )
        for n in names:
            scoring, learning = model_time(_BY_NAME[n], stream)
            print(f"| {n} | {scoring:.1f} | {learning:.1f} |")
        return 0
    tasks = [
        (_BY_NAME[n], p, cache, name, args.family_tables)
        for n in names for p in protocols for name, cache in caches
    ]  # fmt: skip
    results: dict[tuple[str, str, str], tuple[float, int, float, float]] = {}
    with Pool(2) as pool:
        for candidate, protocol, name, roca, trained, unsure, ham_unsure in pool.imap_unordered(_job, tasks):
            results[candidate, protocol, name] = (roca, trained, unsure, ham_unsure)
    first, second = caches[0][0], caches[min(len(caches) - 1, 1 + len(variants))][0]
    header = (
        "| candidate | "
        + " | ".join(f"{p}: geo-mean ratio | worst | {first} | {second} | Unsure % (ham)" for p in protocols)
        + " |"
    )
    print(header)
    print("|" + "---|" * (1 + 5 * len(protocols)))
    for n in names:
        cells = [n]
        for p in protocols:
            ratios = [
                results[n, p, s][0] / results["default", p, s][0] for s, _ in caches if results["default", p, s][0] > 0
            ]
            unsure = sum(results[n, p, s][2] for s, _ in caches) / len(caches)
            ham_unsure = sum(results[n, p, s][3] for s, _ in caches) / len(caches)
            cells += [f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}", f"{max(ratios):.2f}",
                      f"{results[n, p, first][0]:.4f}", f"{results[n, p, second][0]:.4f}",
                      f"{unsure:.2f} ({ham_unsure:.2f})"]  # fmt: skip
        print("| " + " | ".join(cells) + " |")
    print("\n| candidate | " + " | ".join(f"{p}: trained %" for p in protocols) + " |")
    print("|" + "---|" * (1 + len(protocols)))
    for n in names:
        sizes = dict(sizes_by_name)
        cells = [n] + [
            f"{sum(100.0 * results[n, p, s][1] / sizes[s] for s, _ in caches) / len(caches):.1f}"
            for p in protocols
        ]  # fmt: skip
        print("| " + " | ".join(cells) + " |")
    if args.json:
        rows = [{"candidate": c, "feedback": p, "stream": s, "roca": r[0], "trained": r[1], "unsure_pct": r[2],
                 "ham_unsure_pct": r[3]}
                for (c, p, s), r in sorted(results.items())]  # fmt: skip
        args.json.write_text(json.dumps(rows, indent=1))
    print(f"\n{len(caches)} streams; ratios are the candidate's (1-ROCA)% over the default's on the same stream and "
          "protocol; Unsure % is the mean over the streams of the mail scored Unsure (in brackets: of the ham).")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
