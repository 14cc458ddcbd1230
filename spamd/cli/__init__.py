"""spamctl: inspect and train spamd, through the running daemon's control socket or, without one, directly.

Which way is decided per invocation: if something answers on the control socket
(`Config.control_socket`) spamctl is a client of that daemon; otherwise it opens
the model state itself (Engine.open), under the same flock the daemon takes, so
the two never write at once. Both ways run the same operations (spamd.frontends.control).

Every command takes --json (one JSON document on stdout) and prints a readable
table otherwise. Every error is one line on stderr and exit status 1 (2 for
usage errors, from argparse; 75, EX_TEMPFAIL, when the shared store, Redis, is
unreachable right now: try again later). It does not score, learn or store anything itself.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

from spamd.cli.config_files import add_config_arguments
from spamd.cli.output import EX_TEMPFAIL, control_characters_shown, logs_to_stderr
from spamd.cli.web import add_web_token_arguments
from spamd.config import load_config
from spamd.errors import SpamdError, StoreUnavailableError
from spamd.frontends.control_protocol import DEFAULT_EXPLAIN_LIMIT
from spamd.runtime.gc_tuning import tune_gc_for_message_streams
from spamd.runtime.malloc_tuning import keep_read_buffers_in_the_heap


def _add_common(parser: argparse.ArgumentParser, top: bool) -> None:
    # On subcommands the defaults are SUPPRESS so they do not overwrite options given before the command.
    default = None if top else argparse.SUPPRESS
    parser.add_argument("--config", metavar="FILE", default=default, help="TOML config (same as spamd's)")
    parser.add_argument("--data-dir", metavar="DIR", default=default, help="state directory (same as spamd's)")
    parser.add_argument("--redis", metavar="URL", default=default, help="the model in Redis (same as spamd's --redis)")
    parser.add_argument(
        "--json", action="store_true", default=False if top else argparse.SUPPRESS, help="print JSON for scripts"
    )


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spamctl",
        description="Control spamd: through the running daemon's control socket, or on its state when none runs.",
    )
    _add_common(parser, top=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, handler: str) -> argparse.ArgumentParser:
        """A subcommand run by `handler`, "module.function" of spamd.cli, imported only when it runs: spamctl
        talking to a daemon then imports neither the model nor the mail parser."""
        sub = commands.add_parser(name, help=help, description=help)
        _add_common(sub, top=False)
        sub.set_defaults(handler=handler)
        return sub

    def user_option(sub: argparse.ArgumentParser, what: str) -> None:
        sub.add_argument("--user", metavar="NAME", default=None, help=f"{what} (docs/users.md)")

    stats = command(
        "stats", "counters, model size, snapshot and journal state, scoring speed, live accuracy", "admin.cmd_stats"
    )
    user_option(stats, "also this user's layer: trainings, tokens, bytes")
    users = command(
        "users",
        "the users with a layer of their own or senders their moves turned: trainings, tokens, bytes",
        "admin.cmd_users",
    )
    users.add_argument("--memory", action="store_true",
                       help="with the model in Redis: bytes by MEMORY USAGE of each user's keys (slow at many users), "
                       "not estimated from the counts")  # fmt: skip
    report = command(
        "report", "live accuracy per day: what people's moves said of spamd's verdicts", "admin.cmd_report"
    )
    report.add_argument("--plot", metavar="FILE.png", help="draw errors and training volume per day here")
    train = command(
        "train", "train messages: files, Maildir folders, directories, mbox files, - for stdin", "training.cmd_train"
    )
    which = train.add_mutually_exclusive_group(required=True)
    which.add_argument("--spam", action="store_true", help="train as spam")
    which.add_argument("--ham", action="store_true", help="train as ham")
    train.add_argument("paths", nargs="+", metavar="PATH", help="message file, mbox, Maildir folder, directory, or -")
    user_option(train, "train this user's layer as well as the shared model")
    untrain = command("untrain", "remove messages from the model", "training.cmd_untrain")
    untrain.add_argument("paths", nargs="+", metavar="PATH", help="message file, mbox, Maildir folder, directory, or -")
    user_option(untrain, "remove what this user trained (their layer and the shared model)")
    classify = command(
        "classify",
        "verdict, score and spam probability: of one message, or a line each for many",
        "classify.cmd_classify",
    )
    classify.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="message file or -; several, a directory, Maildir folder or mbox: a line each",
    )
    user_option(classify, "score for this user: the shared model with their layer")
    explain = command("explain", "the tokens that moved a message's score most, each way", "classify.cmd_explain")
    explain.add_argument("file", metavar="FILE|-")
    explain.add_argument("--limit", type=int, default=DEFAULT_EXPLAIN_LIMIT, metavar="N", help="tokens per direction")
    user_option(explain, "explain the score for this user: the shared model with their layer")
    learned = command(
        "learned", "is it learning? what spamd learned from a message's moves, or why not", "training.cmd_learned"
    )
    learned.add_argument("file", nargs="?", metavar="FILE|-", help="the message (as moved); none: the latest records")
    learned.add_argument("--message-id", metavar="ID", help="the message by its Message-ID, as written (<...>)")
    learned.add_argument("--limit", type=int, default=20, metavar="N", help="records at most (1-1000)")
    user_option(learned, "this user's records (with the model in Redis, a user's records are found only so)")
    command("snapshot", "write a snapshot of the model now", "admin.cmd_snapshot")
    command("reload", "make the running daemon re-read its config", "admin.cmd_reload")
    export = command("export", "write a verified, portable backup of model and ledger", "admin.cmd_export")
    export.add_argument("file", metavar="FILE")
    imported = command("import", "replace model and ledger with an export (verified first)", "admin.cmd_import")
    imported.add_argument("file", metavar="FILE")
    evaluate = command("eval", "TREC-style online evaluation over an index file", "evaluate.cmd_eval")
    if argv is None or "eval" in argv:  # its options need the evaluation's modules (numpy): only when it may run
        from spamd.cli.evaluate import add_eval_arguments

        add_eval_arguments(evaluate)
    add_config_arguments(
        command(
            "config", "print the commented config or the systemd unit that ship with spamd", "config_files.cmd_config"
        )
    )
    add_web_token_arguments(
        command(
            "web-token",
            "the web console's login token (made if there is none), or a password hash",
            "web.cmd_web_token",
        )
    )
    return parser


def _handler(name: str) -> Any:
    module, _, function = name.rpartition(".")
    handler = getattr(importlib.import_module(f"spamd.cli.{module}"), function)
    if "structlog" in sys.modules:  # the command's modules log: to stderr (where a daemon answers, none is imported)
        logs_to_stderr()
    return handler


def run(argv: list[str] | None = None) -> int:
    """Parse, load the config, run one command; every user-caused failure is one line and status 1."""
    args = build_parser(sys.argv[1:] if argv is None else argv).parse_args(argv)
    if args.command == "explain" and args.limit < 1:
        print("spamctl: --limit must be at least 1", file=sys.stderr)
        return 2
    try:
        config = load_config(
            Path(args.config) if args.config else None,
            data_dir=Path(args.data_dir) if args.data_dir else None,
            redis_url=args.redis,
        )
        with control_characters_shown():
            return int(_handler(args.handler)(config, args))
    except StoreUnavailableError as e:
        print(f"spamctl: {e}", file=sys.stderr)
        return EX_TEMPFAIL
    except SpamdError as e:
        print(f"spamctl: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # what slipped past the specific checks: name the file and the reason
        where = f"{e.filename}: " if e.filename else ""
        print(f"spamctl: {where}{e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("spamctl: interrupted", file=sys.stderr)
        return 130


def main() -> None:
    tune_gc_for_message_streams()
    keep_read_buffers_in_the_heap()
    sys.exit(run())
