"""Where glibc's malloc puts buffers of a few hundred KiB: in the heap, kept for the next read.

asyncio's sockets read up to 256 KiB at a time into a new bytes object (an SMTP client's
every command and its message, a helper's answers), and reads of files and of helper
frames take 1 MiB. Above glibc's mmap threshold (128 KiB at start) each such object is a
mapping of its own, made, faulted in and unmapped again at every read: a read of an 8 KB
frame over a socketpair took 18-21 us with 256 KiB or 1 MiB asked, 3.6-3.9 us with 64 KiB
or with the threshold raised (20,000 reads each). A process-wide setting, so it lives here;
each entry point that reads sockets or files in bulk calls it once.
"""

from __future__ import annotations

import ctypes

# glibc's malloc.h
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Allocations below this come from the heap; larger ones (a big message, the model's arrays)
# are still mappings of their own, returned to the system when freed.
MMAP_THRESHOLD = 4 << 20
# Free memory kept at the heap's top rather than given back, so the next read reuses it.
TRIM_THRESHOLD = 8 << 20


def keep_read_buffers_in_the_heap() -> bool:
    """Raise glibc's mmap and trim thresholds; False where the C library has no mallopt (or refuses)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (macOS has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
