"""spamctl eval: TREC-style online evaluation (spamd.evaluation does the work)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from spamd.config import Config
from spamd.errors import SpamdError


def cmd_eval(config: Config, args: argparse.Namespace) -> int:
    from spamd.classifier import default_jobs
    from spamd.evaluation import eval_command  # heavy (numpy reports, optional matplotlib): only when asked

    if args.jobs is not None and args.jobs < 1:
        raise SpamdError(f"--jobs {args.jobs}: need at least 1 (1 = analyze in this process)")
    jobs = default_jobs() if args.jobs is None else (0 if args.jobs == 1 else args.jobs)
    return eval_command(
        config,
        Path(args.index),
        Path(args.results) if args.results else None,
        Path(args.plot) if args.plot else None,
        args.json,
        sys.stderr.isatty(),
        jobs,
    )

