#!/usr/bin/env python3
"""spamd and bogofilter side by side on TREC indexes and their derived streams, under the same feedback protocols.

For each message in index order: score it (spamd: the real Engine; bogofilter:
`bogofilter -T`, whose spamicity is the score), then train what the protocol's
feedback says (spamd: Trainer; bogofilter: `-s` / `-n`, `-Sn` / `-Ns` to change a
label), each with a fresh model in a temp dir. `--feedback full,errors,people`
runs each protocol (spamd.evaluation.feedback; the options are `spamctl eval`'s); bogofilter
gets the labels people give, spamd also its own autolearn and settled learning as
configured, since that is what each ships. Prints (1-ROCA)%, hm% at sm%=0.1 and
lam% for both, and the ratio of their (1-ROCA)%.

With --variants, each index is first rewritten into the derived streams of
`spamd_lab.variants` (headers reduced to Subject, no empty line after the headers,
CRLF, an mbox From line, no Received, HTML only, Cyrillic, CJK, a bare
tokenized export), and every stream is measured; the last line is the geometric
mean over all streams of spamd's (1-ROCA)% over bogofilter's, per protocol.
bogofilter's results are cached per stream and protocol (keyed by the stream's
content), since they do not change when spamd does.

    python scripts/accuracy/compare_bogofilter.py ../shared/corpora/trec07p-dev/full/index
    python scripts/accuracy/compare_bogofilter.py --variants all --worst 10 \\
        ../shared/corpora/spamassassin/index ../shared/corpora/trec07p-dev/full/index
    python scripts/accuracy/compare_bogofilter.py --feedback errors,people --variants all \\
        ../shared/corpora/spamassassin/index ../shared/corpora/trec07p-dev/full/index

bogofilter comes from Debian (`apt-get install bogofilter`); this script installs nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from spamd.cli.evaluate import add_protocol_arguments, protocol_of, with_train_margin
from spamd.config import load_config
from spamd.errors import SpamdError
from spamd.evaluation.feedback import Event, Feedback, Protocol
from spamd.evaluation.trec import (
    IndexEntry,
    Result,
    evaluate_index,
    index_messages,
    mail_entries,
    read_index,
    read_mail,
    summarize,
)
from spamd.model.bayes import Label, Verdict

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from spamd_lab.variants import VARIANTS, write_variant  # noqa: E402


def run_bogofilter(entries: list[IndexEntry], protocol: Protocol) -> tuple[list[Result], int, float]:
    """One bogofilter process per message for scoring (-T) and one per training event, as TREC runs did.

    The same feedback protocol as spamd's (spamd.evaluation.feedback): the events it makes of
    each verdict are applied as `-s` / `-n`, and a label that changes an earlier
    one as `-Sn` / `-Ns` (bogofilter's unregister-and-register), with the same rule
    as spamd's ledger: autolearn and settled never override a person's label.
    """
    results: list[Result] = []
    skipped: list[IndexEntry] = []
    feedback = Feedback(protocol)
    raws: dict[int, bytes] = {}
    trained: dict[int, tuple[Label, bool]] = {}  # message -> (label, a person's)

    def apply(events: list[Event], wordlist: str) -> None:
        for event in events:
            known = trained.get(event.message)
            flag = "-s" if event.label == Label.SPAM else "-n"
            if known is not None:
                if known[0] == event.label or (known[1] and not event.person):
                    trained[event.message] = (known[0], known[1] or event.person)
                    continue
                flag = "-Ns" if event.label == Label.SPAM else "-Sn"
            trained[event.message] = (event.label, event.person)
            subprocess.run(
                ["bogofilter", flag, "-d", wordlist], input=raws[event.message], check=True, capture_output=True
            )
        for event in events:
            if not feedback.waits_for(event.message):
                raws.pop(event.message, None)

    with tempfile.TemporaryDirectory(prefix="bogo-") as wordlist:
        started = time.perf_counter()
        # The entries spamd's eval skips (no mail message, unreadable) are skipped here too.
        for entry, raw in index_messages(entries, on_skip=lambda entry, reason: skipped.append(entry)):
            number = len(results)
            apply(feedback.due(number), wordlist)
            scored = subprocess.run(["bogofilter", "-T", "-d", wordlist], input=raw, capture_output=True, check=False)
            # -T prints "<S|H|U> <spamicity>"; exit codes 0/1/2 are verdicts, 3 an error.
            if scored.returncode == 3 and b"wordlist" in scored.stderr and not any(Path(wordlist).iterdir()):
                # Nothing trained yet: bogofilter refuses to score; count it as undecided.
                results.append(Result(entry.name, entry.label, 0.5, False, True))
            elif scored.returncode == 3:
                raise SystemExit(f"bogofilter failed on {entry.name}: {scored.stderr.decode(errors='replace')}")
            else:
                verdict, spamicity = scored.stdout.split()[:2]
                results.append(Result(entry.name, entry.label, float(spamicity), verdict == b"S", verdict == b"U"))
            last = results[-1]
            raws[number] = raw
            apply(feedback.observe(number, entry.label, VERDICT[(last.judged_spam, last.unsure)]), wordlist)
            if not feedback.waits_for(number):
                raws.pop(number, None)
        seconds = time.perf_counter() - started
    return results, len(skipped), seconds


VERDICT = {(True, False): Verdict.SPAM, (False, False): Verdict.HAM, (False, True): Verdict.UNSURE}


def stream_digest(entries: list[IndexEntry]) -> str:
    """A digest of a stream's labels and bytes: bogofilter's results for it never change."""
    h = hashlib.blake2b(digest_size=16)
    for entry in entries:
        h.update(f"{entry.label} {entry.name}\n".encode())
        raw, reason = read_mail(entry.path)
        if raw is None:  # skipped by both filters: no bytes that a cached result depends on
            h.update(b"unreadable" if reason.startswith("unreadable") else b"not a mail message")
        else:
            h.update(hashlib.blake2b(raw, digest_size=16).digest())
    return h.hexdigest()


def peer_protocol(protocol: Protocol) -> Protocol:
    """bogofilter gets the labels people give, not spamd's own autolearn and settled learning."""
    return dataclasses.replace(protocol, autolearn=False, settled=False)


def cache_name(entries: list[IndexEntry], protocol: Protocol) -> str:
    """Where bogofilter's report on this stream under this protocol is cached (full feedback: the old name)."""
    suffix = "" if protocol == Protocol() else "-" + hashlib.blake2b(repr(protocol).encode(), digest_size=6).hexdigest()
    return f"bogofilter-{stream_digest(entries)}{suffix}.json"


def bogofilter_report(
    entries: list[IndexEntry], cache_dir: Path, version: str, protocol: Protocol
) -> dict[str, float | int]:
    """bogofilter's report on a stream under a protocol, from the cache when it has run on the same bytes before."""
    cache = cache_dir / cache_name(entries, protocol)
    if cache.exists():
        cached = json.loads(cache.read_text())
        if cached.get("version") == version:
            return cached["report"]
    results, skipped, seconds = run_bogofilter(entries, protocol)
    report = summarize(results, skipped, seconds).as_dict()
    cache_dir.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"version": version, "report": report}))
    return report


