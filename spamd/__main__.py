"""`spamd` and `python -m spamd`: the daemon's command line, then its three phases (spamd.daemon).

Exit codes: 0 after a clean stop, 1 for what the admin must fix (config, state), 75
(EX_TEMPFAIL) when Redis is not there yet, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from spamd import __version__
from spamd.daemon import Daemon
from spamd.errors import SpamdError, StoreUnavailableError
from spamd.runtime.gc_tuning import tune_gc_for_message_streams
from spamd.runtime.logs import configure_logging
from spamd.runtime.malloc_tuning import keep_read_buffers_in_the_heap


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="spamd",
        description="Online spam filter daemon (SMTP content filter, milter, SpamAssassin spamc protocol, Maildir watcher).",
    )
    parser.add_argument(
        "--config", type=Path, help="TOML config file (default: embedded defaults; see config/spamd.toml)"
    )
    parser.add_argument(
        "--data-dir", type=Path, help="data directory: model state and the default Maildir (overrides data_dir)"
    )
    parser.add_argument("--smtp", metavar="HOST:PORT", help="SMTP listen address (overrides [smtp] host and port)")
    parser.add_argument(
        "--milter",
        metavar="HOST:PORT",
        help="milter listen address for Postfix smtpd_milters (overrides [milter] listen)",
    )
    parser.add_argument(
        "--spamc", metavar="HOST:PORT", help="serve SpamAssassin's spamc protocol here (overrides [spamc] listen)"
    )
    parser.add_argument(
        "--redis",
        metavar="URL",
        help="share the model through Redis, e.g. redis://127.0.0.1:6379/0 (overrides [redis] url)",
    )
    parser.add_argument(
        "--metrics", metavar="HOST:PORT", help="serve Prometheus /metrics here (overrides [metrics] listen)"
    )
    parser.add_argument("--web", metavar="HOST:PORT", help="serve the web console here (overrides [web] listen)")
    parser.add_argument("--version", action="version", version=f"spamd {__version__}")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tune_gc_for_message_streams()
    keep_read_buffers_in_the_heap()
    try:
        daemon = Daemon(
            args.config,
            data_dir=args.data_dir,
            smtp_listen=args.smtp,
            milter_listen=args.milter,
            spamc_listen=args.spamc,
            redis_url=args.redis,
            metrics_listen=args.metrics,
            web_listen=args.web,
        )
        configure_logging(daemon.config.log)
        asyncio.run(daemon.run())
    except StoreUnavailableError as e:
        # Redis not there (yet): 75 (EX_TEMPFAIL), which the unit's Restart=on-failure
        # retries; its RestartPreventExitStatus=1 keeps configuration errors from looping.
        print(f"spamd: {e}", file=sys.stderr)
        return 75
    except SpamdError as e:
        print(f"spamd: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
