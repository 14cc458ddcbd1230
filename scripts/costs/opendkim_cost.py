"""Would a compiled verifier make DKIM cheaper? spamd's checks against Debian's libopendkim, on the same mail.

Signs trec07p-dev messages as scripts/costs/auth_cost.py does (d=bench.example, an RSA key of
--key-bits, c=relaxed/relaxed; the key published by a loopback DNS server), then times, in one
process and alternated --rounds times, CPU a message for:

- spamd: `verify_signatures`, every signature of the message, as the analysis helper calls it;
- libopendkim: OpenDKIM's C library (libopendkim.so.11, Debian's libopendkim11) through ctypes,
  the whole message handed over in one `dkim_chunk`, each key fetched by a callback from the
  same resolver (so from the same cache), then each signature's flags read back.

Both verify every signature of every message and must agree on our key's signature (the
script counts where they do not). With --without-keys the callback answers "not found", which
shows what libopendkim spends on the key and the RSA check.

    .venv/bin/python scripts/costs/opendkim_cost.py
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.speed.bench_smtp import DEFAULT_INDEX, SignedMail, read_corpus  # noqa: E402
from spamd.mail.auth.dkim import verify_signatures  # noqa: E402
from spamd.mail.auth.dns import Budget, CachingResolver  # noqa: E402
from spamd_lab.opendkim_library import OpenDkim  # noqa: E402

_LINE_END = re.compile(rb"\r\n|\n|\r(?!\n)")  # smtplib's


def best_cpu_us(verify: Callable[[bytes], object], mail: list[bytes]) -> float:
    started = time.process_time()
    for raw in mail:
        verify(raw)
    return (time.process_time() - started) / len(mail) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--key-bits", type=int, default=2048, help="the test key's RSA size")
    parser.add_argument("--without-keys", action="store_true", help="libopendkim finds no key: no RSA check")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="spamd-opendkim-cost-"))
    signed = SignedMail(work, args.key_bits)
    try:
        rows = read_corpus(DEFAULT_INDEX)[1000 : 1000 + args.messages]
        mail = [_LINE_END.sub(b"\r\n", signed.sign(raw)) for _, raw in rows]  # every line end CRLF, as SMTP brings it
        resolver = CachingResolver((signed.address,))
        opendkim = OpenDkim(resolver, with_keys=not args.without_keys)

        def ours(raw: bytes) -> list[tuple[str, str]]:
            return [(s.domain, s.result) for s in verify_signatures(raw, resolver, Budget(2.0))]

        ours_first = [next(iter(ours(raw)), None) for raw in mail]  # untimed: every key cached
        theirs_first = [next(iter(opendkim.verify(raw)), None) for raw in mail]
        differ = sum(a != b for a, b in zip(ours_first, theirs_first, strict=True) if a and a[0] == "bench.example")
        best = {"spamd": float("inf"), "libopendkim": float("inf")}
        for _ in range(args.rounds):
            best["spamd"] = min(best["spamd"], best_cpu_us(ours, mail))
            best["libopendkim"] = min(best["libopendkim"], best_cpu_us(opendkim.verify, mail))
        keys = "no key found (--without-keys)" if args.without_keys else "keys from the cache"
        print(f"{len(mail)} messages signed by a {args.key_bits}-bit key, c=relaxed/relaxed; libopendkim {keys}; "
              f"libopendkim disagrees on our signature in {differ}. DKIM CPU a message (best of {args.rounds}): "
              f"spamd {best['spamd']:.0f} us, libopendkim {best['libopendkim']:.0f} us "
              f"({best['libopendkim'] / best['spamd']:.2f}x)")  # fmt: skip
    finally:
        signed.close()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
