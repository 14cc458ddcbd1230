"""The web console: see at a glance that spamd works, why it decided, and teach it.

Served on the daemon's loop with aiohttp when `[web] listen` (or `spamd --web`) is
set. One module per concern: `server` (HTTP bounded against hostile clients, shared
with /metrics), `app` (routes and security headers), `pages` (what each page shows),
`auth` (the token, the password hash, sessions, CSRF, throttled logins), `history`
(the ring buffer of recent verdicts), `charts` (SVG drawn on the server);
`templates/` and `static/` ship with the package, so the console works offline.
"""
