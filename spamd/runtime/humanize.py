"""Sizes, durations and text from a message as people read them: spamctl's tables, the web console, the console log."""

from __future__ import annotations

import math


def human_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def human_duration(seconds: float | None) -> str:
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{seconds:.0f} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


# C0 controls but tab and line feed, DEL, and C1 controls: what a message may carry (a List-Id, a
# Message-ID, a header's shape) and a terminal would act on. ESC begins a sequence that clears the
# screen, moves the cursor or retitles the window.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c not in (0x09, 0x0A)}


def controls_shown(text: str) -> str:
    """`text` with each control character a terminal would act on written as \\xNN."""
    return text.translate(_CONTROLS)
