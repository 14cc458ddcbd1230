"""The modules mypyc compiles (setup.py) analyze as their source does, and an edited source is never shadowed.

CI builds them (.ci/run's editable install and the wheel): there the analysis must run
compiled. Where it does, tests/test_analysis_digest.py also runs the source, with
SPAMD_PURE_PYTHON=1, over every corpus's messages: the same digests, to the bit.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import json
from pathlib import Path

import pytest

import spamd.mail.tokenize
from spamd.runtime import compiled

NOT_COMPILED = None if compiled.COMPILED else f"the analysis runs as source: {compiled.REASON}"


@pytest.mark.real_program(NOT_COMPILED)
def test_the_build_runs_the_analysis_compiled() -> None:
    assert compiled.recorded(), "setup.py recorded no compiled module"
    for module in compiled.recorded():
        origin = importlib.import_module(module).__file__
        assert origin is not None and origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)), origin
    assert type(spamd.mail.tokenize.tokenize).__name__ == "builtin_function_or_method"


def _built(tmp_path: Path, source: bytes = b"X = 1\n", extension: bool = True) -> Path:
    """A package tree as setup.py leaves it: spamd/mail/thing.py, its extension, the record."""
    module = tmp_path / "spamd" / "mail" / "thing.py"
    module.parent.mkdir(parents=True)
    module.write_bytes(source)
    if extension:
        module.with_suffix(importlib.machinery.EXTENSION_SUFFIXES[0]).write_bytes(b"\x7fELF")
    record = tmp_path / "spamd" / "compiled.json"
    record.write_text(json.dumps({"spamd.mail.thing": hashlib.sha256(source).hexdigest()}))
    return record


def test_a_build_of_the_current_source_runs_compiled(tmp_path: Path) -> None:
    assert compiled.why_source(_built(tmp_path), {}) is None


def test_an_edited_source_runs_as_source(tmp_path: Path) -> None:
    record = _built(tmp_path)
    (tmp_path / "spamd" / "mail" / "thing.py").write_bytes(b"X = 2\n")
    assert "spamd.mail.thing changed since it was compiled" in (compiled.why_source(record, {}) or "")


def test_a_module_whose_compile_failed_makes_all_run_as_source(tmp_path: Path) -> None:
    assert compiled.why_source(_built(tmp_path, extension=False), {}) == "spamd.mail.thing was not compiled"


def test_nothing_compiled_or_asked_for_the_source(tmp_path: Path) -> None:
    record = _built(tmp_path)
    assert compiled.why_source(record, {compiled.PURE_ENV: "1"}) == f"{compiled.PURE_ENV} is set"
    record.write_text("{}")
    assert "nothing was compiled" in (compiled.why_source(record, {}) or "")
    record.write_text("not json")
    assert "nothing was compiled" in (compiled.why_source(record, {}) or "")
    record.unlink()
    assert "nothing was compiled" in (compiled.why_source(record, {}) or "")


def test_a_module_written_in_c_is_held_to_its_c_source(tmp_path: Path) -> None:
    source = b"/* words */\n"
    scanner = tmp_path / "spamd" / "mail" / "_scan.c"
    scanner.parent.mkdir(parents=True)
    scanner.write_bytes(source)
    record = tmp_path / "spamd" / "compiled.json"
    record.write_text(json.dumps({"spamd.mail._scan": hashlib.sha256(source).hexdigest()}))
    assert compiled.why_source(record, {}) == "spamd.mail._scan was not compiled"
    scanner.with_suffix(importlib.machinery.EXTENSION_SUFFIXES[0]).write_bytes(b"\x7fELF")
    assert compiled.why_source(record, {}) is None
    scanner.write_bytes(b"/* words, edited */\n")
    assert "spamd.mail._scan changed since it was compiled" in (compiled.why_source(record, {}) or "")
