"""The analysis's hot modules compiled by mypyc, mypy's compiler (the same source, run as C), and its word scanner.

Everything else about the package is in pyproject.toml; this file only adds the compiled
modules and spamd/mail/_words.c, the one module written in C (its pure-Python twin is the
patterns of spamd/mail/tokenize.py). Each is optional: where mypyc or a C compiler is
missing, or it fails, the package installs as pure Python and runs the same
(docs/performance.md#compiled-by-mypyc). SPAMD_PURE_PYTHON=1 at build time compiles
nothing (a checkout whose listed modules are being edited; spamd/__init__.py also runs
their source once it differs from what was built).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from setuptools import Extension, setup

# The modules every message passes through (parsing, normalising, scanning, tokens).
COMPILED = [
    "spamd/mail/message.py",
    "spamd/mail/markup.py",
    "spamd/mail/normalize.py",
    "spamd/mail/hidden.py",
    "spamd/mail/senders_claimed.py",
    "spamd/mail/tokenize.py",
    "spamd/model/features.py",
    "spamd/model/families.py",
    "spamd/model/bayes.py",
]
# Written in C: the body's words in one pass, and the tokens' hashes in one call (each file says why).
WRITTEN_IN_C = {"spamd.mail._words": "spamd/mail/_words.c", "spamd.model._token_ids": "spamd/model/_token_ids.c"}
# Libraries' C sources the modules above include (each directory holds its licence).
C_INCLUDE_DIRS = ["third_party/xxhash"]


# What was compiled, from which source (spamd.runtime.compiled reads it: a module whose
# source changed since runs as source, and so do all the others).
RECORD = Path(__file__).resolve().parent / "spamd" / "compiled.json"


def record(paths: list[str]) -> None:
    root = RECORD.parent.parent
    digests = {
        path.rpartition(".")[0].replace("/", "."): hashlib.sha256((root / path).read_bytes()).hexdigest()
        for path in paths
    }
    RECORD.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")


def compiled_extensions() -> list:
    try:
        from mypyc.build import mypycify
    except ImportError:
        mypycify = None
    if mypycify is None or os.environ.get("SPAMD_PURE_PYTHON"):
        record([])
        return []
    # Type information for the modules' imports is not needed to compile them (numpy and
    # publicsuffixlist are called as Python objects), and the build environment has only
    # what [build-system] requires: their types are taken as Any. The project's own mypy
    # settings (pyproject.toml) are for checking the whole tree, not for this build.
    extensions = mypycify(
        ["--ignore-missing-imports", "--config-file", os.devnull, *COMPILED],
        opt_level="3",
        # The runtime they share, inside the package (spamd/compiled__mypyc.*.so) rather than beside it.
        group_name="spamd.compiled",
    )
    extensions += [Extension(name, [source], include_dirs=C_INCLUDE_DIRS) for name, source in WRITTEN_IN_C.items()]
    for extension in extensions:
        extension.optional = True  # a failed compile leaves the modules in pure Python
    record([*COMPILED, *WRITTEN_IN_C.values()])
    return extensions


setup(ext_modules=compiled_extensions())
