"""Replay trec07p-dev over SMTP against a real spamd and report messages/s and latency.

Starts `python -m spamd` itself (temp data dir, ephemeral loopback port, deliver
mode, fsync on), after training its model on the first --train messages so
scoring does real work (an empty model short-cuts). N client threads, each
with one smtplib connection reused across its messages (as Postfix's connection
cache does for a content filter), send the rest. Latency is per message, from
MAIL FROM to the 250 after DATA: scoring, the Maildir write and both fsyncs.

Each round's files stay until the script ends, and a round starts only once file
creation runs at its resting speed: on this machine's ext4 (no journal) creating a
file scans past every inode freed in the last 60-360 s (perf: 70% of an open() in
recently_deleted), so a round run after a deletion of thousands of files paid up
to 0.9 ms of kernel CPU per delivery and ran 20-30% slower.

    python scripts/speed/bench_smtp.py            # 16 clients, 9,000 messages
    python scripts/speed/bench_smtp.py --clients 4 --limit 2000
    python scripts/speed/bench_smtp.py --processes 0 --processes 1 --rounds 3 --limit 4000   # helpers or not, interleaved
    python scripts/speed/bench_smtp.py --web off --web on --rounds 3     # the web console idle beside SMTP, or not
    python scripts/speed/bench_smtp.py --users 20 --rounds 3            # 20 users' Maildirs, each scored with their layer
    python scripts/speed/bench_smtp.py --users 0 --users 20 --rounds 3  # one Maildir and the shared model, or 20 users' scored as theirs
    python scripts/speed/bench_smtp.py --users 20 --per-user off --per-user on --rounds 3   # per-user scoring alone, the same 20 Maildirs
    python scripts/speed/bench_smtp.py --users 0 --users 20 --per-user off --per-user on --rounds 3   # the three set-ups, interleaved
    python scripts/speed/bench_smtp.py --replicas-acked 0 --replicas-acked 1 --autolearn --rounds 3   # Redis with a replica
    python scripts/speed/bench_smtp.py --auth off --auth on --rounds 3 --limit 3000   # sender authentication, interleaved
    python scripts/speed/bench_smtp.py --auth off-warm --auth warm --rounds 6 --limit 2000 --clients 8   # DNS cached, the same two passes
    python scripts/speed/bench_smtp.py --auth off-warm --auth warm --warm-passes 5 --rounds 6 --limit 2000   # a daemon long at work
    python scripts/speed/bench_smtp.py --auth silent --limit 200 --clients 8     # a DNS server that never answers
    python scripts/speed/bench_smtp.py --auth off-warm --auth trusted --auth warm --rounds 4   # the MTA's results trusted

With --auth, every replayed message is DKIM-signed by a test key made on the spot
(d=bench.example, RSA of --key-bits, 2048 by default, c=relaxed/relaxed: as 2020s mail is
signed, modern-dev's signatures 92% relaxed/relaxed, 76% by 2048-bit keys), published with a
DMARC record by a DNS server of our own on loopback (spamd_lab.loopback_dns), which
the daemon asks alone ([auth] nameservers, a process of its own): "on" verifies each message
(its key, and DMARC for its From domain: a look-up per new domain, then the resolver's
cache); "warm" the same after an untimed pass of the same mail, so every answer comes from
the cache; "off" is `[auth] enabled = false` on the same signed mail; "off-warm" is "off"
after the same untimed pass, so that its timed pass, as warm's, meets a daemon that has
delivered the mail once already (a Maildir of 2,000 files, the seen index, the processes'
heaps): the baseline that differs from "warm" in authentication alone (--warm-passes N gives
both N untimed passes: a daemon longer at work); "silent" points [auth] at a loopback port
that never answers, so each message waits out its DNS budget; "trusted" replays the mail as
Postfix hands it on with a verifying milter in front (its Authentication-Results above its
Received), `[auth] trusted_authserv_ids` naming it, after the same untimed passes as "warm"
(every setting then replays that mail). Given "warm" or "trusted" with "off-warm"
or "off", the summary gives their ratios, of throughput and of the timed pass's CPU in all
(spamd's processes and the client's: with both cores busy, throughput goes as its inverse).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import smtplib
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MTA = "mta.bench.example"  # the authserv-id of the Authentication-Results that --auth trusted trusts
DEFAULT_INDEX = ROOT.parent / "shared" / "corpora" / "trec07p-dev" / "full" / "index"


def read_corpus(index: Path) -> list[tuple[str, bytes]]:
    """('spam' or 'ham', bytes) of each message of a TREC index; each file that is none is named on stderr."""
    sys.path.insert(0, str(ROOT))
    from spamd.errors import SpamdError
    from spamd.evaluation.trec import index_messages, read_index

    try:
        entries = read_index(index)
    except SpamdError as e:  # an index that cannot be read or has a line that is no entry: one line, no traceback
        raise SystemExit(f"{Path(sys.argv[0]).name}: {e}") from None
    return [(str(entry.label), raw) for entry, raw in index_messages(entries)]


def crlf(data: bytes) -> bytes:
    return data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


def pretrain(data_dir: Path, config_file: Path, rows: list[tuple[str, bytes]], users: int = 0) -> None:
    sys.path.insert(0, str(ROOT))
    from spamd.config import load_config
    from spamd.engine.engine import Engine
    from spamd.model.bayes import Label

    engine = Engine.open(load_config(config_file, data_dir=data_dir))
    try:
        for number, (label, raw) in enumerate(rows):
            user_name = f"u{number % users}" if users else None  # each user's layer from their share
            engine.train(raw, Label.SPAM if label == "spam" else Label.HAM, "bench", user_name=user_name)
        if engine.store.keeps_snapshots:  # (a model in Redis, scripts/speed/bench_redis.py, keeps none)
            engine.snapshot()
    finally:
        engine.close()


def start_daemon(
    data_dir: Path, config_file: Path, log_file: Path, profile: Path | None, tree: Path = ROOT
) -> tuple[subprocess.Popen, int]:
    runner = ["-m", "cProfile", "-o", str(profile)] if profile else []
    with open(log_file, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, *runner, "-m", "spamd", "--config", str(config_file), "--data-dir", str(data_dir), "--smtp", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, cwd=tree,
        )  # fmt: skip
    started = logged_event(log_file, "daemon_started", proc, 60)
    if started is None:
        proc.kill()
        raise SystemExit("spamd did not start within 60 s")
    return proc, started["smtp_port"]


def logged_event(log_file: Path, event: str, proc: subprocess.Popen, limit_s: float) -> dict | None:
    """The first `event` record of the daemon's JSON log, waited for up to limit_s (None: not within it).

    For the analysis helper's `analysis_process_ready`: until it is ready the loop analyzes the mail, in
    a process of its own with a DNS cache of its own, so a warm pass would meet a helper that had not
    seen the first messages' domains (30 look-ups at the start of a timed pass)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        for line in log_file.read_text(errors="replace").splitlines():
            if f'"{event}"' in line:
                return json.loads(line)
        if proc.poll() is not None:
            raise SystemExit(f"spamd exited with {proc.returncode}:\n{log_file.read_text(errors='replace')}")
        time.sleep(0.05)
    return None


