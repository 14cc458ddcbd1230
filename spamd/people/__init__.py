"""What people's moves say: per-user layers (`users`), where each user's mail from
each sender goes (`senders`) and spamd's live accuracy as people judge it (`accuracy`).

Pure state with injected clocks: no I/O, no journal, no ledger (the trainer and the
stores keep those). May use `spamd.model`, `spamd.mail` and the layers below.
"""
