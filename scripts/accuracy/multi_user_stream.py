#!/usr/bin/env python3
"""Per-user layers measured: a corpus dealt to several users who agree, and to users who disagree.

Builds two multi-user TREC indexes (third field: the user) from one corpus:

- agree: every message dealt to a user at random, with its gold label;
- disagree, one per disputed list (`--disputed`, matched in List-Id; give it several
  times): the same, except that list's messages are dealt to the first two users
  only: the first labels them spam (she left the list and moves every copy into
  Junk), the second keeps them as ham.

Then runs `spamctl eval` on each, with the per-user layers and with `--no-user-layer`
(the shared model alone), and prints per user (1-ROCA)% and, for each disputed list,
the share of each user's copies filed their way (by verdict: spam to Junk, anything
else to INBOX) after at most 5 of their own corrections. Last, the cost of scoring
for a user against the shared model alone, in this process.

With `--sign`, each disputed list's messages are DKIM-signed (a copy under `--out`) by a
test key of the list's own domain (the List-Id's organizational domain), made on the spot;
a DNS server of our own on loopback (spamd_lab.loopback_dns) publishes the keys and
a DMARC record, and `spamctl eval --dns` asks only it ([auth] nameservers): the list is then
an authenticated sender, as a list that signs its mail is. Without it the lists' mail is
unauthenticated, as in the corpora, and a rescued list gets only the bounded push.

    python scripts/accuracy/multi_user_stream.py ../shared/corpora/spamassassin/index --out /tmp/multi-user
    python scripts/accuracy/multi_user_stream.py ../shared/corpora/trec07p-dev/full/index --out /tmp/mu-trec \
        --disputed r-help.stat.math.ethz.ch --disputed samba-cvs.lists.samba.org --feedback errors
    python scripts/accuracy/multi_user_stream.py ../shared/corpora/spamassassin/index --out /tmp/mu-signed \
        --sign --disagree-only --cost-messages 0
    python scripts/multi_user_stream.py ../shared/corpora/modern-dev/index --out /tmp/mu-both \
        --disputed usrp-users.lists.ettus.com --both --disagree-only --cost-messages 0 --feedback errors

Files in an index that are no mail message are named on stderr and skipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spamd_lab.signing_keys import SigningKey

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # spamd_lab: the signing keys and the DNS server, beside spamd

USERS = ("alice", "bob", "carol")
DEFAULT_DISPUTED = "rpm-zzzlist.freshrpms.net"
CORRECTIONS = 5  # the target: filed their way after at most this many of a user's own corrections


def list_id(path: Path) -> str:
    """The List-Id headers' values (first 64 KiB of the header; a message relayed by two lists has two), or ''."""
    try:
        with open(path, "rb") as f:
            head = f.read(65536).split(b"\n\n", 1)[0].split(b"\r\n\r\n", 1)[0]
    except OSError:  # spamctl eval names the file and skips it
        return ""
    values = [line[8:].decode("latin-1").strip() for line in head.splitlines() if line[:8].lower() == b"list-id:"]
    return " ".join(values)


def slug(disputed: str) -> str:
    """A file-name part for a List-Id (letters, digits, dots and dashes)."""
    return "".join(c if c.isalnum() or c in ".-" else "_" for c in disputed)[:60]


