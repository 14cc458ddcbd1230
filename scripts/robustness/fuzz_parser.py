#!/usr/bin/env python3
"""Fuzz bytes -> parse -> tokenize -> featurize -> score for a time budget: no exception, no slow input.

The target is the real path, `Classifier(config, model).analyze(raw)` then
`score`, on a model trained on some seeds, with warnings as errors. Seeds are
hand-written hostile MIME, the small versions of every slow pattern found
(tests/fuzz_helpers.py) and messages of ../shared/corpora when it is there.

Engines:
  atheris  coverage-guided (libFuzzer) over spamd, email and html, with the MIME
           dictionary and tests/fuzz_helpers.mutate as a custom mutator half the
           time (it grows long runs, which byte mutations rarely do). Needs the
           `fuzz` extra: pip install -e '.[fuzz]'.
  random   the same mutator from random seeds, no coverage feedback; no extra deps.

Reports inputs tried, inputs/s, the slowest input, crashes and inputs over a
second, and saves each crashing or slow input (and the slowest one) under --out.
Under atheris, times include the coverage instrumentation (2-8x on Python-heavy
inputs): inputs over a second there, and the slowest one, are timed again in a
plain subprocess (best of 3), and only those still over a second count as slow.

    python scripts/robustness/fuzz_parser.py --seconds 600                 # atheris if installed, else random
    python scripts/robustness/fuzz_parser.py --seconds 600 --engine random --json
    python scripts/robustness/fuzz_parser.py --seconds 60 --out /tmp/fuzz --seeds 500

Exit status: 0 when nothing crashed or was slow, 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # tests.fuzz_helpers holds the seeds and the mutator


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="time budget (default 600)")
    default_engine = "atheris" if importlib.util.find_spec("atheris") else "random"
    parser.add_argument(
        "--engine", choices=("atheris", "random"), default=default_engine, help=f"default here: {default_engine}"
    )
    parser.add_argument("--out", type=Path, default=Path("fuzz-out"), help="where findings go (default fuzz-out/)")
    parser.add_argument("--seeds", type=int, default=2000, help="corpus messages used as seeds (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (random engine)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--retime", type=Path, nargs="+", help=argparse.SUPPRESS)  # internal: native timing
    return parser.parse_args(argv)


def retime(paths: list[Path]) -> list[float]:
    """Best-of-3 seconds per input file, uninstrumented (run by the atheris engine in a subprocess)."""
    from tests import fuzz_helpers as fh

    classifier = fh.fuzz_classifier(fh.hostile_seeds())
    return [min(fh.run_one(classifier, path.read_bytes()) for _ in range(3)) for path in paths]


def retime_in_subprocess(paths: list[str]) -> list[float]:
    if not paths:
        return []
    import subprocess

    run = subprocess.run([sys.executable, __file__, "--retime", *paths], capture_output=True, text=True, check=True)
    return json.loads(run.stdout)


def instrument_for_atheris() -> None:
    """Import the code under test instrumented, before anything else imports it."""
    import atheris

    with atheris.instrument_imports(include=["spamd", "email", "html"]):
        import email.header  # noqa: F401
        import html  # noqa: F401

        import spamd.learning.classifier  # noqa: F401
        import spamd.mail.message  # noqa: F401
        import spamd.mail.tokenize  # noqa: F401
        import spamd.model.bayes  # noqa: F401


def save(out: Path, kind: str, raw: bytes, note: str) -> Path:
    path = out / f"{kind}-{hashlib.sha1(raw).hexdigest()[:16]}.eml"
    path.write_bytes(raw)
    path.with_suffix(".txt").write_text(note + "\n")
    return path


class Campaign:
    def __init__(self, args: argparse.Namespace):
        from tests import fuzz_helpers as fh

        self.fh = fh
        self.args = args
        args.out.mkdir(parents=True, exist_ok=True)
        corpus = fh.corpus_seeds(args.seeds) if args.seeds else []
        self.seeds = fh.hostile_seeds() + corpus
        self.corpus_seeds = len(corpus)
        self.classifier = fh.fuzz_classifier(self.seeds[len(fh.hostile_seeds()) :] or self.seeds)
        self.tally = fh.Tally()
        self.saved: list[str] = []
        self.started = time.monotonic()
        self.deadline = self.started + args.seconds
        self.next_progress = self.started + 30

    def run(self, raw: bytes) -> None:
        crashes, slow = len(self.tally.crashes), len(self.tally.slow)
        self.tally.record(raw, lambda r: self.fh.run_one(self.classifier, r))
        for data, error in self.tally.crashes[crashes:]:
            self.saved.append(str(save(self.args.out, "crash", data, error)))
        for data, seconds in self.tally.slow[slow:]:
            self.saved.append(str(save(self.args.out, "slow", data, f"{seconds:.3f} s")))
        now = time.monotonic()
        if now >= self.next_progress:
            self.next_progress = now + 30
            t = self.tally
            print(
                f"fuzz: {t.inputs:,} inputs, {t.inputs / (now - self.started):,.0f}/s, slowest "
                f"{t.slowest_seconds:.3f} s, crashes {len(t.crashes)}, slow {len(t.slow)}",
                file=sys.stderr,
                flush=True,
            )

    def report(self) -> dict[str, Any]:
        t = self.tally
        elapsed = time.monotonic() - self.started
        slowest_path = ""
        if t.slowest_input:
            slowest_path = str(save(self.args.out, "slowest", t.slowest_input, f"{t.slowest_seconds:.3f} s"))
        slow_inputs = len(t.slow)
        slowest_native = t.slowest_seconds
        if self.args.engine == "atheris":  # instrumented times: confirm natively
            slow_paths = [p for p in self.saved if Path(p).name.startswith("slow-")]
            native = retime_in_subprocess(slow_paths + ([slowest_path] if slowest_path else []))
            slow_inputs = sum(seconds > self.fh.SLOW_SECONDS for seconds in native[: len(slow_paths)])
            slowest_native = max(native, default=0.0)
        return {
            "engine": self.args.engine,
            "seconds": round(elapsed, 1),
            "seeds": len(self.seeds),
            "corpus_seeds": self.corpus_seeds,
            "inputs": t.inputs,
            "inputs_per_s": round(t.inputs / elapsed, 1) if elapsed else 0.0,
            "mean_ms": round(1000 * t.busy_seconds / max(1, t.inputs - len(t.crashes)), 3),
            "slowest_s": round(t.slowest_seconds, 4),
            "slowest_native_s": round(slowest_native, 4),
            "slowest_bytes": len(t.slowest_input),
            "slowest_input": slowest_path,
            "crashes": len(t.crashes),
            "crash_kinds": sorted({error.split(":")[0] for _, error in t.crashes}),
            "slow_inputs": slow_inputs,
            "slow_instrumented": len(t.slow),
            "saved": self.saved,
        }


def finish(campaign: Campaign, as_json: bool) -> int:
    report = campaign.report()
    (campaign.args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        for key, value in report.items():
            if key != "saved":
                print(f"{key:>17}: {value}")
        for path in report["saved"]:
            print(f"{'saved':>17}: {path}")
    return 1 if report["crashes"] or report["slow_inputs"] else 0


def run_random(campaign: Campaign) -> int:
    rng = random.Random(campaign.args.seed)
    fh, seeds = campaign.fh, campaign.seeds
    for raw in seeds:  # every seed once, unmutated
        campaign.run(raw)
    previous = seeds[0]
    while time.monotonic() < campaign.deadline:
        # A third of the time mutate the last mutant again: edits compound, runs grow.
        base = previous if rng.random() < 0.33 else rng.choice(seeds)
        previous = fh.mutate(base, rng, seeds)
        campaign.run(previous)
    return finish(campaign, campaign.args.json)


def run_atheris(campaign: Campaign) -> int:
    import atheris

    fh, out = campaign.fh, campaign.args.out
    corpus_dir = out / "corpus"
    corpus_dir.mkdir(exist_ok=True)
    for raw in campaign.seeds:
        (corpus_dir / hashlib.sha1(raw).hexdigest()).write_bytes(raw)
    dict_path = out / "mime.dict"
    dict_path.write_text("".join('"' + "".join(f"\\x{b:02x}" for b in f) + '"\n' for f in fh.FRAGMENTS))

    def one_input(data: bytes) -> None:
        if time.monotonic() >= campaign.deadline:
            status = finish(campaign, campaign.args.json)
            sys.stdout.flush()
            os._exit(status)  # libFuzzer would otherwise keep going until its own limit
        campaign.run(data)

    def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        if rng.random() < 0.5:
            return atheris.Mutate(data, max_size)
        return fh.mutate(data, rng, campaign.seeds, max_size)

    argv = [
        sys.argv[0],
        str(corpus_dir),
        f"-dict={dict_path}",
        f"-max_len={fh.MAX_INPUT}",
        f"-max_total_time={int(campaign.args.seconds) + 120}",
        "-timeout=60",
        "-rss_limit_mb=4096",
        f"-artifact_prefix={out}/libfuzzer-",
        "-print_final_stats=1",
    ]
    atheris.Setup(argv, one_input, custom_mutator=custom_mutator)
    atheris.Fuzz()
    return finish(campaign, campaign.args.json)  # only if libFuzzer returns on its own


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.retime:
        print(json.dumps(retime(args.retime)))
        return 0
    if args.engine == "atheris":
        if importlib.util.find_spec("atheris") is None:
            print(
                "fuzz_parser: atheris is not installed (pip install -e '.[fuzz]'), or use --engine random",
                file=sys.stderr,
            )
            return 2
        instrument_for_atheris()
    campaign = Campaign(args)
    print(
        f"fuzz: {args.engine}, {len(campaign.seeds)} seeds ({campaign.corpus_seeds} from the corpora), "
        f"{args.seconds:.0f} s, findings in {args.out}",
        file=sys.stderr,
        flush=True,
    )
    return run_atheris(campaign) if args.engine == "atheris" else run_random(campaign)


if __name__ == "__main__":
    sys.exit(main())
