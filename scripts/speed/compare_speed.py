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

With --tree DIR (repeatable, the old tree first), each checkout runs its own
DIR/.venv/bin/spamctl with its own trained state directory, every tree in each
round and bogofilter after them in the same round: ratios of trees measured side
by side, each tree's spamd compiled to bytecode first as an install is, and what one
tree's venv holds that another's lacks named on stderr (structlog imports rich at every
process start wherever rich is installed: 60-80 ms that is no difference of the code). With
--maildir, the index's messages are copied into a Maildir's new/, and `spamctl
classify MAILDIR` is timed against `bogofilter -b` of the same files.

With --dns-delay SECONDS, `spamctl classify` verifies the senders against our own DNS server
(spamd_lab.loopback_dns, in a process of its own) that answers every name "not found" that
many seconds late, as a resolver far away answers for the domains of old mail: what the
signed messages' look-ups cost bulk classification, against bogofilter, which asks nothing.
Bulk classify verifies only where the outcome can move a score, so that config also files a
DMARC p=reject failure as spam (`[auth] dmarc_reject_action = "spam"`); with --dns-delay-default,
the same server with spamd's defaults, where classify asks it nothing. Without either, classify
uses the machine's resolver, as an installed spamd does.

The old absolute target, 1,500 msgs/s for `spamctl eval` on trec07p-dev, was set on a
machine where bogofilter classified 2,911 msgs/s in bulk (shared/MEASUREMENTS.md):
a ratio of 0.515, printed beside the measured one.

    python scripts/speed/compare_speed.py ../shared/corpora/trec07p-dev/full/index --rounds 3
    python scripts/speed/compare_speed.py /tmp/multi-user/agree.index --per-user --rounds 3
    python scripts/speed/compare_speed.py INDEX --tree /tmp/before --tree . --maildir --rounds 3
    python scripts/speed/compare_speed.py INDEX --tree /tmp/before --tree . --dns-delay 0.05

bogofilter comes from Debian (`apt-get install bogofilter`); this script installs nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spamd.errors import SpamdError
from spamd.evaluation.trec import IndexEntry, mail_entries, read_index
from spamd.model.bayes import Label

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.accuracy.compare_bogofilter import bogofilter_missing  # noqa: E402

TARGET_MSGS_PER_S = 1500
REFERENCE_BOGOFILTER_MSGS_PER_S = 2911  # bulk classify on the machine the target was set on


def spamctl_command(tree: Path | None = None) -> list[str]:
    """This interpreter's spamctl, or with `tree` that checkout's own (TREE/.venv/bin/spamctl), its
    spamd compiled to bytecode first (`compile_to_bytecode`)."""
    if tree is not None:
        spamctl = tree / ".venv" / "bin" / "spamctl"
        if not spamctl.exists():
            raise SystemExit(f"{tree}: no .venv/bin/spamctl (each --tree needs its own venv)")
        compile_to_bytecode(spamctl.with_name("python"), tree / "spamd")
        return [str(spamctl)]
    spamctl = Path(sys.executable).with_name("spamctl")
    return [str(spamctl)] if spamctl.exists() else [sys.executable, "-c", "from spamd.cli import main; main()"]


def venv_packages(tree: Path) -> set[str]:
    """The distributions installed in a checkout's .venv, by name (pip's own listing)."""
    done = subprocess.run(
        [str(tree / ".venv" / "bin" / "python"), "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"],
        capture_output=True, text=True,
    )  # fmt: skip
    return {line.partition("==")[0].lower() for line in done.stdout.splitlines() if line and "==" in line}


def say_venvs_differ(trees: list[Path]) -> None:
    """Name on stderr what one tree's venv holds and another's does not: a process imports some of it at
    every start whenever it is there (structlog imports rich: 60-80 ms), which is no difference of the code."""
    packages = {tree: venv_packages(tree) for tree in trees}
    every = set.union(*packages.values())
    for tree, held in packages.items():
        missing = sorted(every - held)
        if missing:
            print(
                f"{Path(sys.argv[0]).name}: {tree}/.venv lacks what another tree's has: {', '.join(missing)} "
                "(a process start may import some of it there only, e.g. rich, which structlog imports: "
                "install the same extras in each venv for a like-for-like start)",
                file=sys.stderr,
            )


def trees_and_commands(given: list[Path] | None) -> tuple[list[Path | None], list[list[str]]]:
    """The --tree checkouts (resolved; [None]: this interpreter's spamd) and each one's spamctl command,
    what one tree's venv lacks against another's said on stderr."""
    trees: list[Path | None] = [t.resolve() for t in given] if given else [None]
    commands = [spamctl_command(tree) for tree in trees]
    if len(trees) > 1:
        say_venvs_differ([tree for tree in trees if tree is not None])
    return trees, commands


