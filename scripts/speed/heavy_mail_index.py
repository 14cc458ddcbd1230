#!/usr/bin/env python3
"""A TREC index of heavy HTML mail, standing in for 2020s mail in the speed scripts.

Mail of the 2020s is larger than trec07p's (around 40 KB, most of it HTML), and
spamd must be no slower on it. No such corpus is here, so this
takes the messages of the given indexes that are at least --min-bytes long and
carry HTML, in index order, and repeats the list --repeat times (the speed
scripts need thousands of messages; a repeat is scored again and, in eval,
found in the ledger). Both corpora together give 1,035 messages, 30 KB on average.

    python scripts/speed/heavy_mail_index.py /tmp/heavy/index ../shared/corpora/trec07p-dev/full/index ../shared/corpora/spamassassin/index
    python scripts/speed/compare_speed.py /tmp/heavy/index --rounds 3
    python scripts/speed/bench_smtp.py --index /tmp/heavy/index --train 500 --limit 4000

The index lists absolute paths, so it works wherever it is written.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from spamd.errors import SpamdError
from spamd.evaluation.trec import index_messages, read_index

_HTML_RE = re.compile(rb"<html|text/html", re.IGNORECASE)


def heavy_lines(indexes: list[Path], min_bytes: int) -> list[str]:
    """'spam /abs/path' lines of the messages of `indexes` that are large and carry HTML."""
    lines = []
    for index in indexes:
        for entry, raw in index_messages(read_index(index)):  # each file that is no message is named on stderr
            if len(raw) >= min_bytes and _HTML_RE.search(raw):
                lines.append(f"{entry.label} {entry.path.resolve()}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the index file to write")
    parser.add_argument("indexes", type=Path, nargs="+", help="TREC indexes to take messages from")
    parser.add_argument("--min-bytes", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    lines = heavy_lines(args.indexes, args.min_bytes)
    if not lines:
        print("no message is that large and carries HTML", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(line + "\n" for line in lines * args.repeat))
    sizes = [Path(line.split(" ", 1)[1]).stat().st_size for line in lines]
    print(f"{args.out}: {len(lines)} messages x {args.repeat}, {sum(sizes) / len(sizes) / 1024:.1f} KiB on average")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SpamdError as e:  # an index that cannot be read or has a line that is no entry: one line, no traceback
        sys.exit(f"{Path(sys.argv[0]).name}: {e}")
