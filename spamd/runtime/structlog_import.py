"""structlog imported without `rich`, whose tracebacks spamd's logs never render.

structlog imports rich whenever it is installed (its console renderer's and its
traceback extractor's pretty printing). spamd renders JSON lines, or key=value with
plain tracebacks on a terminal, so rich only cost every spamd, spamctl and worker
process its import: 80-150 ms of each start where the venv has it (import-linter in
the test extras brings it), `spamctl classify` of two messages 767-868 -> 614-727 ms.

A finder on sys.meta_path runs structlog's own module with rich hidden, whenever a
process first imports it: a process that never logs (spamctl asking the daemon)
still imports neither.
"""

from __future__ import annotations

import importlib.machinery
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any


class _RunHidingRich:
    """The loader of structlog's module, executing it while `import rich` raises ImportError."""

    def __init__(self, loader: Any):
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        if "rich" in sys.modules:  # imported meanwhile by something else: structlog may have it too
            self._loader.exec_module(module)
            return
        sys.modules["rich"] = None  # type: ignore[assignment]  # makes `import rich` raise ImportError
        try:
            self._loader.exec_module(module)
        finally:
            del sys.modules["rich"]

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, ...: the real loader's
        return getattr(self._loader, name)


class _StructlogWithoutRich:
    """Finds structlog as the path finder does, its module run by `_RunHidingRich`."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != "structlog" or "rich" in sys.modules:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _RunHidingRich(spec.loader)  # type: ignore[assignment]
        return spec


def hide_rich_from_structlog() -> None:
    """Make the first import of structlog in this process run with rich hidden from it (rich stays importable
    for anything else). Does nothing where structlog is imported already: it has rich or not by then."""
    if "structlog" in sys.modules or any(isinstance(finder, _StructlogWithoutRich) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _StructlogWithoutRich())
