"""Measuring spamd on labelled streams: TREC protocols and measures (`trec`), who labels
what and when (`feedback`) and plots (`plots`), for `spamctl eval` and `spamctl report --plot`.

Beside `spamd.frontends`, not below it: neither knows the other. May use
`spamd.engine` and every layer below. The derived and attacked streams the measurement
scripts make are not here: they are in spamd_lab, beside the product.
"""
