"""The ways mail and requests reach spamd: SMTP, LMTP, the milter, spamc, watched Maildirs, the control socket.

Each hands bytes to the one `Scorer` / `Engine` path and turns the result into
its own protocol's answer; none holds model logic or knows how state is stored.
"""
