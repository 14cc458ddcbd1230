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
import functools
import hashlib
import json
import math
import pickle
import sys
import tempfile
import time
from dataclasses import replace
from multiprocessing import Pool
from pathlib import Path

import numpy as np

from spamd.config import AuthConfig, Config, ModelConfig
from spamd.evaluation.feedback import Event, Feedback, People, Protocol
from spamd.evaluation.measures import one_minus_roca
from spamd.evaluation.trec import IndexEntry, read_index, read_mail, say_skipped
from spamd.learning.outcomes import left_unlearned
from spamd.mail.auth.outcomes import outcome_tokens
from spamd.mail.auth.verify import Authenticator
from spamd.mail.message import parse_message, strip_own_headers
from spamd.mail.tokenize import EVIDENCE_FAMILIES, evidence_tokens, salad_tokens, tokenize
from spamd.model.bayes import (
    PROBABILITY_SLOPE,
    Features,
    Label,
    MultinomialNB,
    Verdict,
    denominator,
    featurize,
    split_evidence,
    token_log_odds,
    verdict_of,
)
from spamd.model.families import (
    CLAIM,
    EVIDENCE,
    evidence_families,
    families_of,
    is_weighted,
    join_families,
    kinds_of,
    message_sources,
    salad_weights,
)
from spamd.people.senders import from_address

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.accuracy.ablate_candidates import CANDIDATES, Candidate  # noqa: E402
from spamd_lab.variants import VARIANTS, write_variant  # noqa: E402

# What an analyzed message keeps for every candidate: its tokens, the decoded
# headers and text the n-gram families read, each mail-evidence family's tokens, and how many
# of its tokens (the last) are word salad's ([model] salad_tokens).
Analyzed = tuple[list[str], str, str, dict[str, list[str]], int]
# Part of the cache key: a cache written by another version of the analysis is not read.
_ANALYSIS_VERSION = b"evidence-3+salad-2+signers-1+suffix-1"
# Sender authentication as the analysis runs it offline (no DNS: a corpus's keys are long
# gone; each look-up is a temporary error), trusting the Authentication-Results of these
# authserv-ids below any number of Received headers when --trusted-authserv-ids names them.
_AUTH = AuthConfig(dns_budget_s=0.0)


_BY_NAME = {c.name: c for c in CANDIDATES}
_CONFIG = Config()
_IDENTITIES = ("auth:aligned:", "auth:signer:", "auth:sealer:")
# The listed* candidates: rspamd's whitelist maps as Debian installs them, and the token they add.
RSPAMD_MAPS = "/etc/rspamd/maps.d"
LISTED_TOKEN = "auth:listed-sender"


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


@functools.cache
def listed_senders() -> frozenset[str]:
    """The well-known senders of rspamd's whitelist maps (Debian's rspamd package), read at first use."""
    found = set()
    for name in ("dmarc_whitelist.inc", "spf_dkim_whitelist.inc"):
        try:
            lines = Path(RSPAMD_MAPS, name).read_text().splitlines()
        except OSError as e:
            raise SystemExit(
                f"the listed* candidates read rspamd's {name}: {e.strerror} (apt-get install rspamd)"
            ) from None
        for line in lines:
            line = line.split("#")[0].strip()
            if line:
                found.add(line.split()[0].lower())
    return frozenset(found)


def features(
    config: ModelConfig, item: Analyzed, family_tables: bool, identities_only: bool = False, listed: bool = False
) -> Features:
    """The message's features under `config`'s families: in the one table as spamd makes them, or a table per family."""
    tokens, head, text, evidence, salad = item
    capped = salad_weights(tokens, salad, config)
    claims = [t for name in evidence_families(config) for t in evidence[name]]
    outcomes = evidence["auth_outcomes"] if config.auth_outcomes else []
    if listed:
        aligned = [t for t in evidence["auth_outcomes"] if t.startswith("auth:aligned:")]
        listed_tokens = [LISTED_TOKEN] if aligned and aligned[0][len("auth:aligned:") :] in listed_senders() else []
    else:
        listed_tokens = []
    if identities_only:
        outcomes = [t for t in outcomes if t.startswith(_IDENTITIES)]
    outcomes = outcomes + listed_tokens
    words = len(tokens)
    tokens = tokens + claims + outcomes
    if capped is not None and claims + outcomes:
        capped = np.concatenate([capped, np.ones(len(claims) + len(outcomes))])
    families = families_of(head, text, config)
    if not family_tables or not families:
        joined, weights = join_families(tokens, families, config, capped)
        kinds = None
        if config.evidence_weight:  # as spamd.learning.classifier gives them: outcomes are verified, never claims
            kinds = kinds_of(words, claims, len(joined) - words - len(claims))
            kinds[words + len(claims) : len(tokens)] = EVIDENCE
        return featurize(joined, config.hash_bits, weights, kinds)
    parts = [featurize(tokens, config.hash_bits), *(featurize(found, config.hash_bits) for found, _ in families)]
    family_weights = [1.0, *(weight for _, weight in families)]
    return Features(
        np.concatenate([f.ids + np.uint32(place << config.hash_bits) for place, f in enumerate(parts)]),
        np.concatenate([f.counts for f in parts]),
        np.concatenate([np.full(len(f), w) for f, w in zip(parts, family_weights, strict=True)])
        if is_weighted(config)
        else None,
    )


