"""Whether the modules mypyc compiled run as C, or their source runs: never a build older than its source.

setup.py compiles the analysis's hot modules and records each one's SHA-256 in
`spamd/compiled.json`. They run compiled only when every recorded module still has
its extension beside it and its source is the source it was built from; otherwise
(an edited checkout, a build without a compiler, SPAMD_PURE_PYTHON=1 when spamd
starts) every one of them runs from its source. All or none: compiled modules call
each other's C functions directly, and those of a module imported as source were
never set up. The two run the same analysis (tests/test_analysis_digest.py compares them). A module
written in C (spamd/mail/_words.c) is recorded by its .c source and guarded the same way.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

PACKAGE = "spamd"
RECORD = Path(__file__).resolve().parents[1] / "compiled.json"
PURE_ENV = "SPAMD_PURE_PYTHON"
_EXTENSION_SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)


def _source_of(module: str, record: Path) -> Path:
    """The module's source: its .py, or the .c of a module written in C (spamd/mail/_words.c)."""
    stem = record.parent.joinpath(*module.split(".")[1:])
    source = stem.with_suffix(".py")
    return source if source.exists() or not stem.with_suffix(".c").exists() else stem.with_suffix(".c")


def _extension_beside(source: Path) -> bool:
    return any(source.with_suffix(suffix).exists() for suffix in _EXTENSION_SUFFIXES)


def recorded(record: Path = RECORD) -> dict[str, str]:
    """The build's record: each compiled module's name and its source's SHA-256 ({} when none was compiled)."""
    try:
        modules = json.loads(record.read_text())
    except (OSError, ValueError):
        return {}
    return {str(name): str(digest) for name, digest in modules.items()} if isinstance(modules, dict) else {}


def why_source(record: Path = RECORD, environ: Mapping[str, str] = os.environ) -> str | None:
    """Why the compiled modules do not run (None: they do)."""
    if environ.get(PURE_ENV):
        return f"{PURE_ENV} is set"
    modules = recorded(record)
    if not modules:
        return "nothing was compiled (no C compiler or mypyc at build time, or SPAMD_PURE_PYTHON=1 then)"
    for module, digest in sorted(modules.items()):
        source = _source_of(module, record)
        if not _extension_beside(source):
            return f"{module} was not compiled"
        try:
            current = hashlib.sha256(source.read_bytes()).hexdigest()
        except OSError:
            return f"{module}'s source is unreadable"
        if current != digest:
            return f"{module} changed since it was compiled: rebuild (pip install -e .) to compile it again"
    return None


class _SourceOnly:
    """Finds spamd's modules as source wherever an extension of an old or partial build lies beside them.

    A finder by its find_spec alone: subclassing importlib.abc.MetaPathFinder imported
    importlib.resources and tempfile, 20 ms of every process start."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if not fullname.startswith(PACKAGE + ".") or path is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not (spec.origin or "").endswith(_EXTENSION_SUFFIXES):
            return None  # the usual finders find it as they would
        source = Path(spec.origin or "").parent / (fullname.rpartition(".")[2] + ".py")
        if not source.exists():
            return None
        return importlib.util.spec_from_file_location(fullname, source)


REASON = why_source()
COMPILED = REASON is None


def install() -> None:
    """Put the source-only finder first when the compiled modules must not run (spamd/__init__.py calls it)."""
    if not COMPILED and not any(isinstance(finder, _SourceOnly) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SourceOnly())
