"""Files that are never half-written: write to a temp file, fsync, rename, fsync the directory; stale temps removed."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes, durable: bool = True) -> None:
    """Temp file in the same directory, fsync, rename over `path`, fsync the directory."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_directory(path.parent)


def remove_stale_temps(directory: Path, pattern: str) -> list[str]:
    """Delete the temp files (`.<name>.tmp-<pid>`) a write_atomically killed mid-write left behind.

    Call only while holding the state lock: then no other process is writing them.
    """
    removed = []
    for path in directory.glob(pattern):
        path.unlink(missing_ok=True)
        removed.append(path.name)
    return removed
