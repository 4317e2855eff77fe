"""The validity report's plots and Markdown (``validity.md``, ``validity_*.png``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import polars as pl


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def triage_plot(triage: pl.DataFrame, path: Path) -> Path:
    """Judge calls saved vs Kendall τ to the full-judge ratings, one point per threshold."""
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(triage["llm_calls_saved"], triage["tau_to_full_judge"], "o-")
    for row in triage.iter_rows(named=True):
        ax.annotate(f"|p−½|≥{row['threshold']}", (row["llm_calls_saved"], row["tau_to_full_judge"]))
    ax.set_xlabel("judge calls saved by triage")
    ax.set_ylabel("Kendall τ to full-judge ratings")
    ax.set_title("Cheap-judge triage (replayed on this build)")
    return _save(fig, path)


def round_robin_plot(rr: pl.DataFrame, path: Path) -> Path:
    """Kendall τ of Swiss-BT vs round-robin BT per sampled query."""
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.bar(range(rr.height), rr["kendall_tau"], tick_label=rr["query_id"].to_list())
    ax.set_ylabel("Kendall τ, Swiss-BT vs round-robin BT")
    ax.set_ylim(0, 1)
    ax.tick_params(axis="x", labelrotation=45, labelsize=7)
    return _save(fig, path)


def recipe_plot(
    shared: pl.DataFrame,
    ndcg: pl.DataFrame,
    own: str,
    other: str,
    specs: Sequence[str],
    path: Path,
) -> Path:
    """Left: ratings of candidates in both recipes' pools; right: nDCG@10 per retriever and
    recipe."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8))
    left.scatter(shared[f"rating_{own}"], shared[f"rating_{other}"], s=10, alpha=0.6)
    left.plot([0, 5], [0, 5], color="grey", linewidth=0.8)
    left.set_xlabel(f"rating, {own}-summary pools (this build)")
    left.set_ylabel(f"rating, {other}-summary pools")
    left.set_title("candidates in both pools")
    means = ndcg.group_by("retriever", "summary_origin").agg(pl.col("ndcg@10").mean())
    for k, origin in enumerate((own, other)):
        values = [
            means.filter((pl.col("retriever") == s) & (pl.col("summary_origin") == origin))[
                "ndcg@10"
            ].item()
            for s in specs
        ]
        right.bar(np.arange(len(specs)) + 0.4 * k, values, width=0.4, label=f"{origin} summaries")
    right.set_xticks(np.arange(len(specs)) + 0.2, specs)
    right.set_ylabel("nDCG@10 (statement → full)")
    right.set_ylim(0, 1)
    right.legend(fontsize=8)
    return _save(fig, path)


def _cell(value: Any) -> str:
    """A report cell: floats to 3 decimals, dicts as ``key: value`` lists."""
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_cell(v)}" for k, v in value.items())
    return str(value)


def style_markdown(style: dict[str, Any]) -> list[str]:
    """The "Style" section: each coefficient with its 95% interval and variance share, the
    features' notes, and the plain vs style-free ranking (docs/validity.md "Style")."""
    applied = "used by the ratings" if style["style_control"] else "not used (style_control off)"
    lines = [
        "",
        "## Style",
        "",
        f"Style-controlled Bradley–Terry, {applied}; β in logits per SD of the feature.",
        "",
        "| feature | β | 95% interval | variance share |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {name} | {c['beta']:.3f} | [{c['lower']:.3f}, {c['upper']:.3f}] | "
        f"{c['variance_share']:.1%} |"
        for name, c in style["coefficients"].items()
    ]
    lines += ["", "| figure | value |", "|---|---|"]
    skip = ("coefficients", "style_control")
    lines += [f"| {k} | {_cell(v)} |" for k, v in style.items() if k not in skip]
    return lines


def validity_markdown(
    figures: dict[str, Any],
    triage: pl.DataFrame,
    recipe_ndcg: dict[str, float],
    plots: dict[str, Path],
) -> str:
    """``validity.md``: the figures table, the triage table, the recipe nDCG table, the style
    section (when ``figures`` has ``style``), the plots."""
    lines = ["# Validity report", "", "| figure | value |", "|---|---|"]
    lines += [f"| {k} | {_cell(v)} |" for k, v in figures.items() if k not in ("triage", "style")]
    lines += [
        "",
        "## Triage (replayed)",
        "",
        "| |p−½| ≥ | calls saved | τ to full judge |",
        "|---|---|---|",
    ]
    lines += [
        f"| {r['threshold']} | {r['llm_calls_saved']:.1%} | {r['tau_to_full_judge']:.3f} |"
        for r in triage.iter_rows(named=True)
    ]
    if recipe_ndcg:
        lines += [
            "",
            "## Recipe sensitivity",
            "",
            "| retriever / summaries | nDCG@10 |",
            "|---|---|",
        ]
        lines += [f"| {k} | {v:.3f} |" for k, v in sorted(recipe_ndcg.items())]
    if "style" in figures:
        lines += style_markdown(figures["style"])
    lines += ["", *[f"![{k}]({p.name})" for k, p in plots.items()], ""]
    return "\n".join(lines)
