"""spamctl eval: TREC-style online evaluation under a feedback protocol (spamd.evaluation.trec does the work)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from spamd.config import Config
from spamd.errors import SpamdError
from spamd.evaluation.feedback import FEEDBACKS, People, Protocol


def add_eval_arguments(evaluate: argparse.ArgumentParser) -> None:
    evaluate.add_argument("index", metavar="INDEX")
    evaluate.add_argument("--results", metavar="FILE", help="write TREC results lines here")
    evaluate.add_argument("--plot", metavar="FILE.png", help="draw the ROC curve here")
    evaluate.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="processes analyzing messages (default: one per core; 1: none beside eval)",
    )
    evaluate.add_argument(
        "--no-user-layer", dest="user_layer", action="store_false",
        help="score every message with the shared model alone, though the index names users (third field)",
    )  # fmt: skip
    evaluate.add_argument(
        "--score-per-user", action="store_true",
        help="score each message with its user's layer joined even where the config says [users] score_per_user = false",
    )  # fmt: skip
    evaluate.add_argument(
        "--dns", action="store_true",
        help="look up DKIM keys, SPF and DMARC records in DNS as the daemon does ([auth] nameservers, dns_budget_s). "
        "Default: none; a corpus's records of years ago are gone, and figures must not depend on today's DNS",
    )  # fmt: skip
    add_protocol_arguments(evaluate)


def add_protocol_arguments(evaluate: argparse.ArgumentParser, several: bool = False) -> None:
    """The feedback protocol's options; `several` lets --feedback name a comma-separated list (scripts)."""
    protocol = evaluate.add_argument_group(
        "feedback protocol",
        "who labels which message, and when (spamd/evaluation/feedback.py); delays count messages scored",
    )
    protocol.add_argument(
        "--feedback", default=["full"] if several else "full", type=_feedbacks if several else _feedback,
        metavar="{" + ",".join(FEEDBACKS) + "}" + (",..." if several else ""),
        help="full: every message trained with its label (TREC); errors: only when the verdict was wrong or "
        "Unsure; people: a seeded simulation of a mailbox's owner (default: full)",
    )  # fmt: skip
    protocol.add_argument(
        "--delay", type=int, default=0, metavar="N", help="full/errors: a label arrives N messages later"
    )
    protocol.add_argument("--train-margin", type=float, default=None, metavar="LOG_ODDS",
                          help="learn a new message only when its verdict is wrong or Unsure or its |log-odds| is "
                          "below this, as [model] train_margin does (default: the config's; inf: every message)")  # fmt: skip
    learn = protocol.add_mutually_exclusive_group()
    learn.add_argument("--autolearn", dest="autolearn", action="store_true", default=None,
                       help="learn confident verdicts at delivery (default: as [maildir] autolearn)")  # fmt: skip
    learn.add_argument("--no-autolearn", dest="autolearn", action="store_false")
    settled = protocol.add_mutually_exclusive_group()
    settled.add_argument("--settled", dest="settled", action="store_true", default=None,
                         help="learn mail left in place (default: as [maildir] settle_after > 0)")  # fmt: skip
    settled.add_argument("--no-settled", dest="settled", action="store_false")
    defaults = Protocol()
    protocol.add_argument("--settle-after", type=int, default=defaults.settle_after, metavar="N",
                          help=f"messages scored before mail left in place counts as settled (default {defaults.settle_after})")  # fmt: skip
    protocol.add_argument("--settle-margin", type=float, metavar="LOG_ODDS",
                          help="settle mail spamd filed only if its verdict's |log-odds| was at least this "
                          "(default: [maildir] settle_margin; inf: only the --history mail)")  # fmt: skip
    protocol.add_argument("--autolearn-margin", type=float, default=0.0, metavar="LOG_ODDS",
                          help="autolearn only verdicts at least this sure (default 0: every verdict not Unsure, "
                          "as the daemon does)")  # fmt: skip
    protocol.add_argument("--history", type=int, default=0, metavar="N",
                          help="the first N messages are mail already in the mailboxes at the first start: "
                          "not scored; learned at once when settled learning is on")  # fmt: skip
    protocol.add_argument("--train-first", type=int, default=0, metavar="N",
                          help="first contact: learn the first N messages with their labels, then score the rest "
                          "learning nothing more (no feedback, autolearn or settling); reports where the spam went")  # fmt: skip
    people = People()
    for name, help in (
        ("correct_missed_spam", "probability that spam filed in INBOX is moved to Junk"),
        ("rescue_lost_ham", "probability that ham filed in Junk is moved out"),
        ("sort_unsure", "probability that an Unsure message is moved where it belongs"),
        ("delete_missed_spam", "of missed spam not moved: probability it is deleted rather than kept read"),
        ("read_ham", "probability that ham in INBOX is read (what settled learning needs)"),
    ):
        protocol.add_argument(f"--{name.replace('_', '-')}", type=float, default=getattr(people, name), metavar="P",
                              help=f"people: {help} (default {getattr(people, name)})")  # fmt: skip
    protocol.add_argument("--mean-delay", type=float, default=people.mean_delay, metavar="N",
                          help=f"people: messages scored before a correction, on average (default {people.mean_delay:g})")  # fmt: skip
    protocol.add_argument("--seed", type=int, default=people.seed, help="people: the simulation's seed")


