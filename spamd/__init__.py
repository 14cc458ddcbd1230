"""spamd: an online spam filter daemon that learns from moves into and out of Junk.

Bytes in (spamd.frontends.smtp, spamd.frontends.maildir) -> parsed message (spamd.message) -> tokens
(spamd.tokenize) -> score (spamd.model, via spamd.classifier) -> verdict and
delivery -> training (spamd.training, spamd.store). spamd.engine holds the open
model state; spamd.daemon wires the service; spamd.cli is spamctl.
"""

import os as _os

__version__ = "0.1.0"

# numpy's OpenBLAS starts a thread per core at import, and on a 2-core machine that
# thread spins for about 0.1 s of CPU before it sleeps: 0.41-0.47 -> 0.33-0.35 s of
# CPU per `spamctl classify` of two messages (10 runs each), in every spamd, spamctl
# and helper process. spamd's arrays are a message's few hundred tokens: no BLAS call
# of its is large enough for threads to help. Set before anything imports numpy; an
# admin's own setting wins.
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
