"""spamctl train and untrain: messages sent to the model in batches, with a progress bar and a tally of outcomes."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from contextlib import closing
from typing import Any

from spamd.cli.backends import BATCH_BYTES, BATCH_MESSAGES, open_backend
from spamd.cli.inputs import Inputs, too_large
from spamd.cli.output import EX_TEMPFAIL, emit_json, table, user_request
from spamd.config import Config
from spamd.frontends.control_protocol import NOT_A_MESSAGE


def cmd_train(config: Config, args: argparse.Namespace) -> int:
    label = "spam" if args.spam else "ham"
    return _train_paths(config, args, "train", label)


def cmd_untrain(config: Config, args: argparse.Namespace) -> int:
    return _train_paths(config, args, "untrain", None)


def _train_paths(config: Config, args: argparse.Namespace, command: str, label: str | None) -> int:
    user_request(args)  # a bad --user is refused before anything is read
    inputs = Inputs(args.paths)  # resolve every PATH before training any: a typo trains nothing
    with closing(inputs):
        return _train_inputs(config, args, command, label, inputs)


def _train_inputs(config: Config, args: argparse.Namespace, command: str, label: str | None, inputs: Inputs) -> int:
    tally: Counter[str] = Counter()
    problems: list[tuple[str, str]] = []
    failure: str | None = None
    temporary = False  # the failure is the shared store being down: exit 75, retry later
    backend = open_backend(config)
    progress = _progress_bar(inputs.total, "training" if command == "train" else "untraining")
    try:
        batch: list[bytes] = []
        names: list[str] = []

        def send() -> str | None:
            nonlocal temporary
            extra = {"label": label} if label else {}
            extra.update(user_request(args))
            result = backend.request(command, messages=batch, **extra)
            # A batch that failed reports the outcomes of the messages before the failure only.
            for name, outcome in zip(names, result["outcomes"], strict=False):
                tally[outcome] += 1
                if outcome == NOT_A_MESSAGE:
                    problems.append((name, "not a mail message"))
            progress.update(len(batch))
            batch.clear()
            names.clear()
            temporary = bool(result.get("temporary"))
            return result.get("error")

        size = 0
        for name, raw, problem in inputs:
            if raw is not None:
                problem = too_large(raw)
            if problem is not None:
                problems.append((name, problem))
                tally["unreadable"] += 1
                progress.update(1)
                continue
            assert raw is not None
            if batch and (len(batch) >= BATCH_MESSAGES or size + len(raw) > BATCH_BYTES):
                failure = send()
                size = 0
                if failure:
                    break
            batch.append(raw)
            names.append(name)
            size += len(raw)
        if batch and not failure:
            failure = send()
    finally:
        progress.close()
        backend.close()
    for name, problem in problems:
        print(f"spamctl: {name}: {problem}", file=sys.stderr)
    report = {
        "mode": backend.mode,
        "messages": inputs.total,
        **{k: tally.get(k, 0) for k in _tally_keys(command)},
        "problems": [{"path": name, "problem": problem} for name, problem in problems],
    }
    if label:
        report["label"] = label
    if failure:
        report["error"] = failure
    if args.json:
        emit_json(report)
    else:
        title = f"trained as {label}" if label else "untrained"
        rows = [(_TALLY_NAMES.get(k, k), str(tally.get(k, 0))) for k in _tally_keys(command)]
        print(f"{title}: {inputs.total} messages ({backend.mode})")
        print(table(rows, indent="  "))
    if failure:
        print(f"spamctl: stopped: {failure}", file=sys.stderr)
    if failure and temporary:
        return EX_TEMPFAIL
    return 1 if failure or problems else 0


_TALLY_NAMES = {
    "skipped_repeat": "skipped (already trained)",
    "not_trained": "not in the model",
    NOT_A_MESSAGE: "not a mail message",
    "unreadable": "unreadable",
}


def _tally_keys(command: str) -> tuple[str, ...]:
    if command == "train":
        return ("learned", "corrected", "skipped_repeat", NOT_A_MESSAGE, "unreadable")
    return ("unlearned", "not_trained", NOT_A_MESSAGE, "unreadable")


class _NoProgress:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(total: int, what: str) -> Any:
    """tqdm on stderr when it is a terminal; nothing otherwise (logs and pipes stay clean)."""
    if not sys.stderr.isatty():
        return _NoProgress()
    from tqdm import tqdm  # only worth importing for a person watching

    return tqdm(total=total, desc=what, unit="msg", file=sys.stderr, leave=False)


def cmd_learned(config: Config, args: argparse.Namespace) -> int:
    """The learning records of a message (file or Message-ID), or the latest: what was learned, or why not."""
    from spamd.cli.inputs import read_message

    request: dict[str, Any] = {"limit": args.limit, **user_request(args)}
    if args.file is not None:
        request["raw"] = read_message(args.file)
    if args.message_id is not None:
        request["message_id"] = args.message_id
    with closing(open_backend(config)) as backend:
        records = backend.request("learned", **request)["records"]
    if args.json:
        emit_json({"records": records})
        return 0
    if not records:
        print("no learning record: spamd saw no move or training of it (or it is older than the records kept)")
        return 1
    rows = [("when", "user", "message-id", "label", "source", "what", "senders")]
    for r in records:
        effect = ("moved" if r["moved"] else "") + (
            f"{', ' if r['moved'] else ''}kept for {r['kept']}" if r["kept"] else ""
        )
        rows.append((_when(r["when"]), r["user"] or "-", r["message_id"] or "-", r["label"] or "-", r["source"],
                     r["what"], effect or "-"))  # fmt: skip
    print(table(rows))
    for what in dict.fromkeys(r["what"] for r in records):
        print(f"{what}: {records[[r['what'] for r in records].index(what)]['why']}")
    return 0


def _when(seconds: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))
