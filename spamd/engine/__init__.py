"""The open model state and the one path every way in uses.

`engine`: the Engine, which holds the model, the ledger, per-user state and the store;
`trainer`: applying a training through the ledger and journal; `scoring`: score one
message for delivery with its X-Spam headers and log line; `analyzers`: the analysis
helper processes. May use `spamd.store` and every layer below; never a front end.
"""
