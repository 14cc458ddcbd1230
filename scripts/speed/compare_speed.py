#!/usr/bin/env python3
"""Speed of `spamctl eval` against bogofilter's bulk classification, measured in the same run.

A msgs/s figure alone says as much about the machine as about the filter (a shared
machine's speed drifts by ±15% between identical runs, and machines differ by 2x),
so each round runs both back to back and the ratio is what to compare:

- spamd: `spamctl eval INDEX --json` as a subprocess, the real command; its own
  msgs/s covers reading, parsing, scoring and journaled training of every
  message (start-up and the report excluded);
- bogofilter: a fresh word list trained in bulk on the whole index (`-s -b`,
  `-n -b`), then every message classified in bulk (`-b`), timed around the
  classifying process alone. It scores only: spamd's eval also trains each message.

With --per-user (an index whose third field names each message's user, as
scripts/accuracy/multi_user_stream.py writes), the state directory is trained with each
message's user (`spamctl train --user`), and bulk classification is also timed for
each user with their layer joined (`spamctl classify --user`, `[users]
score_per_user = true`) against the same messages scored by the shared model alone,
in the same rounds: the cost of per-user scoring as a ratio.

The old absolute target, 1,500 msgs/s for `spamctl eval` on trec07p-dev, was set on a
machine where bogofilter classified 2,911 msgs/s in bulk (shared/MEASUREMENTS.md):
a ratio of 0.515, printed beside the measured one.

    python scripts/speed/compare_speed.py ../shared/corpora/trec07p-dev/full/index --rounds 3
    python scripts/speed/compare_speed.py /tmp/multi-user/agree.index --per-user --rounds 3

bogofilter comes from Debian (`apt-get install bogofilter`); this script installs nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from spamd.errors import SpamdError
from spamd.evaluation.trec import IndexEntry, mail_entries, read_index
from spamd.model.bayes import Label

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.accuracy.compare_bogofilter import bogofilter_missing  # noqa: E402

TARGET_MSGS_PER_S = 1500
REFERENCE_BOGOFILTER_MSGS_PER_S = 2911  # bulk classify on the machine the target was set on


def spamctl_command() -> list[str]:
    spamctl = Path(sys.executable).with_name("spamctl")
    return [str(spamctl)] if spamctl.exists() else [sys.executable, "-c", "from spamd.cli import main; main()"]


def spamd_eval_rate(index: Path, jobs: int | None = None, config: Path | None = None) -> float:
    """msgs/s reported by one `spamctl eval --json` run (a fresh model in a temp dir).

    eval skips what is no mail message itself (as `read_mail` does here), saying so on
    its stderr: this script has said it already.
    """
    extra = [] if jobs is None else ["--jobs", str(jobs)]
    configured = ["--config", str(config)] if config else []
    done = subprocess.run(
        [*spamctl_command(), *configured, "eval", str(index), "--json", *extra], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"spamctl eval failed: {done.stderr.strip()[-500:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["msgs_per_s"])


def trained_data_dir(
    entries: list[IndexEntry], where: Path, per_user: bool = False, config: Path | None = None
) -> Path:
    """A spamd state directory trained on the index's messages (untimed), for bulk classification.

    `per_user`: each message is trained with its user (the index's third field), so
    each user has a layer.

    `entries` are the index's mail messages only (`mail_entries`), so train refuses
    none for not being one; a file it refuses all the same (too large for the control
    socket, gone meanwhile) is reported as skipped, and the rest is trained.
    """
    data = where / "data"
    groups = sorted({(e.label, e.user if per_user else None) for e in entries}, key=lambda g: (g[0], g[1] or ""))
    for label, user in groups:
        paths = [str(e.path) for e in entries if e.label == label and (e.user if per_user else None) == user]
        flag = "--spam" if label == Label.SPAM else "--ham"
        as_user = [] if user is None else ["--user", user]
        done = subprocess.run(
            [
                *spamctl_command(),
                *(["--config", str(config)] if config else []),
                "--data-dir",
                str(data),
                "--json",
                "train",
                flag,
                *as_user,
                *paths,
            ],  # fmt: skip
            capture_output=True,
            text=True,
        )
        try:
            report = json.loads(done.stdout)
        except ValueError:
            raise SystemExit(f"spamctl train failed: {done.stderr.strip()[-500:]}") from None
        for problem in report.get("problems", []):
            print(
                f"{Path(sys.argv[0]).name}: skipped {problem['path']}: {problem['problem']} (spamctl train)",
                file=sys.stderr,
            )
        if report.get("error"):
            raise SystemExit(f"spamctl train failed: {report['error']}")
    # A snapshot, so that each classifying process loads the model (as bogofilter opens
    # its word list) rather than replaying every training from the journal.
    done = subprocess.run(
        [*spamctl_command(), *(["--config", str(config)] if config else []), "--data-dir", str(data), "snapshot"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"spamctl snapshot failed: {done.stderr.strip()[-500:]}")
    return data


def spamd_bulk_classify_rate(
    entries: list[IndexEntry], data: Path, config: Path | None = None, per_user: bool = False
) -> float:
    """msgs/s of `spamctl classify FILE...` over the index's messages, process start included (as bogofilter's).

    `per_user`: one `spamctl classify --user NAME` for each user's messages (theirs
    scored with their layer joined, as `config` says); else the shared model, in the
    same groups, so that both pay the same process starts.
    """
    users = sorted({e.user or "" for e in entries})
    seconds = 0.0
    for user in users:
        paths = [str(e.path) for e in entries if (e.user or "") == user]
        command = [
            *spamctl_command(),
            "--data-dir",
            str(data),
            *(["--config", str(config)] if config else []),
            "classify",
        ]
        if per_user and user:
            command += ["--user", user]
        started = time.perf_counter()
        done = subprocess.run([*command, *paths], capture_output=True, text=True)
        seconds += time.perf_counter() - started
        if done.returncode != 0 or done.stdout.count("\n") != len(paths):
            raise SystemExit(f"spamctl classify failed: {done.stderr.strip()[:500]}")
    return len(entries) / seconds


def bogofilter_bulk_rate(entries: list[IndexEntry]) -> tuple[float, float]:
    """(train msgs/s, classify msgs/s) of bogofilter in bulk mode on a fresh word list, over the same messages."""
    names = {label: "".join(f"{e.path}\n" for e in entries if e.label == label) for label in Label}
    everything = "".join(f"{e.path}\n" for e in entries)
    with tempfile.TemporaryDirectory(prefix="bogo-speed-") as wordlist:
        started = time.perf_counter()
        for label, flag in ((Label.SPAM, "-s"), (Label.HAM, "-n")):
            subprocess.run(["bogofilter", "-d", wordlist, flag, "-b"], input=names[label], text=True, check=True)
        trained = time.perf_counter() - started
        started = time.perf_counter()
        # Exit status 3 is an error; 0/1/2 are the last message's verdict.
        done = subprocess.run(
            ["bogofilter", "-d", wordlist, "-b", "-v"], input=everything, text=True, capture_output=True
        )
        classified = time.perf_counter() - started
        if done.returncode == 3:
            raise SystemExit(f"bogofilter failed: {done.stderr.strip()}")
    return len(entries) / trained, len(entries) / classified


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index", type=Path)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of both, interleaved (median reported)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--per-user", action="store_true",
        help="train each message with its user (third index field) and time classify with each user's layer too",
    )  # fmt: skip
    parser.add_argument(
        "--config", type=Path, help="spamd's config for every spamctl run (e.g. [model] families switched on)"
    )
    args = parser.parse_args()
    if args.config and args.per_user:
        parser.error("--config and --per-user: put [users] score_per_user = true in the config instead")
    if bogofilter_missing():
        return 2
    # The index's mail messages: each file that is not one (empty, binary, unreadable) is
    # named on stderr once, and no program here is given it.
    entries = mail_entries(read_index(args.index))
    if not entries:
        print(f"{args.index}: no mail message to measure", file=sys.stderr)
        return 1
    if args.per_user and not any(e.user for e in entries):
        print(f"{args.index}: --per-user needs an index that names users (third field)", file=sys.stderr)
        return 2
    spamd_rates, one_process_rates, classify_rates, bogo_train_rates, bogo_classify_rates = [], [], [], [], []
    user_rates: list[float] = []
    with tempfile.TemporaryDirectory(prefix="spamd-speed-") as tmp:
        config = args.config
        data = trained_data_dir(entries, Path(tmp), args.per_user, config)
        if args.per_user:
            config = Path(tmp) / "per-user.toml"
            config.write_text("[users]\nscore_per_user = true\n")
        for round_number in range(1, args.rounds + 1):
            spamd_rates.append(spamd_eval_rate(args.index, config=config))
            one_process_rates.append(spamd_eval_rate(args.index, jobs=1, config=config))
            classify_rates.append(spamd_bulk_classify_rate(entries, data, config))
            if args.per_user:
                user_rates.append(spamd_bulk_classify_rate(entries, data, config, per_user=True))
                print(
                    f"round {round_number}: spamctl classify, each user with their layer {user_rates[-1]:,.0f} msgs/s, "
                    f"shared model alone {classify_rates[-1]:,.0f} msgs/s: cost {classify_rates[-1] / user_rates[-1]:.3f}x",
                    file=sys.stderr,
                )
            train_rate, classify_rate = bogofilter_bulk_rate(entries)
            bogo_train_rates.append(train_rate)
            bogo_classify_rates.append(classify_rate)
            print(
                f"round {round_number}: spamctl eval {spamd_rates[-1]:,.0f} msgs/s (--jobs 1: {one_process_rates[-1]:,.0f}), "
                f"spamctl classify {classify_rates[-1]:,.0f}, bogofilter bulk classify {classify_rate:,.0f} msgs/s, "
                f"eval ratio {spamd_rates[-1] / classify_rate:.3f}, classify ratio {classify_rates[-1] / classify_rate:.3f}",
                file=sys.stderr,
            )
    ratios = [s / b for s, b in zip(spamd_rates, bogo_classify_rates, strict=True)]
    summary = {
        "index": str(args.index),
        "messages": len(entries),
        "rounds": args.rounds,
        "spamd_eval_msgs_per_s": statistics.median(spamd_rates),
        "spamd_eval_one_process_msgs_per_s": statistics.median(one_process_rates),
        "spamd_bulk_classify_msgs_per_s": statistics.median(classify_rates),
        "ratio_spamd_classify_over_bogofilter_classify": statistics.median(
            [s / b for s, b in zip(classify_rates, bogo_classify_rates, strict=True)]
        ),
        "bogofilter_bulk_train_msgs_per_s": statistics.median(bogo_train_rates),
        "bogofilter_bulk_classify_msgs_per_s": statistics.median(bogo_classify_rates),
        "ratio_spamd_eval_over_bogofilter_classify": statistics.median(ratios),
        "target_ratio": TARGET_MSGS_PER_S / REFERENCE_BOGOFILTER_MSGS_PER_S,
    }
    if args.per_user:
        summary["spamd_bulk_classify_per_user_msgs_per_s"] = statistics.median(user_rates)
        summary["per_user_scoring_cost"] = statistics.median(
            [s / u for s, u in zip(classify_rates, user_rates, strict=True)]
        )
    summary["spamd_eval_msgs_per_s_on_reference_machine"] = (
        summary["ratio_spamd_eval_over_bogofilter_classify"] * REFERENCE_BOGOFILTER_MSGS_PER_S
    )
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"index: {args.index} ({len(entries):,} messages), median of {args.rounds} interleaved rounds")
    print(f"spamctl eval (score + journaled training)   {summary['spamd_eval_msgs_per_s']:>8,.0f} msgs/s")
    print(f"spamctl eval --jobs 1 (one process)         {summary['spamd_eval_one_process_msgs_per_s']:>8,.0f} msgs/s")
    print(f"spamctl classify FILE... (bulk)             {summary['spamd_bulk_classify_msgs_per_s']:>8,.0f} msgs/s")
    print(
        f"bogofilter bulk classify (-b)                {summary['bogofilter_bulk_classify_msgs_per_s']:>8,.0f} msgs/s"
    )
    print(f"bogofilter bulk train (-s/-n -b)             {summary['bogofilter_bulk_train_msgs_per_s']:>8,.0f} msgs/s")
    print(
        f"ratio spamd eval / bogofilter classify       {summary['ratio_spamd_eval_over_bogofilter_classify']:>8.3f}"
        f"   (target {summary['target_ratio']:.3f} = {TARGET_MSGS_PER_S:,} / {REFERENCE_BOGOFILTER_MSGS_PER_S:,})"
    )
    print(
        f"ratio spamd classify / bogofilter classify   {summary['ratio_spamd_classify_over_bogofilter_classify']:>8.3f}"
    )
    if args.per_user:
        print(
            f"spamctl classify --user, layers joined      {summary['spamd_bulk_classify_per_user_msgs_per_s']:>8,.0f} msgs/s"
        )
        print(
            f"per-user scoring cost (shared / per-user)    {summary['per_user_scoring_cost']:>8.3f}   (target at most 1.3)"
        )
    print(
        f"spamctl eval scaled to the reference machine {summary['spamd_eval_msgs_per_s_on_reference_machine']:>7,.0f} msgs/s"
        f"   (target {TARGET_MSGS_PER_S:,})"
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SpamdError as e:  # an index that cannot be read or has a line that is no entry: one line, no traceback
        sys.exit(f"{Path(sys.argv[0]).name}: {e}")
