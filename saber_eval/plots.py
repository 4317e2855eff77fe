"""Leaderboard plots (matplotlib, Agg, PNG) and the quality–latency Pareto frontier.

* ``quality_latency.png`` — nDCG@10 vs median latency per reranking task (log x), one panel per
  setting, points coloured by kind, each kind's Pareto frontier drawn as a step line;
* ``per_domain.png`` — per-domain nDCG@10 bars of every retriever (main setting);
* ``release_date.png`` — nDCG@10 vs release date for retrievers whose date is known (main
  setting); not written when no date is known;
With more than :data:`MAX_NAMED` retrievers the scatter plots number their points and list the
numbers with the names in a key beside the plot (labels that cannot overlap), and the per-domain
plot becomes a heatmap (retrievers × domains, value in each cell).

* ``confidence.png`` — nDCG@10 and nDCG@10_trec of every retriever with their paired bootstrap
  95% intervals as error bars (main setting), retrievers in leaderboard order;
* ``mteb_correlation.png`` — SABER nDCG@10 vs a given MTEB score per retriever
  (:func:`mteb_scatter`, ``saber eval --mteb-scores``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from saber_eval.benchmark import MAIN_SETTING, SETTINGS
from saber_eval.registry import KINDS
from saber_eval.runner import METRIC, TREC_METRIC

KIND_COLOURS = {"single-pass": "tab:blue", "reranker": "tab:red"}
MIN_LATENCY = 1e-6  # log axis floor (seconds)
MAX_NAMED = 12  # more retrievers than this: numbered points and a key beside the plot


def point_labels(names: Sequence[str]) -> dict[str, str]:
    """What each retriever's point is labelled with: its name, or its number (1-based, in
    the given order) when there are more than :data:`MAX_NAMED`."""
    unique = list(dict.fromkeys(names))
    if len(unique) <= MAX_NAMED:
        return {n: n for n in unique}
    return {n: str(i) for i, n in enumerate(unique, start=1)}


def key_panel(ax, labels: dict[str, str]) -> None:
    """The numbers and names of the points, in columns of 25, on an axis of their own."""
    ax.axis("off")
    rows = [f"{number:>2}  {name}" for name, number in labels.items()]
    columns = [rows[i : i + 25] for i in range(0, len(rows), 25)]
    for c, column in enumerate(columns):
        ax.text(
            c / len(columns),
            1.0,
            "\n".join(column),
            va="top",
            ha="left",
            fontsize=6.5,
            family="monospace",
            transform=ax.transAxes,
        )


def figure_with_key(plt, labels: dict[str, str], panels: int, size: tuple[float, float]):
    """(figure, data axes): a key column on the right when the points are numbered."""
    numbered = any(k != v for k, v in labels.items())
    if not numbered:
        fig, axes = plt.subplots(1, panels, figsize=size, sharey=True, squeeze=False)
        return fig, list(axes[0])
    width = 2.6 * max(1, -(-len(labels) // 25))
    fig = plt.figure(figsize=(size[0] + width, max(size[1], 4.5)))
    grid = fig.add_gridspec(1, panels + 1, width_ratios=[size[0] / panels] * panels + [width])
    axes = [fig.add_subplot(grid[0, i]) for i in range(panels)]
    for ax in axes[1:]:
        ax.sharey(axes[0])
    key_panel(fig.add_subplot(grid[0, panels]), labels)
    return fig, axes


def pareto_frontier(latency: Sequence[float], quality: Sequence[float]) -> np.ndarray:
    """Boolean mask of the non-dominated points (low latency and high quality are better).

    Point p is dominated iff some q has latency_q ≤ latency_p and quality_q ≥ quality_p with at
    least one strict; identical points do not dominate each other. NaN points are never on it.
    One sort, O(n log n): sweep by latency, keeping the best quality of strictly faster points.
    """
    lat = np.asarray(latency, dtype=np.float64)
    qual = np.asarray(quality, dtype=np.float64)
    mask = np.zeros(len(lat), dtype=bool)
    valid = np.flatnonzero(np.isfinite(lat) & np.isfinite(qual))
    order = valid[np.lexsort((-qual[valid], lat[valid]))]
    best_faster = -np.inf
    start = 0
    while start < len(order):
        stop = start
        while stop < len(order) and lat[order[stop]] == lat[order[start]]:
            stop += 1
        group = order[start:stop]
        top = qual[group].max()
        if top > best_faster:
            mask[group[qual[group] == top]] = True
        best_faster = max(best_faster, top)
        start = stop
    return mask


def main_setting(frame: pl.DataFrame) -> str:
    """The main setting when present, else the first setting on the board."""
    present = frame["setting"].unique().to_list()
    if MAIN_SETTING in present:
        return MAIN_SETTING
    return next(s for s in [*SETTINGS, *sorted(present)] if s in present)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def quality_latency_plot(frame: pl.DataFrame, path: Path) -> Path:
    """nDCG@10 vs median latency (log x), frontier per kind, one panel per setting."""
    plt = _pyplot()
    settings = [s for s in SETTINGS if s in set(frame["setting"])] or sorted(set(frame["setting"]))
    labels = point_labels(frame["retriever"].to_list())
    fig, axes = figure_with_key(plt, labels, len(settings), (5.5 * len(settings), 4.2))
    for ax, setting in zip(axes, settings, strict=True):
        part = frame.filter(pl.col("setting") == setting)
        for kind in KINDS:
            rows = part.filter(pl.col("kind") == kind)
            if rows.height == 0:
                continue
            lat = np.maximum(rows["median_latency_s"].to_numpy(), MIN_LATENCY)
            qual = rows[METRIC].to_numpy()
            colour = KIND_COLOURS.get(kind, "tab:gray")
            ax.scatter(lat, qual, color=colour, label=kind, zorder=3)
            for x, y, name in zip(lat, qual, rows["retriever"], strict=True):
                ax.annotate(
                    labels[name], (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points"
                )
            on = pareto_frontier(lat, qual)
            order = np.argsort(lat[on])
            ax.plot(
                lat[on][order],
                qual[on][order],
                drawstyle="steps-post",
                color=colour,
                alpha=0.6,
                label=f"{kind} frontier",
            )
        ax.set_xscale("log")
        ax.margins(x=0.3, y=0.1)
        ax.set_xlabel("median latency per reranking task (s, log)")
        ax.set_title(setting)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(METRIC)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def per_domain_plot(frame: pl.DataFrame, domains: list[str], path: Path) -> Path:
    """Grouped bars: per-domain nDCG@10 of each retriever (main setting)."""
    plt = _pyplot()
    setting = main_setting(frame)
    part = frame.filter(pl.col("setting") == setting)
    if part.height > MAX_NAMED:
        return per_domain_heatmap(plt, part, domains, setting, path)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(domains) + 2), 4))
    width = 0.8 / max(part.height, 1)
    x = np.arange(len(domains))
    for i, row in enumerate(part.iter_rows(named=True)):
        values = [row[d] if row[d] is not None else np.nan for d in domains]
        ax.bar(x + i * width - 0.4 + width / 2, values, width, label=row["retriever"])
    ax.set_xticks(x, domains, rotation=20)
    ax.set_ylim(0, 1.2)  # room for the legend above the bars (nDCG ≤ 1)
    ax.set_ylabel(METRIC)
    ax.set_title(f"{METRIC} per domain ({setting})")
    ax.legend(fontsize=7, loc="upper center", ncol=min(3, max(part.height, 1)))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def per_domain_heatmap(plt, part: pl.DataFrame, domains: list[str], setting: str, path: Path):
    """Retrievers (rows, leaderboard order) × domains, nDCG@10 written in each cell."""
    values = np.array(
        [[np.nan if r[d] is None else r[d] for d in domains] for r in part.iter_rows(named=True)],
        dtype=float,
    )
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(domains) + 4), 0.28 * part.height + 1.5))
    image = ax.imshow(values, aspect="auto", cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(len(domains)), domains, rotation=20)
    ax.set_yticks(range(part.height), part["retriever"].to_list(), fontsize=6.5)
    for (i, j), v in np.ndenumerate(values):
        if np.isfinite(v):
            ax.text(
                j,
                i,
                f"{v:.2f}",
                ha="center",
                va="center",
                fontsize=6,
                color="white" if v < 0.6 else "black",
            )
    fig.colorbar(image, ax=ax, label=METRIC)
    ax.set_title(f"{METRIC} per domain ({setting})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def release_date_plot(frame: pl.DataFrame, path: Path) -> Path | None:
    """nDCG@10 vs release date (main setting), retrievers with a known date only; else None."""
    part = frame.filter(
        (pl.col("setting") == main_setting(frame)) & pl.col("release_date").is_not_null()
    )
    if part.height == 0:
        return None
    plt = _pyplot()
    labels = point_labels(part["retriever"].to_list())
    fig, (ax,) = figure_with_key(plt, labels, 1, (6, 4))
    for kind in KINDS:
        rows = part.filter(pl.col("kind") == kind)
        if rows.height:
            ax.scatter(
                rows["release_date"].to_list(),
                rows[METRIC].to_numpy(),
                color=KIND_COLOURS.get(kind),
                label=kind,
            )
            for d, y, name in zip(
                rows["release_date"], rows[METRIC], rows["retriever"], strict=True
            ):
                ax.annotate(
                    labels[name], (d, y), fontsize=7, xytext=(4, 3), textcoords="offset points"
                )
    ax.set_xlabel("release date")
    ax.set_ylabel(METRIC)
    ax.set_title(f"{METRIC} vs release date ({main_setting(frame)})")
    ax.legend(fontsize=7)
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def confidence_plot(frame: pl.DataFrame, path: Path) -> Path:
    """Both nDCG columns with 95% error bars (main setting), one row per retriever."""
    plt = _pyplot()
    setting = main_setting(frame)
    part = frame.filter(pl.col("setting") == setting)
    metrics = [m for m in (METRIC, TREC_METRIC) if part[m].null_count() < part.height]
    fig, axes = plt.subplots(
        1, len(metrics), figsize=(5 * len(metrics), 0.45 * part.height + 1.6), squeeze=False
    )
    y = np.arange(part.height)[::-1]
    for ax, metric in zip(axes[0], metrics, strict=True):
        value = part[metric].fill_null(np.nan).to_numpy()
        low = part[f"{metric}_ci_low"].fill_null(np.nan).to_numpy()
        high = part[f"{metric}_ci_high"].fill_null(np.nan).to_numpy()
        err = np.nan_to_num(np.vstack([value - low, high - value]), nan=0.0)
        ax.errorbar(value, y, xerr=err, fmt="o", capsize=4, color="tab:blue")
        ax.set_yticks(y, part["retriever"].to_list())
        ax.set_xlim(0, 1.02)
        ax.set_xlabel(f"{metric} (95% bootstrap interval)")
        ax.grid(alpha=0.3, axis="x")
    axes[0][0].set_title(f"{setting}: paired bootstrap over queries", fontsize=9, loc="left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def mteb_scatter(
    names: Sequence[str],
    saber: Sequence[float],
    mteb: Sequence[float],
    title: str,
    path: Path,
    highlight: Sequence[bool] | None = None,
) -> Path:
    """SABER nDCG@10 (y) vs MTEB score (x), one labelled point per retriever; with
    ``highlight`` the flagged points (the since-subset) filled and the others hollow."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4.6))
    flags = np.ones(len(names), bool) if highlight is None else np.asarray(highlight, bool)
    x, y = np.asarray(mteb, float), np.asarray(saber, float)
    ax.scatter(x[flags], y[flags], color="tab:blue", zorder=3)
    if not flags.all():
        ax.scatter(x[~flags], y[~flags], facecolors="none", edgecolors="tab:blue", zorder=3)
    for xi, yi, name in zip(x, y, names, strict=True):
        ax.annotate(name, (xi, yi), fontsize=7, xytext=(4, 3), textcoords="offset points")
    ax.set_xlabel("MTEB score (given)")
    ax.set_ylabel(f"SABER {METRIC}")
    ax.set_title(title, fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
