"""spamctl stats, report, snapshot, reload, export and import: looking after the model and the daemon."""

from __future__ import annotations

import argparse
import json
from contextlib import closing
from pathlib import Path
from typing import Any

from spamd.cli.backends import open_backend
from spamd.cli.output import column_table, emit_json, format_stats, table, user_request
from spamd.config import Config
from spamd.errors import SpamdError
from spamd.frontends.control_protocol import DaemonNotRunning, user_rows
from spamd.runtime.humanize import human_bytes


def cmd_stats(config: Config, args: argparse.Namespace) -> int:
    name = user_request(args).get("user")
    with closing(open_backend(config)) as backend:
        stats = backend.request("stats")
        if name is not None:
            rows = user_rows(backend.request("users")["users"])
            stats["user"] = next((r for r in rows if r["user"] == name), {"user": name, "trained_ham": 0,
                                 "trained_spam": 0, "tokens": 0, "bytes": 0})  # fmt: skip
    if args.json:
        emit_json(stats)
    else:
        print(format_stats(stats))
        if name is not None:
            u = stats["user"]
            print(f"\nuser {name}: trained {u['trained_ham']} ham, {u['trained_spam']} spam; "
                  f"{u['tokens']} tokens, {human_bytes(u['bytes'])}")  # fmt: skip
    return 0


def cmd_users(config: Config, args: argparse.Namespace) -> int:
    """The users with a layer or turned senders: trainings, tokens and bytes each, and the senders their moves turned."""
    with closing(open_backend(config)) as backend:
        result = backend.request("users", **({"memory": True} if args.memory else {}))
    if args.json:
        emit_json({**result, "users": user_rows(result["users"])})
        return 0
    if not result["per_user"]:
        print("no per-user layers in this store (docs/users.md)")
        return 0
    columns = result["users"]
    if not columns["user"]:
        print("no user has trained a layer yet")
    else:
        sizes = {size: human_bytes(size) for size in set(columns["bytes"])}  # few sizes, many users
        shown = [*columns, "shown_bytes"]
        columns = {**columns, "shown_bytes": [sizes[size] for size in columns["bytes"]]}
        print(column_table(
            [("user", "user"), ("trained ham", "trained_ham"), ("trained spam", "trained_spam"), ("tokens", "tokens"),
             ("bytes", "shown_bytes"), ("senders to Junk", "senders_to_junk"), ("to inbox", "senders_to_inbox")],
            {name: columns[name] for name in shown},
        ))  # fmt: skip
    print_trust(result.get("authentication"))
    return 0


def print_trust(trust: dict[str, Any] | None) -> None:
    """Which identity the senders kept out of Junk are trusted by (docs/users.md#authenticated-senders)."""
    if not trust:
        return
    if not trust["enabled"]:
        print("\nsenders to inbox: sender authentication is off ([auth] enabled), so each gets a bounded push only")
        return
    how = ["DMARC", "aligned DKIM"] + (["aligned SPF"] if trust["spf"] else [])
    if trust["trusted_authserv_ids"]:
        how.append("Authentication-Results of " + ", ".join(trust["trusted_authserv_ids"]))
    print(
        f"\nsenders to inbox: filed there whatever their content only when the message is authenticated ({', '.join(how)}; "
        "a List-Id by its own domain's DKIM or a trusted ARC sealer), else a bounded push; "
        "`spamctl explain --user NAME FILE` names the identity"
    )


def cmd_report(config: Config, args: argparse.Namespace) -> int:
    """Live accuracy per day: a table, JSON, or a plot with the training volume."""
    with closing(open_backend(config)) as backend:
        days = backend.request("live_days")["days"]
    if args.plot:
        from spamd.evaluation.plots import plot_live_accuracy  # optional matplotlib: only when asked

        plot_live_accuracy(days, Path(args.plot))
    if args.json:
        emit_json({"days": days})
    elif not args.plot:
        rows: list[tuple[str, ...]] = [("day", "scored", "missed spam", "false pos", "unsure->spam", "unsure->ham",
                                        "trained spam", "trained ham")]  # fmt: skip
        for d in days:
            rows.append((d["day"], *(str(d.get(k, 0)) for k in ("scored", "missed_spam", "false_positive",
                         "unsure_resolved_spam", "unsure_resolved_ham", "trained:spam", "trained:ham"))))  # fmt: skip
        print(table(rows) if days else "no live-accuracy figures yet")
    return 0


def cmd_snapshot(config: Config, args: argparse.Namespace) -> int:
    with closing(open_backend(config)) as backend:
        result = backend.request("snapshot")
    if args.json:
        emit_json({**result, "mode": backend.mode})
    else:
        print(f"snapshot written: {result['path']}")
    return 0


def cmd_reload(config: Config, args: argparse.Namespace) -> int:
    try:
        backend = open_backend(config, daemon_only=True)
    except DaemonNotRunning:
        raise DaemonNotRunning(
            f"no spamd is running (nothing answers on {config.control_socket}); there is no daemon to reload"
        ) from None
    try:
        result = backend.request("reload")
    finally:
        backend.close()
    if args.json:
        emit_json(result)
    else:
        print("configuration reloaded")
        if isinstance(result, dict) and result:
            rows = [(str(k), json.dumps(v, default=str)) for k, v in sorted(result.items())]
            print(table(rows, indent="  ", numbers=False))
    return 0


def cmd_export(config: Config, args: argparse.Namespace) -> int:
    target = Path(args.file)
    if target.is_dir():
        raise SpamdError(f"{target}: is a directory; give a file name to export to")
    if not target.parent.is_dir():
        raise SpamdError(f"{target.parent}: no such directory")
    with closing(open_backend(config)) as backend:
        data = backend.export_bytes()
    try:
        from spamd.store.durable import write_atomically  # the store package: only for a file written

        write_atomically(target, data)
    except PermissionError:
        raise SpamdError(f"{target}: permission denied") from None
    except OSError as e:
        raise SpamdError(f"{target}: cannot write: {e.strerror}") from None
    if args.json:
        emit_json({"path": str(target), "bytes": len(data), "mode": backend.mode})
    else:
        print(f"exported {human_bytes(len(data))} to {target}")
    return 0


def cmd_import(config: Config, args: argparse.Namespace) -> int:
    source = Path(args.file)
    if source.is_dir():
        raise SpamdError(f"{source}: is a directory, not a spamd export")
    from spamd.cli.inputs import _read_file  # the mail parser: imported by the commands that read mail

    data = _read_file(source)
    if not data:
        raise SpamdError(f"{source}: empty file, not a spamd export")
    with closing(open_backend(config)) as backend:
        result = backend.import_bytes(data, str(source))
    if args.json:
        emit_json({**result, "mode": backend.mode})
    else:
        print(
            f"imported {source}: {result['trained_ham']:,} ham and {result['trained_spam']:,} spam in the model, "
            f"{result['ledger_entries']:,} trained messages; saved as {result['snapshot']}"
        )
    return 0
