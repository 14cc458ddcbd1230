"""Chart geometry for the console's inline SVG: stacked areas and lines, axes with round ticks.

Drawn on the server, so a page needs no script and no outside host. This module computes
coordinates only; templates/_chart.html writes the SVG elements (escaped like any other
value), and static/console.css colours them by each series' class.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

WIDTH, HEIGHT = 720, 220
LEFT, RIGHT, TOP, BOTTOM = 48, 8, 10, 24  # margins around the plot


@dataclass(frozen=True)
class Series:
    name: str
    css: str  # the class that colours it
    path: str  # SVG path data
    area: bool  # filled (stacked) or a line
    dots: list[tuple[float, float]] = field(default_factory=list)  # a line's points (one alone draws no line)


@dataclass(frozen=True)
class Chart:
    label: str  # what the chart shows, for screen readers
    series: list[Series]
    y_ticks: list[tuple[float, str]]
    x_ticks: list[tuple[float, str]]
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM
    empty: bool = False
    legend: list[tuple[str, str]] = field(default_factory=list)  # (css, name)


def nice_step(value: float) -> float:
    """The smallest of 1, 2 or 5 times a power of ten at or above `value` (1 for nothing)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * power >= value * (1 - 1e-9):
            return step * power
    return 10 * power


TICKS = 4  # gridlines above zero


def _y_ticks(step: float, y: _Scale, percent: bool) -> list[tuple[float, str]]:
    ticks = []
    for i in range(TICKS + 1):
        v = step * i
        label = f"{v * 100:.3g}%" if percent else (f"{v:,.0f}" if step >= 1 else f"{v:.3g}")
        ticks.append((round(y(v), 1), label))
    return ticks


class _Scale:
    def __init__(self, lo: float, hi: float, out_lo: float, out_hi: float):
        self.lo, self.hi, self.out_lo, self.out_hi = lo, hi, out_lo, out_hi

    def __call__(self, v: float) -> float:
        span = self.hi - self.lo or 1.0
        return self.out_lo + (v - self.lo) / span * (self.out_hi - self.out_lo)


def stacked_areas(
    label: str,
    x_labels: Sequence[str],
    columns: Sequence[tuple[str, str]],
    rows: Sequence[Sequence[float]],
    x_tick_every: int,
) -> Chart:
    """Stacked areas, one per column (name, css), over points in order; rows[i][j] is point i's value of column j."""
    n = len(rows)
    totals = [sum(r) for r in rows]
    step = max(1.0, nice_step(max(totals, default=0) / TICKS))  # whole messages
    top_value = step * TICKS
    x = _Scale(0, max(n - 1, 1), LEFT, WIDTH - RIGHT)
    y = _Scale(0, top_value, HEIGHT - BOTTOM, TOP)
    series = []
    base = [0.0] * n
    for j, (name, css) in enumerate(columns):
        upper = [base[i] + rows[i][j] for i in range(n)]
        forward = " ".join(f"{x(i):.1f},{y(upper[i]):.1f}" for i in range(n))
        backward = " ".join(f"{x(i):.1f},{y(base[i]):.1f}" for i in reversed(range(n)))
        series.append(Series(name, css, f"M{forward} L{backward} Z" if n else "", True))
        base = upper
    x_ticks = [(round(x(i), 1), x_labels[i]) for i in range(0, n, max(1, x_tick_every))]
    return Chart(label, series, _y_ticks(step, y, False), x_ticks, empty=not any(totals),
                 legend=[(css, name) for name, css in columns])  # fmt: skip


def lines(
    label: str, x_labels: Sequence[str], columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[float | None]],
    x_tick_every: int, percent: bool = False,
) -> Chart:  # fmt: skip
    """One line per column (name, css); a None value breaks the line (nothing to measure that day)."""
    n = len(rows)
    values = [v for r in rows for v in r if v is not None]
    step = nice_step(max(values, default=0) / TICKS) if any(values) else (0.0025 if percent else 1.0)
    top_value = step * TICKS
    x = _Scale(0, max(n - 1, 1), LEFT, WIDTH - RIGHT)
    y = _Scale(0, top_value, HEIGHT - BOTTOM, TOP)
    series = []
    for j, (name, css) in enumerate(columns):
        parts, dots, pen_down = [], [], False
        for i in range(n):
            v = rows[i][j]
            if v is None:
                pen_down = False
                continue
            parts.append(f"{'L' if pen_down else 'M'}{x(i):.1f},{y(v):.1f}")
            dots.append((round(x(i), 1), round(y(v), 1)))
            pen_down = True
        series.append(Series(name, css, " ".join(parts), False, dots))
    x_ticks = [(round(x(i), 1), x_labels[i]) for i in range(0, n, max(1, x_tick_every))]
    return Chart(label, series, _y_ticks(step, y, percent), x_ticks, empty=not values,
                 legend=[(css, name) for name, css in columns])  # fmt: skip