# One run's figures: (1-ROCA)%, trained, Unsure % of all mail, Unsure % of the ham, spam to Junk %, ham to Junk %.
Figures = tuple[float, int, float, float, float, float]


def run(
    candidate: Candidate, stream: list[tuple[bool, Analyzed]], protocol: str, family_tables: bool = False,
    before: list[tuple[bool, Analyzed]] | None = None,
) -> Figures:  # fmt: skip
    """One online run under `protocol` (spamd.evaluation.feedback's full, errors or people, seed 1), after the
    model has learned `before` (full feedback, the thick threshold applied; None: from an empty model)."""
    config = ModelConfig(**candidate.model)  # type: ignore[arg-type]
    tables = 1 + config.osb + bool(config.char_ngrams) if family_tables else 1
    # A table per family, side by side: 2 more bits of buckets hold up to four.
    model = MultinomialNB(replace(config, hash_bits=config.hash_bits + 2) if tables > 1 else config)

    def featurized(item: Analyzed) -> Features:
        message = features(config, item, tables > 1, candidate.identities_only, bool(candidate.listed_prior))
        if candidate.claim_weight != 1.0 and message.kinds is not None and np.any(message.kinds == CLAIM):
            scaled = np.ones(len(message)) if message.weights is None else message.weights.copy()
            scaled[message.kinds == CLAIM] *= candidate.claim_weight
            message = replace(message, weights=scaled)
        if candidate.claims_as_words and message.kinds is not None:
            message = replace(message, kinds=np.where(message.kinds == CLAIM, 0, message.kinds).astype(np.int8))
        return message

    if candidate.listed_prior:
        seeded = featurize([LISTED_TOKEN], config.hash_bits).ids
        model.counts[0][seeded] = round(candidate.listed_prior)
    for is_spam, item in before or []:  # the earlier mail, learned as spamctl eval's full feedback learns it
        earlier, label = featurized(item), Label(int(is_spam))
        if not left_unlearned(config, label, "eval", lambda earlier=earlier: model.score(earlier)):  # type: ignore[misc]
            model.learn_one(earlier, label)
    scores, labels = np.empty(len(stream)), np.empty(len(stream), bool)
    trained = unsure = ham_unsure = spam_junk = ham_junk = 0
    feedback = Feedback(feedback_protocol(protocol))
    waiting: dict[int, Features] = {}
    weight = config.evidence_weight
    platt = [1.0, 0.0]  # a, b: the calibrated slope-scaled log-odds are a * z + b
    delivered: dict[int, float] = {}
    window: list[tuple[float, int]] = []

    def calibrated(log_odds: float) -> float:
        return (platt[0] * PROBABILITY_SLOPE * log_odds + platt[1]) / PROBABILITY_SLOPE

    def learn(event: Event) -> None:
        nonlocal trained
        message = waiting[event.message]
        if candidate.calibrate and event.message in delivered:
            z = PROBABILITY_SLOPE * delivered.pop(event.message)
            p = 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, platt[0] * z + platt[1]))))
            step = candidate.calibrate * (int(event.label) - p)
            platt[0] = max(0.1, platt[0] + step * z)
            platt[1] += step
        if candidate.calibrate_window and event.message in delivered:
            window.append((PROBABILITY_SLOPE * delivered.pop(event.message), int(event.label)))
            del window[: -candidate.calibrate_window]
            if len(window) % 10 == 0:
                platt[:] = platt_fit(window)
        if not feedback.waits_for(event.message):
            del waiting[event.message]
        label = Label(int(event.label))
        source = feedback.protocol.trainer_source(event.source)
        if left_unlearned(config, label, source, lambda: model.score(message)):
            return  # spamd.engine.trainer.Trainer's thick threshold, as spamctl eval applies it
        if candidate.weight_rate:
            nonlocal weight
            words, evidence = score_parts(model, message)
            p = 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, 5.5 * (words + weight * evidence)))))
            weight = min(2.0, max(0.0, weight + candidate.weight_rate * (int(label) - p) * 5.5 * evidence))
            model.config = replace(config, evidence_weight=weight)
        model.learn_one(message, label)
        trained += 1

    for number, (is_spam, item) in enumerate(stream):
        for event in feedback.due(number):  # each message is labelled at most once here: no ledger needed
            learn(event)
        message = featurized(item)
        score = model.score(message)
        if candidate.calibrate or candidate.calibrate_window:
            delivered[number] = score.log_odds
            score = verdict_of(config, calibrated(score.log_odds))
        scores[number], labels[number] = score.log_odds, is_spam
        unsure += score.verdict is Verdict.UNSURE
        ham_unsure += score.verdict is Verdict.UNSURE and not is_spam
        spam_junk += score.verdict is Verdict.SPAM and is_spam
        ham_junk += score.verdict is Verdict.SPAM and not is_spam
        waiting[number] = message
        for event in feedback.observe(number, Label(int(is_spam)), score.verdict, score.log_odds):
            learn(event)
        if not feedback.waits_for(number):
            waiting.pop(number, None)
    spams = int(labels.sum())
    hams = max(1, len(stream) - spams)
    return (
        one_minus_roca(scores, labels), trained, 100.0 * unsure / max(1, len(stream)), 100.0 * ham_unsure / hams,
        100.0 * spam_junk / max(1, spams), 100.0 * ham_junk / hams,
    )  # fmt: skip


