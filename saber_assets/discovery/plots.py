"""Plots of the discovery group."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import polars as pl


def histogram_plot(table: pl.DataFrame, path: Path) -> Path:
    """Both signals' distributions over all ordered pairs (log counts), thresholds marked."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, signal in zip(axes, ("bma", "jaccard"), strict=True):
        part = table.filter(pl.col("signal") == signal).sort("value")
        ax.step(part["value"], part["count"], where="mid", linewidth=0.8)
        threshold = part["threshold"][0] if part.height else None
        if threshold is not None:
            ax.axvline(
                threshold, color="tab:red", linestyle="--", label=f"threshold {threshold:.4f}"
            )
            ax.legend(fontsize=8)
        ax.set_yscale("log")
        ax.set_xlabel(f"{signal} (float16 value)")
        ax.set_ylabel("ordered pairs")
        ax.set_title(f"{signal}: all ordered pairs")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
