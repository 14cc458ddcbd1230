#!/usr/bin/env python3
"""The bound on an unauthenticated rescued sender's push towards ham (CLAIMED_PUSH), measured two ways.

A sender a user moved out of Junk files its mail in the inbox with full force only when
the message is authenticated as that sender; otherwise its score moves at most CLAIMED_PUSH
towards ham (spamd/people/senders.py). Per bound (0, 0.3, 0.6, 1.0, and "full": the rule as
for an authenticated sender, push 0.6 and at least to -0.45), in this process:

(a) the disputed lists unsigned, as the corpora hold them (with --sign: signed as
    scripts/accuracy/multi_user_stream.py --sign signs them, the bound then moot): scripts/accuracy/multi_user_stream.py's
    disagree streams (alice moves the list's copies into Junk, bob keeps his), through the
    same `spamctl eval` path (spamd.evaluation.trec.evaluate_index, each corpus analyzed
    once), and each user's share of the list filed their way after 5 corrections;
(b) the forged-sender attack: the first `--prefix` messages of the corpus scored and
    trained for one user (full feedback); three spam messages of the corpus later in the
    stream, their From rewritten to `deals@shop.example`, are filed in Junk and rescued by
    her; then each of the next `--forged` spam messages, its From rewritten the same way and
    unsigned, is scored for her against that state (nothing learned from them). A forgery
    is let through when it is filed in the inbox although content alone (the shared model)
    files it as spam. Content alone is the same for every bound: a bound b lets through
    exactly the forgeries whose content alone lies within b above the spam cut.

The script sets the constant in its own process (spamd.people.senders is read at scoring
time); it changes nothing on disk.

    python scripts/attacks/claimed_push.py --corpus ../shared/corpora/spamassassin/index \\
        --disputed rpm-zzzlist.freshrpms.net --disputed ilug.linux.ie --feedback errors
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.accuracy import multi_user_stream  # noqa: E402  the disagree streams
from spamd.config import AuthConfig, Config, UsersConfig  # noqa: E402
from spamd.evaluation.feedback import PERSON, Protocol  # noqa: E402
from spamd.evaluation.trec import Batch, IndexEntry, analyze_in_workers, evaluate_index, read_index  # noqa: E402
from spamd.model.bayes import Label, Verdict  # noqa: E402
from spamd.people import kept, senders  # noqa: E402

BOUNDS = ["0", "0.3", "0.6", "1.0", "full", "kept"]
FORGED_FROM = b"Deals <deals@shop.example>"
SPAM_CUT = 0.315  # log-odds of the default spam_threshold (0.85)


@contextmanager
def bound(value: str) -> Iterator[None]:
    """CLAIMED_PUSH set to `value` ("full": a claimed sender treated as an authenticated one; "kept": the
    resemblance to what the person kept, spamd/people/kept.py, as shipped; "kept:PUSH:NONE:FULL": with
    KEPT_PUSH, RESEMBLANCE_NONE and RESEMBLANCE_FULL set so) while it lasts."""
    saved_push, saved_moved = senders.CLAIMED_PUSH, senders.moved_score
    saved_kept = kept.KEPT_PUSH, kept.RESEMBLANCE_NONE, kept.RESEMBLANCE_FULL
    if value == "full":

        def as_authenticated(score, way, config, similar=None):
            return saved_moved(score, senders.Way.INBOX if way == senders.Way.INBOX_CLAIMED else way, config)

        senders.moved_score = as_authenticated
    elif value.startswith("kept"):
        if value != "kept":
            kept.KEPT_PUSH, kept.RESEMBLANCE_NONE, kept.RESEMBLANCE_FULL = map(float, value.split(":")[1:])
    else:
        senders.CLAIMED_PUSH = float(value)

        def flat(score, way, config, similar=None):  # the bound alone, whatever the person kept
            return saved_moved(score, way, config)

        senders.moved_score = flat
    try:
        yield
    finally:
        senders.CLAIMED_PUSH, senders.moved_score = saved_push, saved_moved
        kept.KEPT_PUSH, kept.RESEMBLANCE_NONE, kept.RESEMBLANCE_FULL = saved_kept


def eval_config() -> Config:
    """The defaults, mail scored per user, and no DNS (as `spamctl eval` without --dns)."""
    config = Config(users=UsersConfig(score_per_user=True))
    return dataclasses.replace(config, auth=dataclasses.replace(config.auth, dns_budget_s=0.0))


def protocol(config: Config, feedback: str) -> Protocol:
    """What `spamctl eval --feedback FEEDBACK` runs with the defaults."""
    maildir = config.maildir
    return Protocol(
        feedback=feedback,
        autolearn=maildir.autolearn,
        settled=maildir.settle_after > 0,
        settle_margin=maildir.settle_margin,
    )


def analyze_corpus(config: Config, indexes: list[Path], jobs: int) -> dict[str, tuple[object, str]]:
    """Each message of the `indexes` analyzed once (path -> (Analyzed or None, why skipped))."""
    entries = list({str(e.path): e for index in indexes for e in read_index(index)}.values())
    found: dict[str, tuple[object, str]] = {}
    for batch in analyze_in_workers(config, entries, jobs):
        for entry, analyzed, reason in batch:
            found[str(entry.path)] = (analyzed, reason)
    return found


def replay(cache: dict[str, tuple[object, str]]):
    def batches_of(entries: list[IndexEntry]) -> Iterable[Batch]:
        for start in range(0, len(entries), 64):
            yield [(e, *cache[str(e.path)]) for e in entries[start : start + 64]]

    return batches_of


def disputed_figures(
    corpus: Path,
    disputed: list[str],
    feedbacks: list[str],
    out: Path,
    jobs: int,
    sign: bool = False,
    both: bool = False,
) -> dict[tuple[str, str, str], dict[str, tuple[float, int, int]]]:
    """(list, feedback, bound) -> per user (share filed their way after 5 corrections, corrections, copies)."""
    config = eval_config()
    signer = multi_user_stream.ListSigner(out) if sign else None
    _, disagree = multi_user_stream.build_indexes(corpus, out, disputed, 1, signer, both=both)
    if signer is not None:  # the lists' copies verified against our loopback DNS server, as with --dns
        signer.zone.start()
        config = dataclasses.replace(config, auth=AuthConfig(nameservers=(signer.zone.address,)))
    cache = analyze_corpus(config, [out / "agree.index", *(index for index, _ in disagree.values())], jobs)
    figures = {}
    for name, (index, _) in disagree.items():
        for feedback in feedbacks:
            for value in BOUNDS:
                with bound(value):
                    results, _ = evaluate_index(
                        config, index, protocol=protocol(config, feedback), batches_of=replay(cache)
                    )
                verdicts = [(r.gold.value, r.judged_spam) for r in results]
                figures[(name, feedback, value)] = multi_user_stream.filed_their_way(index, verdicts, name)
                shares = figures[(name, feedback, value)]
                print(
                    f"{name:28} {feedback:6} {'signed' if sign else 'unsigned'} bound {value:4}: "
                    + ", ".join(f"{u} {100 * s:.1f}% ({w} wrong of {n})" for u, (s, w, n) in shares.items()),
                    flush=True,
                )
    if signer is not None:
        signer.zone.stop()
    return figures


_FROM = re.compile(rb"^(from|dkim-signature|authentication-results|arc-[a-z-]+):", re.IGNORECASE)


def forged(raw: bytes, sender: bytes = FORGED_FROM) -> bytes:
    """`raw` with its From replaced by `sender`, and any signature or authentication header dropped."""
    newline = b"\r\n" if b"\r\n" in raw[:2000] else b"\n"
    head, sep, body = raw.partition(newline + newline)
    lines, dropping = [], False
    for line in head.split(newline):
        if line[:1] in (b" ", b"\t") and dropping:
            continue
        dropping = bool(_FROM.match(line))
        if not dropping:
            lines.append(line)
    return newline.join([b"From: " + sender, *lines]) + (sep or newline + newline) + body


def attack(corpus: Path, prefix: int, count: int) -> list[tuple[float, bool, dict[str, Verdict]]]:
    """Each forgery's content-alone log-odds and spam verdict, and its verdict for the user per bound."""
    from spamd.engine.engine import Engine
    from spamd.evaluation.trec import read_mail

    config = eval_config()
    entries = read_index(corpus)
    told = protocol(config, "full")
    source = told.trainer_source(PERSON)
    user = "alice"
    with tempfile.TemporaryDirectory(prefix="spamd-claimed-") as tmp:
        engine = Engine.open(dataclasses.replace(config, data_dir=Path(tmp)), durable=False)
        try:

            def deliver(analyzed):
                scored = engine.classify_analyzed(analyzed, user).score
                filed_spam = scored.verdict == Verdict.SPAM
                counted = senders.counted_senders(analyzed.senders, analyzed.authenticated, filed_spam)
                engine.senders.delivered(user, analyzed.key, counted, filed_spam)
                return scored

            def learn(analyzed, label: Label) -> None:
                engine.trainer.train(analyzed, label, source=source, user=True, user_name=user)
                engine.record_move(analyzed, label, source, True, user)

            raws = [(e, read_mail(e.path)[0]) for e in entries[:prefix]]
            known = [(e, raw) for e, raw in raws if raw is not None]
            for (entry, _), analyzed in zip(known, engine.classifier.analyze_many([r for _, r in known]), strict=True):
                deliver(analyzed)
                learn(analyzed, entry.label)
            later = [e for e in entries[prefix:] if e.label == Label.SPAM]
            rescued, position = 0, 0
            while rescued < 3:  # three offers filed in Junk, moved out by her
                if position == len(later):
                    raise SystemExit(f"{corpus}: fewer than 3 spam messages after --prefix {prefix} filed in Junk")
                raw = read_mail(later[position].path)[0]
                position += 1
                if raw is None:
                    continue
                analyzed = engine.classifier.analyze(forged(raw))
                if deliver(analyzed).verdict == Verdict.SPAM:
                    learn(analyzed, Label.HAM)
                    rescued += 1
            scores = []
            for entry in later[position : position + count]:
                raw = read_mail(entry.path)[0]
                if raw is None:
                    continue
                analyzed = engine.classifier.analyze(forged(raw))
                alone = engine.classify_analyzed(analyzed, None).score
                per_bound = {}
                for value in BOUNDS:
                    with bound(value):
                        per_bound[value] = engine.classify_analyzed(analyzed, user).score.verdict
                scores.append((alone.log_odds, alone.verdict == Verdict.SPAM, per_bound))
        finally:
            engine.close()
    return scores


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, action="append", required=True, help="a TREC index (give it again)")
    parser.add_argument("--disputed", action="append", default=[], help="a disputed List-Id (part); none: no (a)")
    parser.add_argument("--feedback", action="append", help="full, errors or people (default: errors)")
    parser.add_argument("--prefix", type=int, default=4000, help="(b): messages before the rescues")
    parser.add_argument("--forged", type=int, default=300, help="(b): forgeries scored (0: no (b))")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--sign",
        action="store_true",
        help="(a) with the lists DKIM-signed (multi_user_stream.py --sign's keys and server)",
    )
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "claimed-push")
    parser.add_argument(
        "--bound",
        action="append",
        help=f"a bound to measure (give it again; default: {' '.join(BOUNDS)}); kept:PUSH:NONE:FULL sets spamd/people/kept.py's",
    )
    parser.add_argument(
        "--both", action="store_true", help="(a) each list message to both users (multi_user_stream.py --both)"
    )
    args = parser.parse_args()
    if args.bound:
        BOUNDS[:] = args.bound
    for corpus in args.corpus:
        print(f"== {corpus}")
        lists = [name for name in args.disputed if any(multi_user_stream.disputed_path(str(e.path), name)
                                                       for e in read_index(corpus))]  # fmt: skip
        if lists:
            where = args.out / (corpus.parent.name + ("-signed" if args.sign else ""))
            disputed_figures(corpus, lists, args.feedback or ["errors"], where, args.jobs, args.sign, args.both)
        if args.forged:
            scores = attack(corpus, args.prefix, args.forged)
            spam_alone = [(alone, b) for alone, is_spam, b in scores if is_spam]
            print(f"forged-sender attack: {len(scores)} forgeries, {len(spam_alone)} spam by content alone")
            for value in BOUNDS:
                through = [alone for alone, b in spam_alone if b[value] != Verdict.SPAM]
                ham = sum(1 for _, b in spam_alone if b[value] == Verdict.HAM)
                worst = f", content alone up to {max(through) - SPAM_CUT:.2f} above the cut" if through else ""
                print(
                    f"  bound {value:4}: {len(through)} of {len(spam_alone)} filed out of Junk"
                    f" ({100 * len(through) / max(len(spam_alone), 1):.1f}%: {ham} ham, {len(through) - ham} Unsure){worst}"
                )
            margins = sorted(alone - SPAM_CUT for alone, _ in spam_alone)
            if margins:
                quantiles = [margins[int(q * (len(margins) - 1))] for q in (0.0, 0.05, 0.1, 0.25, 0.5)]
                print(
                    "  content alone above the cut, quantiles 0/5/10/25/50%: " + " ".join(f"{m:.2f}" for m in quantiles)
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
