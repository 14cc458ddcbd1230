"""Logging, configured once at startup: structlog events, stdlib records rendered the same way.

JSON lines when stderr is not a terminal (journald, files), coloured key=value on
a terminal. aiosmtpd and watchdog log through the stdlib; their records pass
through the same formatter so every line has one shape. This module does not
decide what is logged: each module does `log = structlog.get_logger()`.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any, TextIO

import structlog

from spamd.config import LogConfig
from spamd.runtime.humanize import controls_shown

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}

# aiosmtpd logs every SMTP command line at INFO and watchdog every inotify hiccup;
# at spamd's "info" that is noise around the one canonical line per message.
_CHATTY = ("mail.log", "watchdog")


# structlog's own events skip the stdlib chain (LogRecord, handler, ProcessorFormatter):
# one message_scored line cost 57-65 us that way and 17 us this way, about 6% of the
# SMTP loop's time under scripts/speed/bench_smtp.py. Level filtering is a dict lookup
# here, so SIGHUP can change it without rebuilding cached loggers.
_METHOD_LEVELS = {
    "debug": logging.DEBUG, "info": logging.INFO, "msg": logging.INFO, "warning": logging.WARNING,
    "warn": logging.WARNING, "error": logging.ERROR, "err": logging.ERROR, "exception": logging.ERROR,
    "critical": logging.CRITICAL, "fatal": logging.CRITICAL,
}  # fmt: skip
_threshold = logging.INFO


def _drop_below_level(
    logger: object, method_name: str, event_dict: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    if _METHOD_LEVELS.get(method_name, logging.INFO) < _threshold:
        raise structlog.DropEvent
    return event_dict


class _LineWriter:
    """structlog's logger: one locked write and flush per line, for its events and the stdlib's.

    A write that fails (stderr closed, the log's disk full) drops the line: a log line
    must never fail the delivery or the training that logged it.
    """

    def __init__(self, stream: TextIO):
        self._stream = stream
        self._lock = threading.Lock()

    def msg(self, message: str) -> None:
        with self._lock:
            try:
                self._stream.write(message + "\n")
                self._stream.flush()
            except (OSError, ValueError):
                pass

    debug = info = warning = warn = error = err = exception = critical = fatal = msg


class _SharedWriterHandler(logging.Handler):
    """Foreign (stdlib) records, formatted like structlog's events, through the same writer."""

    def __init__(self, writer: _LineWriter):
        super().__init__()
        self.writer = writer

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.writer.msg(self.format(record))
        except Exception:
            self.handleError(record)


class _ConsoleWithControlsShown:
    """structlog's console renderer, each text value's control characters written as \\xNN first: a
    Message-ID of ESC sequences reached the terminal of a spamd run in the foreground as it was (its
    colours are the renderer's own, added after). JSON escapes them itself."""

    def __init__(self, colors: bool):
        self._render = structlog.dev.ConsoleRenderer(colors=colors)

    def __call__(self, logger: Any, name: str, event_dict: structlog.typing.EventDict) -> str:
        shown = {k: controls_shown(v) if isinstance(v, str) else v for k, v in event_dict.items()}
        return self._render(logger, name, shown)


def configure_logging(config: LogConfig, stream: TextIO | None = None) -> None:
    stream = sys.stderr if stream is None else stream
    as_json = config.format == "json" or (config.format == "auto" and not stream.isatty())
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if as_json else _ConsoleWithControlsShown(stream.isatty())
    )
    writer = _LineWriter(stream)
    structlog.configure(
        processors=[_drop_below_level, *shared, structlog.processors.format_exc_info, renderer],
        logger_factory=lambda *args: writer,
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
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
    handler = _SharedWriterHandler(writer)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    set_level(config.level)


def set_level(level: str) -> None:
    """Apply a log level (live, on SIGHUP too)."""
    global _threshold
    value = LEVELS.get(level.lower(), logging.INFO)
    _threshold = value
    logging.getLogger().setLevel(value)
    for name in _CHATTY:
        logging.getLogger(name).setLevel(max(value, logging.WARNING))
