"""spamd: an online spam filter daemon that learns from moves into and out of Junk.

Bytes in (spamd.frontends.smtp, spamd.frontends.maildir) -> parsed message (spamd.message) -> tokens
(spamd.tokenize) -> score (spamd.model, via spamd.classifier) -> verdict and
delivery -> training (spamd.training, spamd.store). spamd.engine holds the open
model state; spamd.daemon wires the service; spamd.cli is spamctl.
"""

__version__ = "0.1.0"