def wait_for_resting_file_system(where: Path, limit_s: float, resting_us: float) -> float:
    """Wait (up to limit_s) until creating a file under `where` costs under resting_us; the last cost, in us."""
    probe = Path(tempfile.mkdtemp(prefix="probe-", dir=where))
    deadline = time.monotonic() + limit_s
    made = 0
    while True:
        started = time.perf_counter()
        for _ in range(50):  # kept until the script ends: deleting them would slow the next probe
            os.close(os.open(probe / str(made), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            made += 1
        cost = (time.perf_counter() - started) / 50 * 1e6
        if cost < resting_us or time.monotonic() > deadline:
            return cost
        time.sleep(5)


def client(
    port: int, messages: list[bytes], latencies: list[float], errors: list[str],
    recipients: Sequence[str] = ("user@example.com",),
) -> None:  # fmt: skip
    # (the default: scripts/speed/bench_redis.py's replay names no recipients)
    smtp = smtplib.SMTP("127.0.0.1", port, timeout=60)
    try:
        smtp.ehlo("bench")
        for number, data in enumerate(messages):
            started = time.perf_counter()
            try:
                smtp.sendmail("bench@example.org", [recipients[number % len(recipients)]], data)
            except smtplib.SMTPException as e:
                errors.append(f"{type(e).__name__}: {e}")
                smtp.close()
                smtp = smtplib.SMTP("127.0.0.1", port, timeout=60)
                smtp.ehlo("bench")
                continue
            latencies.append((time.perf_counter() - started) * 1000.0)
    finally:
        smtp.close()


@contextlib.contextmanager
def replicated_redis(work: Path, acked: int | None) -> Iterator[str]:
    """A redis-server primary and one linked replica for one round (tests/redis_helpers.py); the [redis] section."""
    if acked is None:
        yield ""
        return
    sys.path.insert(0, str(ROOT))
    from tests.daemon_helpers import wait_until_sync
    from tests.redis_helpers import RedisServer

    primary = RedisServer(work / "redis-primary").start()
    replica = RedisServer(work / "redis-replica").start(replica_of=primary.port)
    try:
        wait_until_sync(lambda: "master_link_status:up" in replica.info("replication"), timeout=60)
        yield f'[redis]\nurl = "{primary.url}"\nreplicas_acked = {acked}\n'
    finally:
        replica.stop()
        primary.stop()


class SignedMail:
    """A test key for bench.example, a loopback DNS server publishing it, and the [auth] section for each setting."""

    def __init__(self, work: Path, key_bits: int = 2048):
        sys.path.insert(0, str(ROOT))
        import socket

        from spamd_lab.loopback_dns import serve_in_process
        from spamd_lab.signing_keys import rsa_key

        self.key = rsa_key(work, "bench.example", "bench", key_bits)
        records = {"bench._domainkey.bench.example": [self.key.dns_value], "_dmarc.bench.example": ["v=DMARC1; p=none"]}
        # In a process of its own, as a local resolver is; every other name is NXDOMAIN, kept an hour.
        self.zone, self.address = serve_in_process(records, ttl=3600, negative_ttl=3600)
        self.silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # takes queries, never answers
        self.silent.bind(("127.0.0.1", 0))

    def sign(self, raw: bytes) -> bytes:
        try:
            return self.key.sign(
                raw, headers=[b"from", b"to", b"subject", b"date", b"message-id"], canonicalize=(b"relaxed", b"relaxed")
            )
        except Exception:  # dkimpy refuses some malformed heads: sent unsigned, the same for every setting
            return raw

    def section(self, auth: str | None) -> str:
        if auth is None:
            return ""
        if auth in ("off", "off-warm"):
            return "[auth]\nenabled = false\n"
        address = f"127.0.0.1:{self.silent.getsockname()[1]}" if auth == "silent" else self.address
        trusted = f'trusted_authserv_ids = ["{MTA}"]\n' if auth == "trusted" else ""
        return f'[auth]\n{trusted}nameservers = ["{address}"]\n'

    @staticmethod
    def with_mta_results(raw: bytes) -> bytes:
        """`raw` as Postfix hands it on with a verifying milter in front (docs/postfix.md): its
        Authentication-Results, one header for DKIM and DMARC as rspamd writes them (OpenDKIM and
        OpenDMARC write one each), above Postfix's Received, the one hop `[auth] trusted_hops`
        trusts. Our key's signature passes; no From domain in the bench's zone has a DMARC record."""
        from spamd.config import ParserConfig
        from spamd.mail.auth.verify import from_domain_of
        from spamd.mail.message import parse_message, split_head_body
        from spamd.people.senders import from_address

        # The From domain as spamd reads it, so that the header names the domain spamd would check.
        domain = from_domain_of(from_address(parse_message(raw, ParserConfig()).header("from")))
        signed = b"d=bench.example" in split_head_body(raw)[0]  # our key's signature, not one the corpus brought
        dkim = b"dkim=pass header.d=bench.example header.s=bench" if signed else b"dkim=none"
        dmarc = f"; dmarc=none (p=none dis=none) header.from={domain}".encode() if domain.isascii() and domain else b""
        return (
            b"Authentication-Results: " + MTA.encode() + b"; " + dkim + dmarc + b"\r\n"
            b"Received: from bench (localhost [127.0.0.1])\r\n\tby " + MTA.encode() + b" (Postfix) with ESMTP\r\n" + raw
        )

    def close(self) -> None:
        self.zone.terminate()  # type: ignore[attr-defined]
        self.silent.close()


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--index", type=Path, default=DEFAULT_INDEX)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--train", type=int, default=1000, help="messages trained before the replay")
    parser.add_argument("--limit", type=int, default=0, help="messages replayed (0: all after --train)")
    parser.add_argument("--no-fsync", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the temp data dirs")
    parser.add_argument("--profile", type=Path, help="run spamd under cProfile, stats to this file")
    parser.add_argument(
        "--processes", type=int, action="append",
        help="[parser] processes for spamd (default: its own, one per core but one); given twice or more, "
             "the runs alternate between them, --rounds times each",
    )  # fmt: skip
    parser.add_argument(
        "--web",
        choices=["off", "on"],
        action="append",
        help="the web console off or listening (nobody looking); given twice, the runs alternate between them",
    )
    parser.add_argument(
        "--users", type=int, action="append",
        help="deliver to this many users' Maildirs under [maildir] root, each scored with their layer "
             "([users] score_per_user), the pretraining dealt among them; 0 (the default): one Maildir, the "
             "shared model; given twice or more, the runs alternate between them",
    )  # fmt: skip
    parser.add_argument(
        "--per-user", choices=["off", "on"], action="append",
        help="with --users N: [users] score_per_user for those users' mail (default on); off: the shared model "
             "scores everyone's, the same Maildirs and training; given twice, the runs alternate between them, "
             "so the ratio isolates per-user scoring from serving N Maildirs",
    )  # fmt: skip
    parser.add_argument(
        "--tree", type=Path, action="append",
        help="run the daemon from this checkout (default: this one); given twice or more, the runs alternate "
             "between them: an A/B of two commits in the same run (git worktree add /tmp/old HEAD~1)",
    )  # fmt: skip
    parser.add_argument(
        "--replicas-acked", type=int, action="append",
        help="the model in Redis: a redis-server primary and one replica on loopback (AOF, appendfsync always), "
             "[redis] replicas_acked this; given twice, the runs alternate between them",
    )  # fmt: skip
    parser.add_argument(
        "--auth", choices=["off", "off-warm", "on", "warm", "silent", "trusted"], action="append",
        help="the replay DKIM-signed by a test key, [auth] off, on (a loopback DNS server publishing the key) or "
             "asking a DNS server that never answers, or trusting an MTA's Authentication-Results (trusted); given "
             "twice or more, the runs alternate between them",
    )  # fmt: skip
    parser.add_argument(
        "--key-bits", type=int, default=2048, help="the test key's RSA size (2048: what large senders publish)"
    )
    parser.add_argument("--autolearn", action="store_true", help="[maildir] autolearn on: mail trains the model")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each setting, interleaved")
    parser.add_argument(
        "--settle", type=float, default=420, help="longest wait (s) for file creation at rest before a round"
    )
    parser.add_argument("--resting-us", type=float, default=60, help="file creation cost (us) taken as at rest")
    parser.add_argument(
        "--warm-passes", type=int, default=1,
        help="untimed passes of the same mail before the timed one, with --auth warm and off-warm",
    )  # fmt: skip
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # progress shows in a log file too

    if not args.index.is_file():
        print(f"corpus index not found: {args.index}", file=sys.stderr)
        return 2
    rows = read_corpus(args.index)
    replay = [crlf(raw) for _, raw in rows[args.train :]]
    if args.limit:
        replay = replay[: args.limit]
    trees = [tree.resolve() for tree in args.tree or [ROOT]]
    settings = list(dict.fromkeys(
        (tree, processes, web, users, per_user if users else "off", acked, auth)  # one Maildir: the shared model
        for tree in trees for processes in args.processes or [None] for web in args.web or ["off"] for users in args.users or [0]
        for per_user in args.per_user or ["on"] for acked in args.replicas_acked or [None] for auth in args.auth or [None]
    ))  # fmt: skip
    results: dict[
        tuple[Path, int | None, str, int, str, int | None, str | None], list[tuple[float, float, float, float]]
    ] = {s: [] for s in settings}
    failed = False
    work_root = Path(tempfile.mkdtemp(prefix="spamd-bench-"))
    signed = SignedMail(work_root, args.key_bits) if args.auth else None
    if signed is not None:
        replay = [signed.sign(raw) for raw in replay]
        if "trusted" in args.auth:  # every setting then replays the same mail, the MTA's results in it
            replay = [signed.with_mta_results(raw) for raw in replay]
    try:
        for _ in range(args.rounds):
            for tree, processes, web, users, per_user, acked, auth in settings:
                cost = wait_for_resting_file_system(work_root, args.settle, args.resting_us)
                print(f"file creation {cost:.0f} us before the round")
                work = Path(tempfile.mkdtemp(dir=work_root))
                with replicated_redis(work, acked) as redis_section:
                    auth_section = signed.section(auth) if signed is not None else ""
                    rate, p99, cpu, busy, ok = run_once(
                        args,
                        rows,
                        replay,
                        processes,
                        tree,
                        work,
                        web == "on",
                        users,
                        redis_section + auth_section,
                        warm_passes=args.warm_passes if auth in ("warm", "off-warm", "trusted") else 0,
                        per_user=per_user == "on",
                    )
                results[tree, processes, web, users, per_user, acked, auth].append((rate, p99, cpu, busy))
                failed |= not ok
    finally:
        if signed is not None:
            signed.close()
        if args.keep:
            print(f"kept {work_root}")
        else:
            shutil.rmtree(work_root, ignore_errors=True)
    if args.rounds > 1 or len(settings) > 1:
        for (tree, processes, web, users, per_user, acked, auth), runs in results.items():
            name = f"{tree.name} " if len(trees) > 1 else ""
            rates = [rate for rate, *_ in runs]
            redis = "" if acked is None else f", Redis replicas_acked {acked}"
            redis += "" if auth is None else f", auth {auth}"
            scoring = f" (per-user scoring {per_user})" if users else ""
            print(f"{name}processes {'default' if processes is None else processes}, web console {web}, users {users}{scoring}{redis}: "
                  f"{' '.join(f'{r:.0f}' for r in rates)} msgs/s, median {statistics.median(rates):.0f}; "
                  f"p99 {' '.join(f'{p99:.1f}' for _, p99, *_ in runs)} ms; spamd CPU {' '.join(f'{cpu:.2f}' for _, _, cpu, _ in runs)} ms/msg; "
                  f"timed pass CPU in all {' '.join(f'{busy:.2f}' for *_, busy in runs)} ms/msg")  # fmt: skip
        for line in user_ratios(results):
            print(line)
    return 1 if failed else 0


def user_ratios(results: dict[tuple[Any, ...], list[tuple[float, float, float, float]]]) -> list[str]:
    """The users' comparisons, each as the ratio of medians and round by round (runs alternate, so round k
    of one set-up ran beside round k of the other): per-user scoring on over off, the same N Maildirs (what
    per-user scoring costs); N users' Maildirs scored as theirs over one Maildir and the shared model. Beside the
    throughput, the median of the rounds' ratios (paired, so less of other work's load from one round to the
    next) and the ratio of spamd's CPU a message (the other way up: over 1 costs more). Authentication `warm`
    over `off-warm` and over `off` the same way, its CPU the timed pass's in all (spamd's processes and the
    client's): with both cores busy, throughput goes as its inverse, which the machine's swings move less."""
    lines = []
    for (tree, processes, web, users, per_user, acked, auth), runs in results.items():
        rest = (processes, web, acked, auth)
        pairs = []
        if users and per_user == "on":
            pairs.append(("per-user scoring on / off", (tree, processes, web, users, "off", acked, auth)))
            pairs.append(("over one Maildir, the shared model", (tree, processes, web, 0, "off", acked, auth)))
        if auth in ("warm", "trusted"):
            pairs += [
                (f"auth {auth} / {off}", (tree, processes, web, users, per_user, acked, off))
                for off in ("off-warm", "off")
            ]
        for what, base in pairs:
            if not results.get(base) or not runs:
                continue
            rates, before = [rate for rate, *_ in runs], [rate for rate, *_ in results[base]]
            paired = [a / b for a, b in zip(rates, before, strict=False)]
            column = 3 if what.startswith("auth") else 2
            cpus, cpus_before = [run[column] for run in runs], [run[column] for run in results[base]]
            label = f"{tree.name} " if len({key[0] for key in results}) > 1 else ""
            lines.append(
                f"{label}{f'{users} users, ' if users else ''}{what}: {statistics.median(rates) / statistics.median(before):.2f}x "
                f"by the medians, {statistics.median(paired):.2f}x the rounds' median; "
                f"{'the timed pass' if column == 3 else 'spamd'}'s CPU a message "
                f"{statistics.median(cpus) / statistics.median(cpus_before):.2f}x; "
                f"per round {' '.join(f'{r:.2f}' for r in paired)}"
                + ("" if rest == (None, "off", None, None) else f" ({rest})")
            )
    return lines


def run_once(
    args: argparse.Namespace,
    rows: list[tuple[str, bytes]],
    replay: list[bytes],
    processes: int | None,
    tree: Path,
    work: Path,
    web: bool = False,
    users: int = 0,
    redis_section: str = "",
    warm_passes: int = 0,
    per_user: bool = True,
) -> tuple[float, float, float, float, bool]:
    """One fresh spamd, pretrained, replayed to by the clients: (msgs/s, p99 latency in ms, spamd's CPU ms a
    message, the timed pass's CPU ms a message in all (spamd's processes and the client's), every message
    delivered)."""
    config_file = work / "spamd.toml"
    fsync = "false" if args.no_fsync else "true"
    parser_section = "" if processes is None else f"[parser]\nprocesses = {processes}\n"
    # The console listening (history kept, every verdict recorded) but nobody looking at it.
    web_section = '[web]\nlisten = "127.0.0.1:0"\n' if web else ""
    maildirs = [work / "data" / "Maildir"]
    users_section, root_line, recipients = "", "", ["user@example.com"]
    if users:  # one Maildir per user under [maildir] root, each user's mail scored with their layer
        root = work / "users"
        maildirs = [root / f"u{k}" / "Maildir" for k in range(users)]
        for maildir in maildirs:
            for sub in ("cur", "new", "tmp", ".Junk/cur", ".Junk/new", ".Junk/tmp"):
                (maildir / sub).mkdir(parents=True, exist_ok=True)
        root_line = f'root = "{root}"\n'
        users_section = f"[users]\nscore_per_user = {'true' if per_user else 'false'}\n"
        recipients = [f"u{k}@example.com" for k in range(users)]
    autolearn = "autolearn = true\n" if args.autolearn else ""
    config_file.write_text(f'[log]\nformat = "json"\n[maildir]\nfsync = {fsync}\n{autolearn}{root_line}[smtp]\nmax_recipients = 10\n'
                           f'{parser_section}{web_section}{users_section}{redis_section}')  # fmt: skip
    data_dir = work / "data"
    t = time.perf_counter()
    pretrain(data_dir, config_file, rows[: args.train], users)
    print(f"trained {args.train} messages in {time.perf_counter() - t:.1f} s")
    proc, port = start_daemon(data_dir, config_file, work / "spamd.log", args.profile, tree)
    if processes != 0 and logged_event(work / "spamd.log", "analysis_process_ready", proc, 20) is None:
        print(
            "no analysis_process_ready within 20 s (a tree that does not log it?): the loop analyzes the first messages"
        )
    try:
        shares = [replay[i :: args.clients] for i in range(args.clients)]
        for _ in range(warm_passes):  # the same mail, untimed: the daemon's DNS cache then holds every answer
            warmers = [threading.Thread(target=client, args=(port, share, [], [], recipients)) for share in shares]
            for thread in warmers:
                thread.start()
            for thread in warmers:
                thread.join()
        latencies: list[float] = []
        errors: list[str] = []
        threads = [
            threading.Thread(target=client, args=(port, share, latencies, errors, recipients)) for share in shares
        ]
        client_cpu = time.process_time()
        before = process_cpu(proc.pid)
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
        client_cpu = time.process_time() - client_cpu
        timed = {name: seconds - before.get(name, 0.0) for name, seconds in process_cpu(proc.pid).items()}
        timed_all = (sum(timed.values()) + client_cpu) / max(1, len(latencies)) * 1000
        print("timed pass, CPU a message by process: " + ", ".join(
            f"{name} {seconds / max(1, len(latencies)) * 1000:.3f} ms" for name, seconds in sorted(timed.items()))
            + f", client {client_cpu / max(1, len(latencies)) * 1000:.3f} ms; in all {timed_all:.3f} ms, "
            f"{(sum(timed.values()) + client_cpu) / elapsed:.2f} cores busy")  # fmt: skip
    finally:
        proc.terminate()
        _, status, usage = os.wait4(proc.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        proc.returncode = code
        cpu = usage.ru_utime + usage.ru_stime
        print(
            f"spamd user {usage.ru_utime:.1f} s, system {usage.ru_stime:.1f} s, voluntary switches {usage.ru_nvcsw}, involuntary {usage.ru_nivcsw}"
        )
    delivered = sum(len(os.listdir(maildir / d / "new")) for maildir in maildirs for d in ("", ".Junk"))
    rate = len(latencies) / elapsed
    print(
        f"{len(latencies)} messages, {args.clients} clients, fsync {'off' if args.no_fsync else 'on'}, "
        f"processes {'default' if processes is None else processes}, web console {'on' if web else 'off'}"
        f"{f', {users} users, per-user scoring ' + ('on' if per_user else 'off') if users else ''}: "
        f"{rate:.0f} msgs/s, latency p50 {statistics.median(latencies):.1f} ms, "
        f"p99 {percentile(latencies, 0.99):.1f} ms, max {max(latencies):.1f} ms; "
        f"errors {len(errors)}; delivered {delivered}; spamd exit {code}, "
        f"spamd CPU {cpu:.1f} s ({cpu / max(1, len(latencies)) * 1000:.2f} ms/msg incl. start-up and shutdown, "
        "its analysis processes included: they are its children); "
        f"client CPU {client_cpu:.1f} s ({client_cpu / max(1, len(latencies)) * 1000:.2f} ms/msg)"
    )
    for error in errors[:5]:
        print("  error:", error)
    p99 = percentile(latencies, 0.99) if latencies else 0.0
    cpu_ms = cpu / max(1, len(latencies)) * 1000
    return rate, p99, cpu_ms, timed_all, not errors and delivered == len(replay) * (1 + warm_passes) and code == 0


def process_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of `pid` and its descendants, by kind: the loop's process ("spamd") and its
    helpers by module (analysis, delivery); from /proc, Linux only ({} elsewhere)."""
    ticks = os.sysconf("SC_CLK_TCK")
    totals: dict[str, float] = {}
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{current}/cmdline").read_bytes().split(b"\0")
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
        module = next((part.decode() for part in command if part.startswith(b"spamd.")), "spamd")
        name = module.rpartition(".")[2] if module != "spamd" else "loop"
        totals[name] = totals.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return totals


if __name__ == "__main__":
    sys.exit(main())