def build_indexes(
    index: Path,
    out: Path,
    disputed: list[str],
    seed: int,
    signed: Callable[[Path, str], Path] | None = None,
    both: bool = False,
) -> tuple[Path, dict[str, tuple[Path, int]]]:
    """Write agree.index and a disagree index per disputed list under `out` (absolute paths).

    Returns the agree index and, per list, its disagree index and the number of its
    messages. Every index deals the corpus to the same users (one seed): they differ
    only in the disputed list's messages, which `signed(path, list)` replaces by a signed copy.
    `both`: each of the list's messages goes to both, the leaver's copy first (the same bytes twice,
    as a list's one copy lands in two subscribers' Maildirs).
    """
    from spamd.evaluation.trec import read_index

    rng = random.Random(seed)
    dealt = [(entry.label, entry.path.resolve(), rng.choice(USERS)) for entry in read_index(index)]
    out.mkdir(parents=True, exist_ok=True)
    (out / "agree.index").write_text("".join(f"{label} {path} {user}\n" for label, path, user in dealt))
    disagree: dict[str, tuple[Path, int]] = {}
    for name in disputed:
        lines, n_disputed = [], 0
        for label, path, user in dealt:
            if disputed_path(str(path), name):
                n_disputed += 1
                owner = USERS[n_disputed % 2]  # alternately alice and bob
                copy = signed(path, name) if signed is not None else path
                if both:
                    lines += [f"spam {copy} alice\n", f"ham {copy} bob\n"]
                    continue
                lines.append(f"{'spam' if owner == 'alice' else 'ham'} {copy} {owner}\n")
            else:
                lines.append(f"{label} {path} {user}\n")
        target = out / f"disagree-{slug(name)}.index"
        target.write_text("".join(lines))
        disagree[name] = (target, n_disputed)
    return out / "agree.index", disagree


def run_eval(
    index: Path, user_layer: bool, config: Path | None, feedback: str = "full", dns: bool = False
) -> tuple[dict, list[tuple[str, bool]]]:
    """`spamctl eval --json` on `index`; the report and each message's (gold, judged spam) in index order."""
    with tempfile.NamedTemporaryFile(suffix=".results") as results:
        spamctl = Path(sys.executable).parent / "spamctl"  # the one installed beside this Python
        command = [str(spamctl), "eval", str(index), "--json", "--results", results.name, "--feedback", feedback]
        if config is not None:
            command[1:1] = ["--config", str(config)]
        command.append("--score-per-user" if user_layer else "--no-user-layer")
        if dns:
            command.append("--dns")
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
        report = json.loads(done.stdout.strip().splitlines()[-1])
        verdicts = [
            (line.split()[1], line.split()[3] == "spam") for line in Path(results.name).read_text().splitlines()
        ]
    return report, verdicts


def filed_their_way(
    index: Path, verdicts: Sequence[tuple[object, bool]], disputed: str
) -> dict[str, tuple[float, int, int]]:
    """Per user of the disputed list: (share filed their way after <= CORRECTIONS corrections, corrections, copies)."""
    lines = [line.split() for line in index.read_text().splitlines()]
    # spamctl eval skips files that are no message: match results to lines by path, in order.
    by_user: dict[str, list[bool]] = {}
    position = 0
    for label, path, user in lines:
        if position >= len(verdicts):
            break
        _, judged_spam = verdicts[position]  # the gold label is the line's own
        position += 1
        if not disputed_path(path, disputed):
            continue
        by_user.setdefault(user, []).append(judged_spam == (label == "spam"))
    shares = {}
    for user, right in sorted(by_user.items()):
        wrong_at = [i for i, ok in enumerate(right) if not ok]
        cut = wrong_at[min(CORRECTIONS, len(wrong_at)) - 1] + 1 if wrong_at else 0
        rest = right[cut:]
        shares[user] = (sum(rest) / len(rest) if rest else float("nan"), len(wrong_at), len(right))
    return shares


_LIST_IDS: dict[str, str] = {}  # path -> List-Id, each file read once for every list


def disputed_path(path: str, disputed: str) -> bool:
    if path not in _LIST_IDS:
        _LIST_IDS[path] = list_id(Path(path))
    return disputed in _LIST_IDS[path]