def bogofilter_missing() -> bool:
    """True, having said how to install it, when bogofilter is not on PATH."""
    if shutil.which("bogofilter") is None:
        print("bogofilter is not installed: apt-get install bogofilter", file=sys.stderr)
        return True
    return False


def worst_ranked(results: list[Result], n: int) -> list[tuple[str, Result]]:
    """The n ham scored highest and the n spam scored lowest: the messages that decide (1-ROCA)%."""
    ham = sorted((r for r in results if r.gold == Label.HAM), key=lambda r: -r.score)[:n]
    spam = sorted((r for r in results if r.gold == Label.SPAM), key=lambda r: r.score)[:n]
    return [("ham", r) for r in ham] + [("spam", r) for r in spam]


def explain_worst(config, entries: list[IndexEntry], worst: list[tuple[str, Result]], limit: int = 8) -> list[str]:
    """What drove each worst-ranked message, as `spamctl explain` shows it, in the model of the messages before it.

    Replays the stream once through a fresh Engine, explaining each chosen message
    just before it is learned: the same model that scored it in the run.
    """
    import dataclasses

    from spamd.engine.engine import Engine

    wanted = {r.name: (kind, r) for kind, r in worst}
    lines: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="spamd-explain-") as tmp:
        engine = Engine.open(dataclasses.replace(config, data_dir=Path(tmp)), durable=False)
        try:
            for entry, raw in index_messages(entries, on_skip=lambda entry, reason: None):  # as eval skipped them
                if entry.name in wanted:
                    kind, result = wanted[entry.name]
                    score, contributions = engine.explain(raw, limit)
                    drivers = ", ".join(f"{c.token[:40]!r} {c.weight:+.3f}" for c in contributions)
                    lines[entry.name] = f"worst {kind:<4} {result.score:+.3f} {entry.name}: {drivers}"
                engine.train(raw, entry.label, source="eval")
        finally:
            engine.close()
    return [lines[r.name] for _, r in worst if r.name in lines]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index", type=Path, nargs="+")
    parser.add_argument(
        "--variants", default="original", help="comma-separated names from spamd_lab.variants, or 'all'"
    )
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "spamd-variants",
                        help="where derived streams and bogofilter's cached results are kept")  # fmt: skip
    parser.add_argument("--no-bogofilter", action="store_true", help="spamd only (ratios from the cache if there)")
    parser.add_argument("--worst", type=int, default=0, help="list spamd's N worst-ranked ham and spam per stream")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--config", type=Path, help="spamd's config file (e.g. [model] families switched on)")
    add_protocol_arguments(parser, several=True)
    args = parser.parse_args()
    if not args.no_bogofilter and bogofilter_missing():
        return 2
    version = ""
    if shutil.which("bogofilter"):
        version = subprocess.run(["bogofilter", "-V"], capture_output=True, text=True).stdout.split("\n")[0]
    names = list(VARIANTS) if args.variants == "all" else args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")

    config = with_train_margin(load_config(args.config), args)
    protocols = [protocol_of(config, args, feedback) for feedback in args.feedback]
    rows = []
    for index in args.index:
        corpus = index.parent.name if index.parent.name != "full" else index.parent.parent.name
        # Each file of the index that is no mail message (empty, binary) or cannot be read
        # is named on stderr once, here; both filters skip it in every stream, and no
        # derived stream is made of it.
        if not mail_entries(read_index(index)):
            print(f"{index}: no mail message to measure", file=sys.stderr)
            continue
        for name in names:
            stream = index if name == "original" else write_variant(index, name, args.work / corpus)
            entries = read_index(stream)
            for protocol in protocols:
                results, report = evaluate_index(config, stream, protocol=protocol)
                spamd_row = report.as_dict()
                bogo_row = None
                if args.no_bogofilter:
                    cache = args.work / "bogofilter-cache" / cache_name(entries, peer_protocol(protocol))
                    if cache.exists():
                        bogo_row = json.loads(cache.read_text())["report"]
                else:
                    bogo_row = bogofilter_report(
                        entries, args.work / "bogofilter-cache", version, peer_protocol(protocol)
                    )
                row = {
                    "corpus": corpus, "variant": name, "feedback": protocol.describe(), "messages": report.messages,
                    "spamd": spamd_row, "bogofilter": bogo_row,
                }  # fmt: skip
                if args.worst:
                    row["worst"] = explain_worst(config, entries, worst_ranked(results, args.worst))
                rows.append(row)
                if not args.json:
                    print_row(row, flush=True)
    summary = {}
    for protocol in protocols:
        ratios = [
            r["spamd"]["one_minus_roca_pct"] / r["bogofilter"]["one_minus_roca_pct"]
            for r in rows
            if r["bogofilter"] and r["feedback"] == protocol.describe()
        ]
        geomean = math.exp(sum(math.log(max(x, 1e-9)) for x in ratios) / len(ratios)) if ratios else float("nan")
        summary[protocol.describe()] = geomean
        if not args.json:
            print(
                f"geometric mean over {len(ratios)} streams of (1-ROCA)% spamd / bogofilter, {protocol.describe()}: {geomean:.3f}"
            )
    if args.json:
        print(json.dumps({"bogofilter_version": version, "rows": rows, "geomean_roca_ratio": summary}))
    return 0


