"""structlog imported without `rich`, whose tracebacks spamd's logs never render.

structlog imports rich whenever it is installed (its console renderer's and its
traceback extractor's pretty printing). spamd renders JSON lines, or key=value with
plain tracebacks on a terminal, so rich only cost every spamd, spamctl and worker
process its import: 80-150 ms of each start where the venv has it (import-linter in
the test extras brings it), `spamctl classify` of two messages 767-868 -> 614-727 ms.
"""

from __future__ import annotations

import sys


def import_structlog_without_rich() -> None:
    """Import structlog with rich hidden from it; rich stays importable for anything else afterwards.

    Does nothing when structlog is already imported (it then has rich or not already).
    """
    if "structlog" in sys.modules or "rich" in sys.modules:
        return
    sys.modules["rich"] = None  # type: ignore[assignment]  # makes `import rich` raise ImportError
    try:
        import structlog  # noqa: F401
    finally:
        del sys.modules["rich"]