def platt_fit(window: list[tuple[float, int]], prior: float = 20.0) -> list[float]:
    """Platt's a, b over (slope-scaled score, label) pairs by Newton's method, pulled toward (1, 0) by `prior`."""
    z = np.array([w[0] for w in window])
    y = np.array([w[1] for w in window], dtype=float)
    # Platt's targets: not 0 and 1 but (n+ + 1) / (n+ + 2) and 1 / (n- + 2), so that few labels do not overfit.
    positives = float(y.sum())
    t = np.where(y > 0, (positives + 1) / (positives + 2), 1 / (len(y) - positives + 2))
    a, b = 1.0, 0.0
    for _ in range(20):
        p = 1 / (1 + np.exp(-np.clip(a * z + b, -50, 50)))
        g = np.array([np.dot(p - t, z) + prior * (a - 1), np.sum(p - t) + prior * b])
        w = p * (1 - p)
        h = np.array([[np.dot(w, z * z) + prior, np.dot(w, z)], [np.dot(w, z), np.sum(w) + prior]])
        step = np.linalg.solve(h, g)
        a, b = a - step[0], b - step[1]
        if abs(step).max() < 1e-6:
            break
    return [max(0.1, float(a)), float(b)]


def score_parts(model: MultinomialNB, message: Features) -> tuple[float, float]:
    """The words' score and the evidence's mean (at weight 1) of a message under `model`."""
    config = replace(model.config, evidence_weight=1.0)
    log_odds = token_log_odds(
        config, model.counts.take(message.ids, axis=1), model.token_totals, model.distinct, None, message.kinds,
        model.doc_totals,
    )  # fmt: skip
    if message.weights is not None:
        log_odds = log_odds * message.weights
    words, weights, evidence = split_evidence(config, log_odds, message.weights, message.kinds)
    if len(message) == 0 or not (model.doc_totals[0] and model.doc_totals[1]):
        return 0.0, 0.0
    return float(np.add.reduce(words)) / denominator(config, len(words), weights), evidence


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


def _job(task: tuple[Candidate, str, Path, str, bool, Path | None]) -> tuple[str, str, str, Figures]:
    candidate, protocol, cache, name, family_tables, before = task
    earlier = pickle.loads(before.read_bytes()) if before is not None else None
    return (
        candidate.name,
        protocol,
        name,
        run(candidate, pickle.loads(cache.read_bytes()), protocol, family_tables, earlier),
    )


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
    parser.add_argument(
        "--before",
        type=Path,
        metavar="INDEX",
        help="first contact: each run's model first learns this stream (full feedback), then is judged on the stream",
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
    before = None
    if args.before is not None:
        before = cached_stream(args.before, args.work)[0]
        print(f"each run first learns {stream_name(args.before)}", file=sys.stderr)
    tasks = [
        (_BY_NAME[n], p, cache, name, args.family_tables, before)
        for n in names for p in protocols for name, cache in caches
    ]  # fmt: skip
    results: dict[tuple[str, str, str], Figures] = {}
    with Pool(2) as pool:
        for candidate, protocol, name, figures in pool.imap_unordered(_job, tasks):
            results[candidate, protocol, name] = figures
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
            # No ratio where the default ranks every stream perfectly (0): "-" rather than a mean of none.
            mean, worst = (
                (f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}", f"{max(ratios):.2f}")
                if ratios and min(ratios) > 0
                else ("-", "-")
            )
            cells += [mean, worst,
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
    originals = [name for name, _ in caches if "," not in name]  # the streams as given, not derived
    print("\n| candidate | feedback | " + " | ".join(originals) + " |  ((1-ROCA)%, spam to Junk %, ham to Junk %)")
    print("|" + "---|" * (2 + len(originals)))
    for n in names:
        for p in protocols:
            cells = [
                f"{results[n, p, s][0]:.4f}, {results[n, p, s][4]:.1f}, {results[n, p, s][5]:.2f}" for s in originals
            ]
            print(f"| {n} | {p} | " + " | ".join(cells) + " |")
    if args.json:
        rows = [{"candidate": c, "feedback": p, "stream": s, "roca": r[0], "trained": r[1], "unsure_pct": r[2],
                 "ham_unsure_pct": r[3], "spam_junk_pct": r[4], "ham_junk_pct": r[5]}
                for (c, p, s), r in sorted(results.items())]  # fmt: skip
        args.json.write_text(json.dumps(rows, indent=1))
    print(f"\n{len(caches)} streams; ratios are the candidate's (1-ROCA)% over the default's on the same stream and "
          "protocol; Unsure % is the mean over the streams of the mail scored Unsure (in brackets: of the ham).")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
