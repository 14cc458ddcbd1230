"""glibc's malloc told to serve read buffers of a few hundred KiB from its heap: seen in a process's own mappings."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="mallopt's thresholds are glibc's"
)

# A fresh interpreter holds a 2 MiB buffer (as a 1 MiB read or asyncio's 256 KiB ones, but
# larger than anything start-up frees, which would raise glibc's threshold by itself) and says
# whether it became a mapping of its own: outside the [heap] of /proc/self/maps. (Counting the
# lines of maps was not enough: a new mapping beside another anonymous one merges into it, as it
# did in 12 of 30 starts once spamd's start-up imported hashlib.)
_PROBE = """
import ctypes, sys
from spamd.runtime.malloc_tuning import keep_read_buffers_in_the_heap
tuned = sys.argv[1] == "tuned" and keep_read_buffers_in_the_heap()
buffer = bytearray(2 << 20)
address = ctypes.addressof((ctypes.c_char * len(buffer)).from_buffer(buffer))
with open("/proc/self/maps") as f:
    heaps = [line.split()[0].split("-") for line in f if line.rstrip().endswith("[heap]")]
in_heap = any(int(start, 16) <= address < int(end, 16) for start, end in heaps)
print(tuned, not in_heap)
"""


def probe(setting: str) -> str:
    done = subprocess.run([sys.executable, "-c", _PROBE, setting], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_read_sized_buffer_is_a_mapping_of_its_own_unless_tuned():
    assert probe("default") == "False True"
    assert probe("tuned") == "True False"


def test_every_process_that_reads_in_bulk_is_tuned():
    """The daemon, spamctl, the analysis and delivery helpers and the bulk workers each call it once."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "spamd"
    callers = {
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if "keep_read_buffers_in_the_heap()" in path.read_text() and path.name != "malloc_tuning.py"
    }
    assert callers == {
        "__main__.py", "cli/__init__.py", "engine/analyzers.py", "frontends/delivery.py", "learning/classifier.py",
    }  # fmt: skip
