"""Figures for spamctl: the ROC curve of an evaluation and live accuracy per day (matplotlib, optional).

They draw what spamd.evaluation.trec and spamd.people.accuracy computed; they compute nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from spamd.errors import SpamdError


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend, or a SpamdError saying how to install it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SpamdError("--plot needs matplotlib: pip install 'spamd[plot]'") from None
    return plt


def _save_figure(plt: Any, fig: Any, path: Path, dpi: int) -> None:
    """Write the figure as PNG and free it; an unwritable path is one clear error."""
    try:
        fig.savefig(path, dpi=dpi)
    except OSError as e:
        raise SpamdError(f"{path}: cannot write plot: {e.strerror}") from None
    finally:
        plt.close(fig)


def plot_roc(hm: np.ndarray, sm: np.ndarray, area_pct: float, messages: int, path: Path, title: str) -> None:
    """ROC curve on logit axes (hm% across, sm% up), as in the TREC spam track overviews.

    Takes the curve spamd.evaluation.measures.roc_points computed and its (1-ROCA)%.
    """
    plt = _pyplot()
    import matplotlib.ticker

    floor = 0.5 / max(messages, 1)
    hm, sm = np.clip(hm, floor, 1 - floor), np.clip(sm, floor, 1 - floor)
    fig, ax = plt.subplots(figsize=(6, 6))
    ax.plot(hm, sm, lw=1.5, label=f"spamd, (1-ROCA)% {area_pct:.4f}")
    ax.set_xscale("logit")
    ax.set_yscale("logit")
    ticks = [0.0001, 0.001, 0.01, 0.1, 0.5, 0.9]
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(matplotlib.ticker.FixedLocator(ticks))
        axis.set_major_formatter(matplotlib.ticker.FixedFormatter([f"{100 * t:g}" for t in ticks]))
        axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlim(floor, 0.95)
    ax.set_ylim(floor, 0.95)
    ax.set_xlabel("% ham misclassification (logit scale)")
    ax.set_ylabel("% spam misclassification (logit scale)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.4)
    ax.legend(loc="upper right")
    fig.tight_layout()
    _save_figure(plt, fig, path, dpi=120)


def plot_live_accuracy(days: list[dict[str, Any]], path: Path) -> None:
    """Live errors per day (people's moves against spamd's verdicts) over the training volume, one PNG."""
    plt = _pyplot()
    labels = [d["day"] for d in days]
    x = np.arange(len(days))
    fig, (errors, volume) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for kind, name in (
        ("false_positive", "false positives"),
        ("missed_spam", "missed spam"),
        ("unsure_resolved_spam", "unsure -> spam"),
        ("unsure_resolved_ham", "unsure -> ham"),
    ):
        errors.plot(x, [d.get(kind, 0) for d in days], marker="o", ms=3, lw=1.2, label=name)
    errors.set_ylabel("messages per day")
    errors.set_title("spamd live accuracy: people's moves against spamd's verdicts")
    errors.legend(loc="upper left", fontsize="small")
    errors.grid(True, alpha=0.4)
    volume.bar(x - 0.2, [d.get("trained:spam", 0) for d in days], width=0.4, label="trained spam")
    volume.bar(x + 0.2, [d.get("trained:ham", 0) for d in days], width=0.4, label="trained ham")
    volume.plot(x, [d.get("scored", 0) for d in days], color="black", lw=1, label="scored")
    volume.set_ylabel("messages per day")
    volume.legend(loc="upper left", fontsize="small")
    volume.grid(True, alpha=0.4)
    step = max(1, len(days) // 12)
    volume.set_xticks(x[::step], labels[::step], rotation=30, ha="right", fontsize="small")
    fig.tight_layout()
    _save_figure(plt, fig, path, dpi=100)
