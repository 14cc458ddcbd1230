"""The daemon's own machinery: helper processes and their frames, scheduling of
blocking work, logs, garbage-collector tuning, and sizes and durations as people read them.

Knows nothing of mail or the model. May use only `spamd.config` and `spamd.errors`.
"""
