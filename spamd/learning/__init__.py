"""The classifier path and the rules of training that every store applies.

`classifier`: message bytes -> analysed features -> a score, with a user's layer and
senders; `outcomes`: what a training did and the thick-threshold rule. Neither
learns nor stores: `spamd.engine.trainer` and `spamd.store` do. May use
`spamd.people`, `spamd.model`, `spamd.mail` and the layers below.
"""
