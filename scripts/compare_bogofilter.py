#!/usr/bin/env python3
"""spamd and bogofilter side by side on one TREC index, same immediate-feedback protocol.

For each message in index order: score it (spamd: the real Engine; bogofilter:
`bogofilter -T`, whose spamicity is the score), then train it with its gold label
(spamd: Trainer; bogofilter: `-s` / `-n`), each with a fresh model in a temp dir.
Prints both rows and the ratio of their (1-ROCA)%.

    python scripts/compare_bogofilter.py ../shared/corpora/trec07p-dev/full/index
    python scripts/compare_bogofilter.py --limit 2000 ../shared/corpora/spamassassin/index

bogofilter comes from Debian (`apt-get install bogofilter`); this script installs nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from spamd.config import load_config
from spamd.evaluation import IndexEntry, Result, evaluate_index, read_index, summarize
from spamd.model import Label


def run_bogofilter(entries: list[IndexEntry]) -> tuple[list[Result], int, float]:
    """One bogofilter process per message for scoring (-T) and one for training, as TREC runs did."""
    results: list[Result] = []
    skipped = 0
    with tempfile.TemporaryDirectory(prefix="bogo-") as wordlist:
        started = time.perf_counter()
        for entry in entries:
            try:
                raw = entry.path.read_bytes()
            except OSError:
                skipped += 1
                continue
            scored = subprocess.run(
                ["bogofilter", "-T", "-d", wordlist], input=raw, capture_output=True, check=False
            )
            # -T prints "<S|H|U> <spamicity>"; exit codes 0/1/2 are verdicts, 3 an error.
            if scored.returncode == 3 and b"wordlist" in scored.stderr and not any(Path(wordlist).iterdir()):
                # Nothing trained yet: bogofilter refuses to score; count it as undecided.
                results.append(Result(entry.name, entry.label, 0.5, False, True))
            elif scored.returncode == 3:
                raise SystemExit(f"bogofilter failed on {entry.name}: {scored.stderr.decode(errors='replace')}")
            else:
                verdict, spamicity = scored.stdout.split()[:2]
                results.append(Result(entry.name, entry.label, float(spamicity), verdict == b"S", verdict == b"U"))
            flag = "-s" if entry.label == Label.SPAM else "-n"
            subprocess.run(["bogofilter", flag, "-d", wordlist], input=raw, check=True, capture_output=True)
        seconds = time.perf_counter() - started
    return results, skipped, seconds


def bogofilter_missing() -> bool:
    """True, having said how to install it, when bogofilter is not on PATH."""
    if shutil.which("bogofilter") is None:
        print("bogofilter is not installed: apt-get install bogofilter", file=sys.stderr)
        return True
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index", type=Path)
    parser.add_argument("--limit", type=int, default=0, help="only the first N messages")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if bogofilter_missing():
        return 2
    version = subprocess.run(["bogofilter", "-V"], capture_output=True, text=True).stdout.split("\n")[0]

    entries = read_index(args.index)
    if args.limit:
        entries = entries[: args.limit]
        limited = args.index.with_name(f".limited-{args.limit}-{args.index.name}")
        # evaluate_index reads an index file: write the cut one beside the original (paths stay relative).
        limited.write_text("".join(f"{e.label} {e.name}\n" for e in entries))
        index = limited
    else:
        index = args.index
    try:
        _, spamd_report = evaluate_index(load_config(None), index)
    finally:
        if args.limit:
            index.unlink(missing_ok=True)
    bogo_results, skipped, seconds = run_bogofilter(entries)
    bogo_report = summarize(bogo_results, skipped, seconds)

    rows = {"spamd": spamd_report.as_dict(), version or "bogofilter": bogo_report.as_dict()}
    ratio = spamd_report.one_minus_roca_pct / bogo_report.one_minus_roca_pct
    if args.json:
        print(json.dumps({"index": str(args.index), "rows": rows, "roca_ratio_spamd_over_bogofilter": ratio}))
        return 0
    print(f"index: {args.index} ({len(entries)} messages)")
    print(f"{'filter':<24} {'(1-ROCA)%':>10} {'hm%@sm0.1':>10} {'lam%':>7} {'hm%':>6} {'sm%':>6} {'msgs/s':>8}")
    for name, r in rows.items():
        print(
            f"{name[:24]:<24} {r['one_minus_roca_pct']:>10.4f} {r['hm_at_sm01_pct']:>10.2f} {r['lam_pct']:>7.3f} "
            f"{r['hm_pct']:>6.2f} {r['sm_pct']:>6.2f} {r['msgs_per_s']:>8.0f}"
        )
    print(f"(1-ROCA)% ratio spamd / bogofilter: {ratio:.2f}")
    print("bogofilter msgs/s includes one process start per score and per train (the TREC harness way).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