class ListSigner:
    """Signs disputed lists' messages with a test key of each list's domain, published by a loopback DNS server."""

    SELECTOR = "spamd-test"

    def __init__(self, out: Path):
        from spamd_lab.loopback_dns import ZoneServer

        self.directory = out / "signed"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.zone = ZoneServer()
        self.keys: dict[str, SigningKey] = {}
        self.copies: dict[tuple[Path, str], Path] = {}
        self.unsigned = 0  # messages dkimpy could not sign (left as they were)

    def key(self, path: Path, disputed: str) -> SigningKey:
        """The key of the list's own domain: the organizational domain of the List-Id that matched (the part in <>)."""
        from spamd.mail.auth.domains import organizational_domain
        from spamd_lab.signing_keys import rsa_key

        ids = [found for found in re.findall(r"<([^<>]+)>", list_id(path)) if disputed in found] or [disputed]
        domain = organizational_domain(ids[0].strip().lower())
        if domain not in self.keys:
            self.keys[domain] = rsa_key(self.directory, domain, self.SELECTOR)
            self.zone.txt(f"{self.SELECTOR}._domainkey.{domain}", self.keys[domain].dns_value)
            self.zone.txt(f"_dmarc.{domain}", "v=DMARC1; p=none")
        return self.keys[domain]

    def __call__(self, path: Path, disputed: str) -> Path:
        if (path, disputed) not in self.copies:
            copy = self.directory / f"{len(self.copies):06d}.eml"
            raw = path.read_bytes()
            try:
                copy.write_bytes(self.key(path, disputed).sign(raw))
            except Exception as e:  # dkimpy refuses some malformed heads: the copy stays unsigned
                print(f"{path}: not signed: {e}", file=sys.stderr)
                self.unsigned += 1
                copy.write_bytes(raw)
            self.copies[(path, disputed)] = copy
        return self.copies[(path, disputed)]

    def authenticated(self) -> dict[str, tuple[int, int]]:
        """Per disputed list: how many of its signed copies verify as their List-Id (through spamd's own checks), of all."""
        from spamd.config import AuthConfig, ParserConfig
        from spamd.mail.auth.dns import CachingResolver
        from spamd.mail.auth.verify import Authenticator
        from spamd.mail.message import parse_message
        from spamd.people.senders import authenticated_as, from_address, sender_names

        config = AuthConfig(nameservers=(self.zone.address,))
        authenticator = Authenticator(config, CachingResolver(config.nameservers))
        counts: dict[str, tuple[int, int]] = {}
        for (_, disputed), copy in self.copies.items():
            raw = copy.read_bytes()
            message = parse_message(raw, ParserConfig())
            auth = authenticator.verify(raw, message.headers, from_address(message.header("from")))
            names = [n for n in sender_names(message) if n.startswith("list-id=") and disputed in n]
            ok, total = counts.get(disputed, (0, 0))
            counts[disputed] = (ok + any(authenticated_as(n, auth) for n in names), total + 1)
        return counts

    def config(self, base: Path | None) -> Path:
        """A spamd.toml that asks only our server (`base`'s settings too, which must not have [auth])."""
        import tomllib

        text = base.read_text() if base is not None else ""
        if "auth" in tomllib.loads(text):
            raise SystemExit(f"{base}: --sign writes [auth] itself; take it out of the config")
        path = self.directory / "spamd.toml"
        path.write_text(f'{text}\n[auth]\nnameservers = ["{self.zone.address}"]\n')
        return path


