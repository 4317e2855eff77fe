"""The build report: a Markdown page and plots that state what made the labels."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import polars as pl

GROUP_COLOURS = {"topic": "tab:blue", "summary": "tab:orange", "both": "tab:green"}


def ratings_plot(ratings: pl.DataFrame, path: Path) -> Path:
    """Histogram of the ratings per pool group."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for group, colour in GROUP_COLOURS.items():
        values = ratings.filter(pl.col("group") == group)["rating"].to_numpy()
        ax.hist(
            values, bins=20, range=(0, 5), alpha=0.6, label=f"{group} ({len(values)})", color=colour
        )
    ax.set_xlabel("Bradley–Terry rating (0–5)")
    ax.set_ylabel("candidates")
    ax.set_title("Ratings by pool group")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def signals_plot(pools: pl.DataFrame, path: Path) -> Path:
    """The two relevance signals of every pool candidate, coloured by group."""
    fig, ax = plt.subplots(figsize=(5, 4))
    for group, colour in GROUP_COLOURS.items():
        part = pools.filter(pl.col("group") == group)
        ax.scatter(part["bma"], part["jaccard"], s=8, alpha=0.6, label=group, color=colour)
    ax.set_xlabel("topic BMA-Lin")
    ax.set_ylabel("summary Jaccard")
    ax.set_title("Candidate pools: the two relevance signals")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def judge_warning(provenance: dict[str, str | None]) -> str:
    """The report's warning naming the judge that made the labels."""
    return (
        f"Labels were made by the judge `{provenance['judge_kind']}` "
        f"({provenance['judge_model']}). A retriever that shares the judge's model is favoured by "
        "these labels: do not rank such a retriever on this build."
    )


def report_markdown(
    profile: str, warning: str, items: list[tuple[str, str, str]], plots: dict[str, Path]
) -> str:
    """``report.md``: one table per section of ``(section, item, value)`` rows, then plots."""
    lines = ["# SABER build report", "", f"Profile: `{profile}`", "", f"> {warning}"]
    section = None
    for sec, item, value in items:
        if sec != section:
            lines += ["", f"## {sec.capitalize()}", "", "| item | value |", "|---|---|"]
            section = sec
        lines.append(f"| {item} | {value} |")
    lines += ["", *[f"![{k}]({p.name})" for k, p in plots.items()], ""]
    return "\n".join(lines)
