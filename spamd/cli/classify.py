"""spamctl classify and explain: a verdict for one message, a line each for many (scored by workers when offline)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spamd.cli.backends import BATCH_BYTES, MAX_MESSAGE_BYTES, OfflineBackend, open_backend
from spamd.cli.inputs import Inputs, file_messages, input_kind, read_message, too_large
from spamd.cli.output import emit_json, table, user_request
from spamd.config import Config
from spamd.errors import SpamdError
from spamd.frontends.control import score_fields
from spamd.runtime.humanize import human_bytes

if TYPE_CHECKING:
    from spamd.learning.classifier import Classifier


def cmd_classify(config: Config, args: argparse.Namespace) -> int:
    user_request(args)  # a bad --user is refused before anything is read
    [only] = args.paths if len(args.paths) == 1 else [None]
    if only is None or (only != "-" and input_kind(Path(only)) in ("maildir", "directory")):
        return _classify_many(config, args, Inputs(args.paths, mboxes_found_late=True))
    inputs = Inputs(args.paths)  # one file, stdin, or an mbox (of one message, or a line each)
    if inputs.total != 1:
        return _classify_many(config, args, inputs)
    with closing(inputs):
        [(name, raw, problem)] = list(inputs)
    if problem is not None or raw is None:
        raise SpamdError(f"{name}: {problem}")
    _check_size(name, raw)
    with closing(open_backend(config)) as backend:
        result = backend.request("classify", raw=raw, **user_request(args))
    if args.json:
        emit_json(result)
    else:
        rows = [
            ("verdict", result["verdict"]),
            ("probability", f"{result['probability']:.4f}"),
            ("score", f"{result['score']:+.4f} (log-odds per token)"),
        ]
        print(table(rows, numbers=False))
    return 0


# Messages per classify_many request: analyzed together, one round trip (64 as in eval).
CLASSIFY_BATCH_MESSAGES = 64

Classified = tuple[str, dict[str, Any] | None, str | None]  # (name, score fields or None, problem or None)


def source_batches(inputs: Inputs) -> Iterator[list[tuple[str, str | bytes]]]:
    """`inputs.sources()` in lists of CLASSIFY_BATCH_MESSAGES, or fewer bytes than BATCH_BYTES."""
    batch: list[tuple[str, str | bytes]] = []
    size = 0
    for name, source in inputs.sources():
        batch.append((name, source))
        size += len(source) if isinstance(source, bytes) else 0
        if len(batch) >= CLASSIFY_BATCH_MESSAGES or size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def classified(
    sources: list[tuple[str, str | bytes]], classify_many: Callable[[list[bytes]], list[dict[str, Any]]]
) -> list[Classified]:
    """Read the files among `sources` (an mbox found among them split) and classify every message, in order.

    `classify_many` scores a batch: in a worker process, or through the daemon. A batch
    holds at most CLASSIFY_BATCH_MESSAGES messages and BATCH_BYTES (one control frame).
    """
    done: list[Classified] = []
    names: list[str] = []
    raws: list[bytes] = []
    size = 0

    def classify_pending() -> None:
        nonlocal size
        if raws:
            done.extend((name, fields, None) for name, fields in zip(names, classify_many(raws), strict=True))
        names.clear()
        raws.clear()
        size = 0

    for name, source in sources:
        messages = [(name, source, None)] if isinstance(source, bytes) else file_messages(source, name, split_mbox=True)
        for message_name, raw, problem in messages:
            if raw is not None:
                problem = too_large(raw)
            if problem is not None or raw is None:
                classify_pending()  # what came before it is answered before it
                done.append((message_name, None, problem))
                continue
            if raws and (len(raws) >= CLASSIFY_BATCH_MESSAGES or size + len(raw) > BATCH_BYTES):
                classify_pending()
            names.append(message_name)
            raws.append(raw)
            size += len(raw)
    classify_pending()
    return done


def read_and_classify(
    classifier: Classifier, job: tuple[str | None, list[tuple[str, str | bytes]]]
) -> list[Classified]:
    """`classified` as a job for `AnalysisWorkers.map`: the worker reads, analyzes and scores (for the job's user).

    The workers read the files, as eval's do: when the one main process read, pickled
    and sent every message, it spent 0.88-0.96 s of CPU on trec07p-dev's 10,000 files
    (start-up included), 0.61-0.67 s now that it sends names.
    """
    user_name, sources = job
    return classified(sources, lambda raws: [score_fields(score) for score in classifier.scores_many(raws, user_name)])


def _classify_many(config: Config, args: argparse.Namespace, inputs: Inputs) -> int:
    """One line per message, as `bogofilter -b` prints them: name, verdict, probability, score.

    With --json, one JSON object per line. Unreadable inputs are named on stderr and
    make the exit status 1; the others are still classified. Without a daemon the
    messages are read, analyzed and scored in worker processes, one per core.
    """
    problems = 0

    def show(results: list[Classified]) -> None:
        """A batch's lines written at once: a print a message cost this process 7.0-7.7 us of CPU (its stdout
        shows control characters, spamd.cli.output), while two workers used both cores; 1.7 us so."""
        nonlocal problems
        lines = []
        for name, result, problem in results:
            if result is None:
                print(f"spamctl: {name}: {problem}", file=sys.stderr)
                problems += 1
            elif args.json:
                lines.append(json.dumps({"path": name, **result}) + "\n")
            else:
                lines.append(f"{name} {result['verdict']} {result['probability']:.4f} {result['score']:+.4f}\n")
        sys.stdout.write("".join(lines))

    with closing(inputs), closing(open_backend(config)) as backend:
        from spamd.learning.classifier import AnalysisWorkers, default_jobs

        jobs = default_jobs()
        if isinstance(backend, OfflineBackend) and jobs:
            # The state is locked by this process and nothing trains: the workers score
            # as well, and this process only lists the inputs and prints. Scoring here
            # instead kept 0.5 s of trec07p-dev's 3.9 s on the one process every message
            # passes through. With --user the workers hold the layers too (one process
            # scoring for a user ran at 0.61-0.69x the workers' speed: 2 cores).
            engine = backend.engine
            user_name = user_request(args).get("user")
            with AnalysisWorkers(
                config, jobs, model=engine.model, users=engine.users, senders=engine.senders
            ) as workers:
                for results in workers.map(read_and_classify, ((user_name, batch) for batch in source_batches(inputs))):
                    show(results)
        else:
            # Through the daemon (or in this process on a single core), a batch a request.
            def through_backend(raws: list[bytes]) -> list[dict[str, Any]]:
                return backend.request("classify_many", messages=raws, **user_request(args))["results"]

            for batch in source_batches(inputs):
                show(classified(batch, through_backend))
    return 1 if problems else 0


def cmd_explain(config: Config, args: argparse.Namespace) -> int:
    raw = read_message(args.file)
    _check_size(args.file, raw)
    with closing(open_backend(config)) as backend:
        result = backend.request("explain", raw=raw, limit=args.limit, **user_request(args))
    if args.json:
        emit_json(result)
        return 0
    print(f"verdict {result['verdict']}, probability {result['probability']:.4f}, score {result['score']:+.4f}")
    print_senders(result)
    if result.get("hidden_by"):
        print(f"\nhidden from the reader by {', '.join(result['hidden_by'])} (hidden: tokens, not words):")
        print(f"  {result['hidden_text']}")
    if result.get("obfuscations"):
        print(f"\ndisguised words undone: {', '.join(result['obfuscations'])} (obfuscated: tokens)")
    if result.get("salad_words"):
        weight = result["salad_weight"]
        capped = f"capped at {weight:g}" if weight < result["salad_distinct"] else "not capped"
        print(f"\nword salad (runs of 40+ lower-case words, no punctuation): {result['salad_words']} words, "
              f"{result['salad_distinct']} distinct, weighing {weight:g} tokens in the score ({capped}: [model] salad_tokens)")  # fmt: skip
    if result.get("tokens_counted", 0) < result.get("tokens", 0):
        print(f"\nscore over the {result['tokens_counted']} most decisive of {result['tokens']} tokens "
              "([model] decisive_tokens); the others count 0")  # fmt: skip
    if not result["toward_spam"] and not result["toward_ham"]:
        print("\nno token moved the score (an empty message, or the model has not learned both classes yet)")
        return 0
    for title, key in (("toward spam", "toward_spam"), ("toward ham", "toward_ham")):
        print()
        # The kind only when some token is scored apart from the words ([model] evidence_weight).
        apart = any(r.get("kind", "word") != "word" for side in ("toward_spam", "toward_ham") for r in result[side])
        rows = [(title, "count", "contribution", *(("kind",) if apart else ()))]
        rows += [
            (r["token"], str(r["count"]), f"{r['weight']:+.4f}", *((r.get("kind", "word"),) if apart else ()))
            for r in result[key]
        ]
        print(table(rows) if len(rows) > 1 else f"{title}: no tokens")
    return 0


# What the senders' rule does with a sender for the user (spamd.people.senders.Way).
_WAYS = {
    "none": "no say",
    "junk": "the user's moves file it in Junk",
    "inbox": "the user's moves file it in the inbox",
    "inbox_claimed": "kept out of Junk by the user, but not authenticated: pushed towards ham as far as it resembles"
    " what the user kept from it",
}


def print_senders(result: dict[str, Any]) -> None:
    """The senders the rule keys on, whether each is authenticated, and what the rule does (explain)."""
    if result.get("auth"):
        print(f"authentication: {result['auth']}")
    for row in result.get("senders", []):
        how = f"authenticated ({row['authenticated']})" if row["authenticated"] else "not authenticated"
        print(f"sender {row['sender']}: {how}; {_WAYS.get(row['way'], row['way'])}")
        if "resemblance" in row:
            print(f"  resembles what the user kept from it {100 * row['resemblance']:.0f}%: "
                  f"{row['kept_push']:.2f} towards ham (spamd/people/kept.py)")  # fmt: skip
        for move in row.get("moves", []):
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(move["when"]))
            print(f"  shaped by the user's {move['source']} of {move['message_id'] or move['key']} as {move['label']}"
                  f" ({when}: {move['what']})")  # fmt: skip


def _check_size(name: str, raw: bytes) -> None:
    if len(raw) > MAX_MESSAGE_BYTES:
        size, limit = human_bytes(len(raw)), human_bytes(MAX_MESSAGE_BYTES)
        raise SpamdError(f"{name}: message of {size} is over the {limit} limit of the control socket")