def scoring_cost(index: Path, messages: int) -> tuple[float, float]:
    """Microseconds per message scored for its user and by the shared model alone, after training the stream."""
    from spamd.config import Config, UsersConfig
    from spamd.engine.engine import Engine
    from spamd.evaluation.trec import index_messages, read_index

    entries = read_index(index)[: 2 * messages]
    with tempfile.TemporaryDirectory(prefix="spamd-users-cost-") as tmp:
        engine = Engine.open(
            dataclasses.replace(Config(users=UsersConfig(score_per_user=True)), data_dir=Path(tmp)), durable=False
        )
        try:
            pairs = [(entry, raw) for entry, raw in index_messages(entries)]
            analyzed = engine.classifier.analyze_many([raw for _, raw in pairs])
            train, test = (
                list(zip(pairs, analyzed, strict=True))[:messages],
                list(zip(pairs, analyzed, strict=True))[messages:],
            )
            for (entry, _), a in train:
                engine.trainer.train(a, entry.label, "eval", True, entry.user)
            timings = {}
            for name, with_user in (("shared", False), ("user", True), ("shared2", False), ("user2", True)):
                started = time.perf_counter()
                for _ in range(3):
                    for (entry, _), a in test:
                        engine.classifier.score(a, entry.user if with_user else None)
                timings[name] = (time.perf_counter() - started) / (3 * len(test)) * 1e6
        finally:
            engine.close()
    return min(timings["user"], timings["user2"]), min(timings["shared"], timings["shared2"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index", type=Path, help="a TREC index (spamassassin: it holds mailing lists)")
    parser.add_argument("--out", type=Path, default=Path("multi-user-stream"), help="where the indexes go")
    parser.add_argument(
        "--disputed",
        action="append",
        help="List-Id (or part of it) of a list users disagree on; give it"
        f" several times for a disagree stream each (default: {DEFAULT_DISPUTED})",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--config", type=Path, help="a spamd.toml for spamctl eval (e.g. other [users] settings)")
    parser.add_argument(
        "--feedback",
        default="full",
        help="spamctl eval's protocol: full, errors or people (with errors and people,"
        " a user's layer starts as the corrections they make: often one class only)",
    )
    parser.add_argument(
        "--cost-messages",
        type=int,
        default=2000,
        help="messages trained, then as many scored, for the cost (0: no cost measured)",
    )
    parser.add_argument(
        "--sign",
        action="store_true",
        help="DKIM-sign the disputed lists' mail by a test key of each list's domain, served by a loopback DNS server",
    )
    parser.add_argument(
        "--disagree-only",
        action="store_true",
        help="only the disagree streams with the user layer (the disputed-list figure)",
    )
    parser.add_argument(
        "--both",
        action="store_true",
        help="each disputed message to both users, the leaver's copy first (one list, two subscribers)",
    )
    args = parser.parse_args()
    signer = ListSigner(args.out) if args.sign else None
    agree, disagree = build_indexes(
        args.index, args.out, args.disputed or [DEFAULT_DISPUTED], args.seed, signer, both=args.both
    )
    config = args.config
    if signer is not None:
        signer.zone.start()
        config = signer.config(args.config)
        print(
            f"signed {len(signer.copies) - signer.unsigned} messages ({signer.unsigned} not) by {sorted(signer.keys)}"
        )
        for name, (ok, total) in signer.authenticated().items():
            print(f"{name}: {ok} of {total} signed copies authenticated as the list")
    for name, (path, n_disputed) in disagree.items():
        if not n_disputed:
            raise SystemExit(f"no message of {args.index} has a List-Id with {name!r} in it")
        print(f"{path}: {n_disputed} messages of {name} disputed")
    summary: dict[str, object] = {}
    runs = [("agree", agree, None)] + [(f"disagree {name}", path, name) for name, (path, _) in disagree.items()]
    for title, index, disputed in runs[1:] if args.disagree_only else runs:
        for user_layer in (True,) if args.disagree_only else (False, True):
            report, verdicts = run_eval(index, user_layer, config, args.feedback, dns=signer is not None)
            how = "user layer" if user_layer else "shared only"
            per_user = {u: round(m["one_minus_roca_pct"], 4) for u, m in report["users"].items()}
            print(f"{title:8} {how:11}  (1-ROCA)% {report['one_minus_roca_pct']:.4f}  per user {per_user}", flush=True)
            entry: dict[str, object] = {"overall": report["one_minus_roca_pct"], "users": report["users"]}
            if disputed is not None:
                shares = filed_their_way(index, verdicts, disputed)
                for user, (share, wrong, copies) in shares.items():
                    print(f"{'':21}{user}: {disputed} filed their way {100 * share:.1f}% after "
                          f"{min(wrong, CORRECTIONS)} corrections ({wrong} wrong of {copies})")  # fmt: skip
                entry["disputed"] = shares
            summary[f"{title}/{how}"] = entry
    if args.cost_messages > 0:
        user_us, shared_us = scoring_cost(agree, args.cost_messages)
        print(
            f"scoring cost: {user_us:.1f} us/msg for a user, {shared_us:.1f} us/msg shared only ({user_us / shared_us:.2f}x)"
        )
        summary["cost_us"] = {"user": user_us, "shared": shared_us}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    if signer is not None:
        signer.zone.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