def compile_to_bytecode(python: Path, package: Path) -> None:
    """Compile an editable checkout's `package` as pip compiles an installed wheel.

    Where PYTHONDONTWRITEBYTECODE is set (this machine's environment sets it), an editable
    checkout is compiled from source at every process start: each `spamctl classify` run paid
    it, the bigger tree more (importing what classify needs, with the code before the change
    against after it: 0.40-0.53 against 0.64-0.79 s; compiled, 0.33-0.41 against 0.43-0.53).
    """
    subprocess.run([str(python), "-m", "compileall", "-q", str(package)], check=True, stdout=subprocess.DEVNULL)


def spamd_eval_rate(
    index: Path, jobs: int | None = None, config: Path | None = None, spamctl: list[str] | None = None
) -> float:
    """msgs/s reported by one `spamctl eval --json` run (a fresh model in a temp dir).

    eval skips what is no mail message itself (as `read_mail` does here), saying so on
    its stderr: this script has said it already.
    """
    extra = [] if jobs is None else ["--jobs", str(jobs)]
    configured = ["--config", str(config)] if config else []
    done = subprocess.run(
        [*(spamctl or spamctl_command()), *configured, "eval", str(index), "--json", *extra],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"spamctl eval failed: {done.stderr.strip()[-500:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["msgs_per_s"])


def trained_data_dir(
    entries: list[IndexEntry],
    where: Path,
    per_user: bool = False,
    config: Path | None = None,
    spamctl: list[str] | None = None,
) -> Path:
    """A spamd state directory trained on the index's messages (untimed), for bulk classification.

    `per_user`: each message is trained with its user (the index's third field), so
    each user has a layer.

    `entries` are the index's mail messages only (`mail_entries`), so train refuses
    none for not being one; a file it refuses all the same (too large for the control
    socket, gone meanwhile) is reported as skipped, and the rest is trained.
    """
    data = where / "data"
    spamctl = spamctl or spamctl_command()
    groups = sorted({(e.label, e.user if per_user else None) for e in entries}, key=lambda g: (g[0], g[1] or ""))
    for label, user in groups:
        paths = [str(e.path) for e in entries if e.label == label and (e.user if per_user else None) == user]
        flag = "--spam" if label == Label.SPAM else "--ham"
        as_user = [] if user is None else ["--user", user]
        done = subprocess.run(
            [
                *spamctl,
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
        [*spamctl, *(["--config", str(config)] if config else []), "--data-dir", str(data), "snapshot"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"spamctl snapshot failed: {done.stderr.strip()[-500:]}")
    return data


def spamd_bulk_classify_rate(
    entries: list[IndexEntry],
    data: Path,
    config: Path | None = None,
    per_user: bool = False,
    spamctl: list[str] | None = None,
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
            *(spamctl or spamctl_command()),
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


def build_maildir(entries: list[IndexEntry], where: Path) -> Path:
    """A Maildir (where/Maildir) whose new/ holds a copy of each message, named in index order."""
    maildir = where / "Maildir"
    for sub in ("cur", "new", "tmp"):
        (maildir / sub).mkdir(parents=True)
    for number, entry in enumerate(entries):
        shutil.copyfile(entry.path, maildir / "new" / f"{number:07d}.speed:2,")
    return maildir


def maildir_files(maildir: Path) -> list[Path]:
    return sorted((maildir / "new").iterdir())


def spamd_maildir_classify_rate(maildir: Path, data: Path, config: Path | None, spamctl: list[str]) -> float:
    """msgs/s of `spamctl classify MAILDIR` (one argument: spamctl lists the folder), process start included."""
    count = len(maildir_files(maildir))
    command = [*spamctl, "--data-dir", str(data), *(["--config", str(config)] if config else []), "classify"]
    started = time.perf_counter()
    done = subprocess.run([*command, str(maildir)], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0 or done.stdout.count("\n") != count:
        raise SystemExit(f"spamctl classify of a Maildir failed: {done.stderr.strip()[:500]}")
    return count / seconds


def bogofilter_bulk_rate(entries: list[IndexEntry], maildir: Path | None = None) -> tuple[float, float, float | None]:
    """(train msgs/s, classify msgs/s, classify msgs/s of the Maildir's files or None) of bogofilter in bulk mode
    on a fresh word list, over the same messages."""
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
        maildir_rate = None
        if maildir is not None:
            files = maildir_files(maildir)
            started = time.perf_counter()
            done = subprocess.run(
                ["bogofilter", "-d", wordlist, "-b", "-v"], input="".join(f"{f}\n" for f in files), text=True,
                capture_output=True,
            )  # fmt: skip
            maildir_rate = len(files) / (time.perf_counter() - started)
            if done.returncode == 3:
                raise SystemExit(f"bogofilter failed: {done.stderr.strip()}")
    return len(entries) / trained, len(entries) / classified, maildir_rate


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
    parser.add_argument(
        "--tree", type=Path, action="append",
        help="a checkout with its own .venv, its spamctl timed (repeatable, the old tree first; default: this one)",
    )  # fmt: skip
    parser.add_argument(
        "--maildir", action="store_true",
        help="also time `spamctl classify` of a Maildir of the messages against bogofilter -b of its files",
    )  # fmt: skip
    parser.add_argument(
        "--dns-delay", type=float, metavar="SECONDS",
        help="classify asks our own DNS server, which answers every name this late (not with --config)",
    )  # fmt: skip
    parser.add_argument(
        "--dns-delay-default", action="store_true",
        help="with --dns-delay: spamd's defaults beside the server, where bulk classify verifies nobody",
    )  # fmt: skip
    args = parser.parse_args()
    if args.dns_delay_default and args.dns_delay is None:
        parser.error("--dns-delay-default goes with --dns-delay")
    if args.dns_delay is not None and (args.config or args.per_user):
        parser.error("--dns-delay writes the config itself: not with --config or --per-user")
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
    trees, commands = trees_and_commands(args.tree)
    rates: list[dict[str, list[float]]] = [{} for _ in trees]
    bogo: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="spamd-speed-") as tmp, slow_nameserver(args.dns_delay) as nameserver:
        config = args.config
        if nameserver:
            config = Path(tmp) / "slow-dns.toml"
            verifying = "" if args.dns_delay_default else 'dmarc_reject_action = "spam"\n'
            config.write_text(f'[auth]\nnameservers = ["{nameserver}"]\n{verifying}')
        datas = [
            trained_data_dir(entries, Path(tmp) / str(n), args.per_user, config, spamctl)
            for n, spamctl in enumerate(commands)
        ]
        if args.per_user:
            config = Path(tmp) / "per-user.toml"
            config.write_text("[users]\nscore_per_user = true\n")
        maildir = build_maildir(entries, Path(tmp)) if args.maildir else None
        for round_number in range(1, args.rounds + 1):
            for tree, spamctl, data, own in zip(trees, commands, datas, rates, strict=True):
                measured = {
                    "eval": spamd_eval_rate(args.index, config=config, spamctl=spamctl),
                    "eval_one_process": spamd_eval_rate(args.index, jobs=1, config=config, spamctl=spamctl),
                    "classify": spamd_bulk_classify_rate(entries, data, config, spamctl=spamctl),
                }
                if args.per_user:
                    measured["classify_per_user"] = spamd_bulk_classify_rate(entries, data, config, True, spamctl)
                if maildir is not None:
                    measured["classify_maildir"] = spamd_maildir_classify_rate(maildir, data, config, spamctl)
                for key, rate in measured.items():
                    own.setdefault(key, []).append(rate)
                print(
                    f"round {round_number}{f' {tree}' if tree else ''}: "
                    + ", ".join(
                        f"spamctl {key.replace('_', ' ')} {rate:,.0f} msgs/s" for key, rate in measured.items()
                    ),
                    file=sys.stderr,
                )
            train_rate, classify_rate, maildir_rate = bogofilter_bulk_rate(entries, maildir)
            bogo.setdefault("train", []).append(train_rate)
            bogo.setdefault("classify", []).append(classify_rate)
            if maildir_rate is not None:
                bogo.setdefault("classify_maildir", []).append(maildir_rate)
            print(
                f"round {round_number}: bogofilter bulk classify {classify_rate:,.0f} msgs/s"
                + (f", of the Maildir's files {maildir_rate:,.0f}" if maildir_rate is not None else "")
                + "; ratios "
                + "; ".join(
                    f"{tree or 'spamd'} eval {own['eval'][-1] / classify_rate:.3f}, "
                    f"classify {own['classify'][-1] / classify_rate:.3f}"
                    + (f", Maildir {own['classify_maildir'][-1] / maildir_rate:.3f}" if maildir_rate else "")
                    for tree, own in zip(trees, rates, strict=True)
                ),
                file=sys.stderr,
            )
    summaries = [summarize(args, len(entries), own, bogo) for own in rates]
    summary = dict(summaries[-1])  # the last tree's (the new one's) at the top, as without --tree
    if args.tree:
        summary["trees"] = [{"tree": str(tree), **one} for tree, one in zip(trees, summaries, strict=True)]
        summary["new_over_old"] = {
            key: summaries[-1][key] / summaries[0][key]
            for key in summaries[0]
            if key.startswith("spamd_") and key.endswith("_msgs_per_s") and summaries[0][key]
        }
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"index: {args.index} ({len(entries):,} messages), median of {args.rounds} interleaved rounds")
    if args.dns_delay is not None:
        how = "with spamd's defaults (verifying nobody)" if args.dns_delay_default else "verifying every sender"
        print(f"classify beside our DNS server, every answer {args.dns_delay:g} s late, {how}")
    for tree, one in zip(trees, summaries, strict=True):
        if tree:
            print(f"\n{tree}")
        print_summary(args, one)
    if args.tree:
        print("\nnew / old (the last tree over the first), msgs/s medians:")
        for key, ratio in summary["new_over_old"].items():
            print(f"  {key.removeprefix('spamd_').removesuffix('_msgs_per_s'):<40} {ratio:8.3f}")
    return 0


@contextlib.contextmanager
def slow_nameserver(delay: float | None) -> Iterator[str]:
    """Our DNS server answering every name "not found" `delay` seconds late, its address ("" for None); stopped after."""
    if delay is None:
        yield ""
        return
    from spamd_lab.loopback_dns import serve_in_process

    process, address = serve_in_process({}, delay=delay)
    try:
        yield address
    finally:
        process.terminate()  # type: ignore[attr-defined]


def summarize(
    args: argparse.Namespace, messages: int, rates: dict[str, list[float]], bogo: dict[str, list[float]]
) -> dict[str, Any]:
    """One tree's medians and its ratios to bogofilter in the same rounds."""

    def ratio(ours: str, theirs: str) -> float:
        return statistics.median([s / b for s, b in zip(rates[ours], bogo[theirs], strict=True)])

    summary: dict[str, Any] = {
        "index": str(args.index),
        "messages": messages,
        "rounds": args.rounds,
        "classify_dns_delay_s": args.dns_delay,
        "classify_dns_verifying": args.dns_delay is not None and not args.dns_delay_default,
        "spamd_eval_msgs_per_s": statistics.median(rates["eval"]),
        "spamd_eval_one_process_msgs_per_s": statistics.median(rates["eval_one_process"]),
        "spamd_bulk_classify_msgs_per_s": statistics.median(rates["classify"]),
        "ratio_spamd_classify_over_bogofilter_classify": ratio("classify", "classify"),
        "bogofilter_bulk_train_msgs_per_s": statistics.median(bogo["train"]),
        "bogofilter_bulk_classify_msgs_per_s": statistics.median(bogo["classify"]),
        "ratio_spamd_eval_over_bogofilter_classify": ratio("eval", "classify"),
        "target_ratio": TARGET_MSGS_PER_S / REFERENCE_BOGOFILTER_MSGS_PER_S,
    }
    if args.per_user:
        summary["spamd_bulk_classify_per_user_msgs_per_s"] = statistics.median(rates["classify_per_user"])
        summary["per_user_scoring_cost"] = statistics.median(
            [s / u for s, u in zip(rates["classify"], rates["classify_per_user"], strict=True)]
        )
    if args.maildir:
        summary["spamd_maildir_classify_msgs_per_s"] = statistics.median(rates["classify_maildir"])
        summary["bogofilter_maildir_classify_msgs_per_s"] = statistics.median(bogo["classify_maildir"])
        summary["ratio_spamd_maildir_classify_over_bogofilter"] = ratio("classify_maildir", "classify_maildir")
    summary["spamd_eval_msgs_per_s_on_reference_machine"] = (
        summary["ratio_spamd_eval_over_bogofilter_classify"] * REFERENCE_BOGOFILTER_MSGS_PER_S
    )
    return summary


def print_summary(args: argparse.Namespace, summary: dict[str, Any]) -> None:
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
    if args.maildir:
        print(
            f"spamctl classify MAILDIR                    {summary['spamd_maildir_classify_msgs_per_s']:>8,.0f} msgs/s"
        )
        print(
            f"bogofilter -b of the Maildir's files         {summary['bogofilter_maildir_classify_msgs_per_s']:>8,.0f} msgs/s"
        )
        print(
            f"ratio spamd Maildir / bogofilter             {summary['ratio_spamd_maildir_classify_over_bogofilter']:>8.3f}"
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


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SpamdError as e:  # an index that cannot be read or has a line that is no entry: one line, no traceback
        sys.exit(f"{Path(sys.argv[0]).name}: {e}")
