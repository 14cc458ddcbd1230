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
# whether it became a mapping of its own: a new line in /proc/self/maps.
_PROBE = """
import sys
from spamd.runtime.malloc_tuning import keep_read_buffers_in_the_heap
tuned = sys.argv[1] == "tuned" and keep_read_buffers_in_the_heap()
def mappings():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)
before = mappings()
buffer = bytearray(2 << 20)
print(tuned, mappings() > before)
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
