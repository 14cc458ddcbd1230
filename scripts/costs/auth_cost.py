"""What sender authentication adds to a message's analysis: CPU a message with [auth] on and off, DNS cached.

Signs trec07p-dev messages as scripts/speed/bench_smtp.py --auth does (d=bench.example, an RSA key
of --key-bits, 2048 by default, c=relaxed/relaxed, as 2020s mail is signed; the key and a
DMARC record published by a loopback DNS server in a process of its own), analyzes each once
untimed so the resolver's cache holds every answer, then times `Classifier.analyze` of the
same mail with [auth] enabled and disabled, alternated --rounds times in one process; the best
round of each (CPU time) is the figure, the rest being the machine's noise.

    .venv/bin/python scripts/costs/auth_cost.py                                  # this checkout
    .venv/bin/python scripts/costs/auth_cost.py --tree /tmp/old --tree .         # an A/B of two checkouts

The mail is signed and the DNS server run by this checkout's code, once; each --tree is then
measured in a process of its own with that tree's spamd on sys.path first, on the same mail.

Would a compiled verifier make DKIM cheaper? With --libopendkim, the same signed mail is
verified instead, in this process and alternated --rounds times, CPU a message, by:

- spamd: `verify_signatures`, every signature of the message, as the analysis helper calls it;
- libopendkim: OpenDKIM's C library (libopendkim.so.11, Debian's libopendkim11) through ctypes
  (spamd_lab/opendkim_library.py), the whole message handed over in one `dkim_chunk`, each key
  fetched by a callback from the same resolver (so from the same cache), then each signature's
  flags read back.

Both verify every signature of every message and must agree on our key's signature (the
script counts where they do not). With --without-keys the callback answers "not found", which
shows what libopendkim spends on the key and the RSA check.

    .venv/bin/python scripts/costs/auth_cost.py --libopendkim      # add --without-keys
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_LINE_END = re.compile(rb"\r\n|\n|\r(?!\n)")  # smtplib's


def measure(tree: Path, work: Path, rounds: int) -> None:
    """Time the tree's analysis of the mail in `work`, with each setting's config there."""
    sys.path[:0] = [str(tree)]  # the tree's spamd first
    from spamd.config import load_config
    from spamd.learning.classifier import Classifier

    mail, described = pickle.loads((work / "mail.pickle").read_bytes())
    classifiers = {
        setting: Classifier(load_config(work / f"{setting}.toml"), None)  # type: ignore[arg-type]  # analysis only
        for setting in ("off", "on")
    }
    for raw in mail:  # untimed: every DNS answer cached
        classifiers["on"].analyze(raw)
        classifiers["off"].analyze(raw)
    best = {"off": float("inf"), "on": float("inf")}
    for _ in range(rounds):
        for setting, classifier in classifiers.items():
            started = time.process_time()
            for raw in mail:
                classifier.analyze(raw)
            best[setting] = min(best[setting], (time.process_time() - started) / len(mail) * 1e3)
    print(f"{tree}: {len(mail)} messages {described}, analysis CPU a message (best of {rounds}): [auth] off "
          f"{best['off']:.3f} ms, on {best['on']:.3f} ms; authentication adds {best['on'] - best['off']:.3f} ms "
          f"({best['on'] / best['off']:.2f}x)")  # fmt: skip


def best_cpu_us(verify: Callable[[bytes], object], mail: list[bytes]) -> float:
    started = time.process_time()
    for raw in mail:
        verify(raw)
    return (time.process_time() - started) / len(mail) * 1e6


def against_libopendkim(mail: list[bytes], nameserver: str, key_bits: int, rounds: int, without_keys: bool) -> None:
    """spamd's DKIM checks and libopendkim's on the same mail, keys from one resolver's cache, alternated."""
    from spamd.mail.auth.dkim import verify_signatures
    from spamd.mail.auth.dns import Budget, CachingResolver
    from spamd_lab.opendkim_library import OpenDkim

    resolver = CachingResolver((nameserver,))
    opendkim = OpenDkim(resolver, with_keys=not without_keys)

    def ours(raw: bytes) -> list[tuple[str, str]]:
        return [(s.domain, s.result) for s in verify_signatures(raw, resolver, Budget(2.0))]

    ours_first = [next(iter(ours(raw)), None) for raw in mail]  # untimed: every key cached
    theirs_first = [next(iter(opendkim.verify(raw)), None) for raw in mail]
    differ = sum(a != b for a, b in zip(ours_first, theirs_first, strict=True) if a and a[0] == "bench.example")
    best = {"spamd": float("inf"), "libopendkim": float("inf")}
    for _ in range(rounds):
        best["spamd"] = min(best["spamd"], best_cpu_us(ours, mail))
        best["libopendkim"] = min(best["libopendkim"], best_cpu_us(opendkim.verify, mail))
    keys = "no key found (--without-keys)" if without_keys else "keys from the cache"
    print(f"{len(mail)} messages signed by a {key_bits}-bit key, c=relaxed/relaxed; libopendkim {keys}; "
          f"libopendkim disagrees on our signature in {differ}. DKIM CPU a message (best of {rounds}): "
          f"spamd {best['spamd']:.0f} us, libopendkim {best['libopendkim']:.0f} us "
          f"({best['libopendkim'] / best['spamd']:.2f}x)")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--key-bits", type=int, default=2048, help="the test key's RSA size")
    parser.add_argument("--tree", type=Path, action="append", help="a checkout whose spamd is measured")
    parser.add_argument(
        "--libopendkim",
        action="store_true",
        help="DKIM alone: spamd's checks beside OpenDKIM's C library, this checkout",
    )
    parser.add_argument("--without-keys", action="store_true", help="with --libopendkim: it finds no key, no RSA check")
    parser.add_argument("--in-tree", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.in_tree is not None:
        measure(args.in_tree, args.work, args.rounds)
        return 0
    sys.path.insert(0, str(ROOT))
    from scripts.speed.bench_smtp import DEFAULT_INDEX, SignedMail, read_corpus

    work = Path(tempfile.mkdtemp(prefix="spamd-auth-cost-"))
    signed = SignedMail(work, args.key_bits)
    try:
        rows = read_corpus(DEFAULT_INDEX)[1000 : 1000 + args.messages]
        mail = [_LINE_END.sub(b"\r\n", signed.sign(raw)) for _, raw in rows]  # every line end CRLF, as SMTP brings it
        if args.libopendkim:
            against_libopendkim(mail, signed.address, args.key_bits, args.rounds, args.without_keys)
            return 0
        described = f"signed by a {args.key_bits}-bit key, c=relaxed/relaxed"
        (work / "mail.pickle").write_bytes(pickle.dumps((mail, described)))
        for setting in ("off", "on"):
            (work / f"{setting}.toml").write_text(signed.section(setting))
        for tree in [t.resolve() for t in args.tree or [ROOT]]:
            command = [sys.executable, __file__, "--in-tree", str(tree), "--work", str(work),
                       "--rounds", str(args.rounds)]  # fmt: skip
            done = subprocess.run(command, cwd=tree, env=dict(os.environ, PYTHONSAFEPATH="1"))
            if done.returncode != 0:
                return done.returncode
    finally:
        signed.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
