#!/usr/bin/env python3
"""First contact with spam that fights back: spamd beside bogofilter on attacked streams.

For each index, the first N messages (default: half) are learned with their
labels, unchanged; the rest are scored and nothing more is learned, once as they
came and once per attack of `spamd_lab.attacks`, which changes only the
spam after message N (the campaign the trained model meets). spamd runs
`spamctl eval --train-first N`'s protocol (the real Engine, the default config
or --config); bogofilter learns the head in bulk (`-s -b` / `-n -b`) and scores
the rest in bulk (`-T -b`). Prints, per corpus, attack and filter: (1-ROCA)%,
its ratio to the unchanged stream's, and where the spam went (filed spam /
Unsure / ham), and where the ham went.

    nice -n 10 python scripts/attacks/attack_first_contact.py ../shared/corpora/spamassassin/index \\
        ../shared/corpora/trec07p-dev/full/index --attacks all --work /tmp/spamd-attacks

Attacked streams are written once under --work (per corpus, attack, seed and N)
and reused; bogofilter's results are cached there by the stream's content.
bogofilter comes from Debian (`apt-get install bogofilter`); this script installs nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from spamd.config import load_config
from spamd.errors import SpamdError
from spamd.evaluation.feedback import Protocol
from spamd.evaluation.trec import Result, evaluate_index, mail_entries, read_index, read_mail, summarize
from spamd.model.bayes import Label

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from spamd_lab.attacks import ATTACKS, write_attacked  # noqa: E402

# The attacks the first-contact table shows by default (`--attacks all` runs every one).
DEFAULT_ATTACKS = (
    "zero-width,homoglyphs,split-words,common-words-150,ham-words-150,hidden-display-none,"
    "hidden-font-size-0,hidden-same-colour,attachment,image,encodings,all"
)


def stream_digest(index: Path) -> str:
    """A digest of a stream's labels and the bytes of its messages (what bogofilter's cached result depends on)."""
    h = hashlib.blake2b(digest_size=16)
    for entry in read_index(index):
        raw, _ = read_mail(entry.path)  # a file that is no message (or none) is skipped by both filters
        h.update(f"{entry.label} ".encode() + (b"-" if raw is None else hashlib.blake2b(raw, digest_size=16).digest()))
    return h.hexdigest()


def bogofilter_first_contact(index: Path, train_first: int) -> list[Result]:
    """bogofilter trained on the first `train_first` readable messages, then scoring the rest without training."""
    entries = mail_entries(read_index(index), on_skip=lambda entry, reason: None)
    head, tail = entries[:train_first], entries[train_first:]
    with tempfile.TemporaryDirectory(prefix="bogo-") as wordlist:
        for label, flag in ((Label.SPAM, "-s"), (Label.HAM, "-n")):
            names = "".join(f"{e.path}\n" for e in head if e.label == label)
            subprocess.run(["bogofilter", flag, "-b", "-d", wordlist], input=names.encode(), check=True)
        names = "".join(f"{e.path}\n" for e in tail)
        out = subprocess.run(
            ["bogofilter", "-T", "-b", "-d", wordlist], input=names.encode(), capture_output=True, check=False
        )
    if out.returncode == 3:
        raise SystemExit(f"bogofilter failed on {index}: {out.stderr.decode(errors='replace')}")
    lines = out.stdout.decode(errors="replace").splitlines()
    if len(lines) != len(tail):
        raise SystemExit(f"bogofilter scored {len(lines)} of {len(tail)} messages of {index}")
    results = []
    for entry, line in zip(tail, lines, strict=True):
        _, verdict, spamicity = line.rsplit(None, 2)
        results.append(Result(entry.name, entry.label, float(spamicity), verdict == "S", verdict == "U"))
    return results


def bogofilter_report(index: Path, train_first: int, cache_dir: Path, version: str) -> dict:
    cache = cache_dir / f"bogofilter-first-{train_first}-{stream_digest(index)}.json"
    if cache.exists():
        cached = json.loads(cache.read_text())
        if cached.get("version") == version:
            return cached["report"]
    report = summarize(bogofilter_first_contact(index, train_first), 0, 0.0).as_dict()
    cache_dir.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"version": version, "report": report}))
    return report


def _write(job: tuple[Path, str, Path, int, int]) -> Path:
    index, attack, out_dir, seed, start = job
    return write_attacked(index, attack, out_dir, seed, start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index", type=Path, nargs="+")
    parser.add_argument("--attacks", default=DEFAULT_ATTACKS, help="comma-separated names, or 'all'")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--train-first", type=int, default=0, metavar="N", help="default: half of each index")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "spamd-attacks")
    parser.add_argument("--config", type=Path, help="spamd's config (default: the built-in defaults)")
    parser.add_argument("--jobs", type=int, default=2, help="processes writing attacked streams")
    parser.add_argument("--no-bogofilter", action="store_true")
    parser.add_argument("--write-only", action="store_true", help="write the attacked streams and stop")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    names = list(ATTACKS) if args.attacks == "all" else [n for n in args.attacks.split(",") if n]
    unknown = [n for n in names if n not in ATTACKS]
    if unknown:
        parser.error(f"unknown attacks {unknown}; known: {', '.join(ATTACKS)}")
    if not args.no_bogofilter and shutil.which("bogofilter") is None:
        print("bogofilter is not installed: apt-get install bogofilter", file=sys.stderr)
        return 2
    version = (
        ""
        if args.no_bogofilter
        else subprocess.run(["bogofilter", "-V"], check=False, capture_output=True, text=True).stdout
    )
    config = load_config(args.config)
    rows = []
    for index in args.index:
        corpus = index.parent.name if index.parent.name != "full" else index.parent.parent.name
        readable = len(mail_entries(read_index(index)))
        first = args.train_first or readable // 2
        work = args.work / corpus
        jobs = [(index, name, work, args.seed, first) for name in names]
        with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            streams = dict(zip(names, pool.map(_write, jobs), strict=True))
        if args.write_only:
            continue
        base: dict[str, float] = {}
        for name, stream in [("unchanged", index), *streams.items()]:
            _, report = evaluate_index(config, stream, protocol=Protocol(train_first=first))
            row = {"corpus": corpus, "attack": name, "train_first": first, "spamd": report.as_dict()}
            if not args.no_bogofilter:
                row["bogofilter"] = bogofilter_report(stream, first, args.work / "bogofilter-cache", version)
            for filt in ("spamd", "bogofilter"):
                if filt in row:
                    roca = row[filt]["one_minus_roca_pct"]
                    base.setdefault(filt, roca)
                    row[filt]["roca_vs_unchanged"] = (
                        roca / base[filt] if base[filt] > 0 else (1.0 if roca == 0 else math.inf)
                    )
            rows.append(row)
            if not args.json:
                print_row(row)
    if args.json:
        print(json.dumps({"bogofilter_version": version.strip(), "rows": rows}))
    return 0


def print_row(row: dict) -> None:
    if not getattr(print_row, "headed", False):
        print(
            f"{'corpus':<13} {'attack':<20} {'filter':<10} {'(1-ROCA)%':>9} {'x unch.':>7} "
            f"{'spam->spam/unsure/ham %':>24} {'ham->spam/unsure %':>19}"
        )
        print_row.headed = True  # type: ignore[attr-defined]
    for filt in ("spamd", "bogofilter"):
        r = row.get(filt)
        if r is None:
            continue
        f, h = r["spam_filed_pct"], r["ham_filed_pct"]
        print(
            f"{row['corpus'][:13]:<13} {row['attack']:<20} {filt:<10} {r['one_minus_roca_pct']:>9.4f} "
            f"{r['roca_vs_unchanged']:>7.2f} {f['spam']:>8.1f} {f['unsure']:>7.1f} {f['ham']:>7.1f} "
            f"{h['spam']:>11.2f} {h['unsure']:>7.2f}",
            flush=True,
        )


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SpamdError as e:
        sys.exit(f"{Path(sys.argv[0]).name}: {e}")
