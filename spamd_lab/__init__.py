"""What tests and measurement scripts build spamd's inputs and peers with, beside the product.

Derived streams (`variants`) and attacked streams (`attacks`) that no command exposes,
DKIM test keys made with openssl and PyNaCl (`signing_keys`), an authoritative DNS
server on loopback (`loopback_dns`) and a ctypes binding to OpenDKIM's C library
(`opendkim_library`). The wheel does not ship it, and the import contract in
pyproject.toml forbids `spamd` to import it: it may use `spamd`, never the reverse.
"""
