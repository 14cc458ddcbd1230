"""spamd: an online spam filter daemon that learns from moves into and out of Junk.

The packages, top to bottom, as a message travels (each imports only those below it;
the contract is in pyproject.toml's [tool.importlinter]):

- `cli` (spamctl), `daemon` (the running service's wiring)
- `frontends` (SMTP, LMTP, milter, spamc, Maildirs, control, metrics) | `evaluation`
- `web` (the console and the HTTP server under /metrics)
- `engine` (the open model state: scoring for delivery, applying a training)
- `store` (where counts, layers and the ledger live: local or Redis)
- `learning` (the classifier path, the rules of training)
- `people` (per-user layers, senders, live accuracy)
- `model` (naive Bayes, estimation, feature families)
- `mail` (bytes -> parsed message -> tokens)
- `runtime` (helpers, scheduling, logs), `config`, `errors`
"""

import os as _os

# The one place the version is set: pyproject.toml reads it (setuptools' dynamic version),
# `spamd --version`, `spamctl stats` and the spamd_build metric report it.
__version__ = "0.1.0"

# numpy's OpenBLAS starts a thread per core at import, and on a 2-core machine that
# thread spins for about 0.1 s of CPU before it sleeps: 0.41-0.47 -> 0.33-0.35 s of
# CPU per `spamctl classify` of two messages (10 runs each), in every spamd, spamctl
# and helper process. spamd's arrays are a message's few hundred tokens: no BLAS call
# of its is large enough for threads to help. Set before anything imports numpy; an
# admin's own setting wins.
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# The analysis's hot modules run as mypyc compiled them only when their build is of their
# current source (spamd.runtime.compiled); else, and with SPAMD_PURE_PYTHON=1, as source.
from spamd.runtime import compiled as _compiled  # noqa: E402

_compiled.install()

# Before any module of spamd imports structlog (spamd.runtime.structlog_import says why).
from spamd.runtime.structlog_import import hide_rich_from_structlog as _hide_rich_from_structlog  # noqa: E402

_hide_rich_from_structlog()