def _feedback(text: str) -> str:
    if text not in FEEDBACKS:
        raise argparse.ArgumentTypeError(f"{text!r}: expected one of {', '.join(FEEDBACKS)}")
    return text


def _feedbacks(text: str) -> list[str]:
    return [_feedback(part.strip()) for part in text.split(",")]


def protocol_of(config: Config, args: argparse.Namespace, feedback: str | None = None) -> Protocol:
    """The protocol the arguments ask for; autolearn and settled learning default to the daemon's configuration."""
    for name in ("correct_missed_spam", "rescue_lost_ham", "sort_unsure", "delete_missed_spam", "read_ham"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            raise SpamdError(f"--{name.replace('_', '-')} {getattr(args, name)}: a probability, from 0 to 1")
    if (args.settle_margin is not None and not args.settle_margin >= 0) or not args.autolearn_margin >= 0:
        raise SpamdError("--settle-margin and --autolearn-margin are |log-odds|: at least 0")
    if min(args.delay, args.settle_after, args.mean_delay, args.history, args.train_first) < 0:
        raise SpamdError(
            "--delay, --settle-after, --mean-delay, --history and --train-first count messages: at least 0"
        )
    people = People(
        args.correct_missed_spam, args.rescue_lost_ham, args.sort_unsure, args.delete_missed_spam, args.read_ham,
        args.mean_delay, args.seed,
    )  # fmt: skip
    return Protocol(
        feedback=feedback or args.feedback,
        delay=args.delay,
        autolearn=config.maildir.autolearn if args.autolearn is None else args.autolearn,
        settled=config.maildir.settle_after > 0 if args.settled is None else args.settled,
        settle_after=args.settle_after,
        settle_margin=config.maildir.settle_margin if args.settle_margin is None else args.settle_margin,
        autolearn_margin=args.autolearn_margin,
        history=args.history,
        train_first=args.train_first,
        people=people,
    )


def with_train_margin(config: Config, args: argparse.Namespace) -> Config:
    """The config with --train-margin's [model] train_margin, if given (the trainer applies it, as in the daemon)."""
    if args.train_margin is None:
        return config
    if not args.train_margin >= 0:
        raise SpamdError(f"--train-margin {args.train_margin}: a |log-odds|, at least 0 (inf: learn every message)")
    return dataclasses.replace(config, model=dataclasses.replace(config.model, train_margin=args.train_margin))


def cmd_eval(config: Config, args: argparse.Namespace) -> int:
    from spamd.learning.classifier import default_jobs

    if args.jobs is not None and args.jobs < 1:
        raise SpamdError(f"--jobs {args.jobs}: need at least 1 (1 = analyze in this process)")
    jobs = default_jobs() if args.jobs is None else (0 if args.jobs == 1 else args.jobs)
    if args.score_per_user:
        config = dataclasses.replace(config, users=dataclasses.replace(config.users, score_per_user=True))
    config = with_train_margin(config, args)
    return eval_command(
        config,
        Path(args.index),
        Path(args.results) if args.results else None,
        Path(args.plot) if args.plot else None,
        args.json,
        sys.stderr.isatty(),
        jobs,
        protocol_of(config, args),
        args.user_layer,
        args.dns,
    )


def eval_command(
    config: Config, index: Path, results: Path | None, plot: Path | None, as_json: bool, progress: bool, jobs: int,
    protocol: Protocol | None = None, user_layer: bool = True, dns: bool = False,
) -> int:  # fmt: skip
    """`spamctl eval INDEX`: print the report (a table, or JSON as the last line) and write extras."""
    import json

    import numpy as np

    from spamd.evaluation.measures import one_minus_roca, roc_points
    from spamd.evaluation.trec import (
        IndexEntry,
        evaluate_index,
        format_report,
        iter_result_lines,
    )
    from spamd.model.bayes import Label

    def on_skip(entry: IndexEntry, reason: str) -> None:
        print(f"spamctl eval: skipped {entry.name}: {reason}", file=sys.stderr)

    found, report = evaluate_index(
        config, index, progress=progress, on_skip=on_skip, jobs=jobs, protocol=protocol, user_layer=user_layer, dns=dns
    )
    if results is not None:
        try:
            with open(results, "w", encoding="utf-8") as f:
                f.writelines(iter_result_lines(found))
        except OSError as e:
            raise SpamdError(f"{results}: cannot write results: {e.strerror}") from None
    if plot is not None:
        from spamd.evaluation.plots import plot_roc  # optional matplotlib: only when asked

        scores = np.array([r.score for r in found], dtype=np.float64)
        is_spam = np.array([r.gold == Label.SPAM for r in found], dtype=bool)
        hm, sm = roc_points(scores, is_spam)
        plot_roc(hm, sm, one_minus_roca(scores, is_spam), len(found), plot, f"spamd on {index.parent.name or index}")
    if as_json:
        described = {"feedback": (protocol or Protocol()).describe()}
        print(json.dumps({**report.as_dict(), "index": str(index), **described, "user_layer": user_layer}))
    else:
        print(format_report(report, index, protocol))
    return 0
