"""OpenDKIM's C library (Debian's libopendkim11) through ctypes: spamd's DKIM checks compared with OpenDKIM's own.

For tests and measurement scripts (scripts/costs/auth_cost.py --libopendkim), never for verifying mail:
each key comes from spamd's resolver, so it asks only the nameservers a test gives it.
"""

from __future__ import annotations

import ctypes
import ctypes.util

from spamd.mail.auth.dns import Budget, CachingResolver

LIBRARY = "libopendkim.so.11"
DKIM_CBSTAT_CONTINUE, DKIM_CBSTAT_NOTFOUND = 0, 3  # dkim.h
DKIM_SIGFLAG_PASSED, DKIM_SIGBH_MATCH = 0x04, 0
KeyLookup = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


class OpenDkim:
    """libopendkim's verifying calls, as dkim.h declares them; keys from `resolver`."""

    def __init__(self, resolver: CachingResolver, with_keys: bool = True):
        lib = ctypes.CDLL(LIBRARY)
        lib.dkim_init.restype = ctypes.c_void_p
        lib.dkim_init.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.dkim_verify.restype = ctypes.c_void_p
        lib.dkim_verify.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        lib.dkim_chunk.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.dkim_eom.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.dkim_free.argtypes = [ctypes.c_void_p]
        lib.dkim_getsiglist.argtypes = [
            ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_void_p)), ctypes.POINTER(ctypes.c_int)
        ]  # fmt: skip
        for name in ("dkim_sig_getflags", "dkim_sig_getbh", "dkim_sig_getdomain", "dkim_sig_getselector"):
            getattr(lib, name).argtypes = [ctypes.c_void_p]
        lib.dkim_sig_getdomain.restype = lib.dkim_sig_getselector.restype = ctypes.c_char_p
        lib.dkim_set_key_lookup.argtypes = [ctypes.c_void_p, KeyLookup]
        self.lib, self.resolver = lib, resolver
        self.budget = Budget(3600.0)
        self._lookup = KeyLookup(self._key if with_keys else lambda *_: DKIM_CBSTAT_NOTFOUND)  # kept alive
        self.handle = lib.dkim_init(None, None)
        lib.dkim_set_key_lookup(self.handle, self._lookup)

    def _key(self, _dkim: int, signature: int, buffer: int, length: int) -> int:
        name = self.lib.dkim_sig_getselector(signature) + b"._domainkey." + self.lib.dkim_sig_getdomain(signature)
        records = self.resolver.txt(name.decode("ascii", "replace"), self.budget)
        if not records or len(records[0]) >= length:
            return DKIM_CBSTAT_NOTFOUND
        record = records[0] if isinstance(records[0], bytes) else records[0].encode()
        ctypes.memmove(buffer, record + b"\0", len(record) + 1)
        return DKIM_CBSTAT_CONTINUE

    def verify(self, raw: bytes) -> list[tuple[str, str]]:
        lib, status = self.lib, ctypes.c_int()
        job = lib.dkim_verify(self.handle, b"bench", None, ctypes.byref(status))
        try:
            lib.dkim_chunk(job, raw, len(raw))
            lib.dkim_chunk(job, None, 0)
            lib.dkim_eom(job, None)
            signatures, count = ctypes.POINTER(ctypes.c_void_p)(), ctypes.c_int()
            lib.dkim_getsiglist(job, ctypes.byref(signatures), ctypes.byref(count))
            results = []
            for index in range(count.value):
                each = signatures[index]
                passed = (
                    lib.dkim_sig_getflags(each) & DKIM_SIGFLAG_PASSED and lib.dkim_sig_getbh(each) == DKIM_SIGBH_MATCH
                )
                results.append((lib.dkim_sig_getdomain(each).decode("ascii", "replace"), "pass" if passed else "fail"))
            return results
        finally:
            lib.dkim_free(job)


def library_missing() -> str | None:
    """Why libopendkim cannot be loaded here (a skip reason), or None."""
    if ctypes.util.find_library("opendkim") is None:
        return "Debian's libopendkim is not installed (apt-get install libopendkim11, or opendkim)"
    return None