HEADER = f"{'corpus':<13} {'variant':<15} {'feedback':<24} {'filter':<10} {'(1-ROCA)%':>10} {'hm%@sm0.1':>10} {'lam%':>7} {'hm%':>6} {'sm%':>6}"


def print_row(row: dict, flush: bool = False) -> None:
    if not getattr(print_row, "headed", False):
        print(HEADER)
        print_row.headed = True  # type: ignore[attr-defined]
    for name in ("spamd", "bogofilter"):
        r = row[name]
        if r is None:
            continue
        print(
            f"{row['corpus'][:13]:<13} {row['variant']:<15} {row['feedback'][:24]:<24} {name:<10} {r['one_minus_roca_pct']:>10.4f} "
            f"{r['hm_at_sm01_pct']:>10.2f} {r['lam_pct']:>7.3f} {r['hm_pct']:>6.2f} {r['sm_pct']:>6.2f}"
        )
    if row["bogofilter"]:
        ratio = row["spamd"]["one_minus_roca_pct"] / row["bogofilter"]["one_minus_roca_pct"]
        print(f"{'':<13} {'':<15} {'':<24} ratio (1-ROCA)% spamd / bogofilter: {ratio:.2f}")
    for line in row.get("worst", []):
        print(f"{'':<13}   {line}")
    sys.stdout.flush()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SpamdError as e:  # an index that cannot be read or has a line that is no entry: one line, no traceback
        sys.exit(f"{Path(sys.argv[0]).name}: {e}")
