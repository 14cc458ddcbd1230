"""Measuring spamd on labelled streams: TREC protocols and measures (`trec`), who labels
what and when (`feedback`), derived streams (`variants`) and plots (`plots`).

Beside `spamd.frontends`, not below it: neither knows the other. May use
`spamd.engine` and every layer below.
"""
