"""The mail layer: bytes -> parsed message (`message`) -> tokens (`tokenize`).

Knows nothing of the model, of people or of where a message came from. May use
only `spamd.config` (parser settings), `spamd.runtime` and `spamd.errors`.
"""
