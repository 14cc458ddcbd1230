"""Logging, configured once at startup: structlog events, stdlib records rendered the same way.

JSON lines when stderr is not a terminal (journald, files), coloured key=value on
a terminal. aiosmtpd and watchdog log through the stdlib; their records pass
through the same formatter so every line has one shape. This module does not
decide what is logged: each module does `log = structlog.get_logger()`.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

from spamd.config import LogConfig

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}

# aiosmtpd logs every SMTP command line at INFO and watchdog every inotify hiccup;
# at spamd's "info" that is noise around the one canonical line per message.
_CHATTY = ("mail.log", "watchdog")


def configure_logging(config: LogConfig, stream: TextIO | None = None) -> None:
    stream = sys.stderr if stream is None else stream
    as_json = config.format == "json" or (config.format == "auto" and not stream.isatty())
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=stream.isatty())
    )
    structlog.configure(
        processors=[structlog.stdlib.filter_by_level, *shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    set_level(config.level)


def set_level(level: str) -> None:
    """Apply a log level (live, on SIGHUP too)."""
    value = LEVELS.get(level.lower(), logging.INFO)
    logging.getLogger().setLevel(value)
    for name in _CHATTY:
        logging.getLogger(name).setLevel(max(value, logging.WARNING))
