"""SABER vs MTEB: correlation of the leaderboard's nDCG@10 with given MTEB scores.

``saber eval --mteb-scores FILE [--since DATE]``: FILE is a CSV with a ``retriever`` column (a
spec such as ``st:minilm`` or a display name) and a score column (``mteb_score``, else the
second column). Retrievers on the leaderboard (one setting, default the main one) are matched
by spec first, then by display name. For the n matched models, with x = MTEB score and
y = SABER nDCG@10 (scipy.stats, two-sided p-values):

* Pearson r = Σ (x − x̄)(y − ȳ) / √(Σ (x − x̄)² Σ (y − ȳ)²), the figure the paper reports;
* Spearman ρ = Pearson r of the ranks (ties get their mean rank);
* Kendall τ-b = (C − D) / √((C + D + T_x)(C + D + T_y)) over the model pairs (C concordant,
  D discordant, T_x / T_y tied only in x / y).

Two subsets: every matched model, and (with ``since``) the models whose registry
``release_date`` is on or after that date; models without a release date are left out of the
second subset and counted. A subset of fewer than 3 models, or with one side constant, gets no
coefficients and a ``note`` saying why. Written next to the leaderboard:
``mteb_correlation.json`` (both subsets), ``mteb_correlation.csv`` (the matched rows) and the
scatter ``mteb_correlation.png`` (the since-subset filled, the other models hollow).
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from saber_eval.runner import METRIC

MIN_POINTS = 3
COEFFICIENTS = ("pearson_r", "pearson_p", "spearman", "spearman_p", "kendall_tau_b", "kendall_p")
SINCE_COLUMN = "in_since_subset"


def read_mteb_scores(path: Path) -> pl.DataFrame:
    """``retriever, mteb_score`` from a CSV (score column ``mteb_score`` or the second one)."""
    frame = pl.read_csv(path)
    if "retriever" not in frame.columns or frame.width < 2:
        raise ValueError(f"{path}: needs a 'retriever' column and a score column")
    score = "mteb_score" if "mteb_score" in frame.columns else frame.columns[1]
    if score == "retriever":
        score = frame.columns[0]
    return frame.select(
        pl.col("retriever").cast(pl.String), pl.col(score).cast(pl.Float64).alias("mteb_score")
    ).drop_nulls()


def match_scores(board: pl.DataFrame, mteb: pl.DataFrame, setting: str) -> pl.DataFrame:
    """``spec, retriever, release_date, ndcg@10, mteb_score`` of the leaderboard rows the CSV
    names."""
    part = board.filter(pl.col("setting") == setting)
    by_name = {**dict(zip(part["retriever"], part["spec"], strict=True))}
    by_name |= {s: s for s in part["spec"]}
    rows = []
    for name, score in mteb.iter_rows():
        spec = by_name.get(name)
        if spec is not None:
            row = part.filter(pl.col("spec") == spec).row(0, named=True)
            rows.append(
                {
                    "spec": spec,
                    "retriever": row["retriever"],
                    "release_date": row["release_date"],
                    METRIC: row[METRIC],
                    "mteb_score": score,
                }
            )
    schema = {
        "spec": pl.String,
        "retriever": pl.String,
        "release_date": pl.Date,
        METRIC: pl.Float64,
        "mteb_score": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema).unique("spec", keep="first", maintain_order=True)


def correlate(matched: pl.DataFrame) -> dict[str, Any]:
    """``n``, Pearson r, Spearman ρ, Kendall τ-b and their p-values (module docstring) of SABER
    nDCG@10 vs the MTEB score; coefficients None and a ``note`` when they are undefined."""
    from scipy.stats import kendalltau, pearsonr, spearmanr

    n = matched.height
    out: dict[str, Any] = {"n": n, **dict.fromkeys(COEFFICIENTS), "note": ""}
    if n < MIN_POINTS:
        out["note"] = f"fewer than {MIN_POINTS} models, no correlation"
        return out
    saber, mteb = matched[METRIC].to_numpy(), matched["mteb_score"].to_numpy()
    constant = [side for side, v in (("SABER", saber), ("MTEB", mteb)) if np.ptp(v) == 0]
    if constant:
        out["note"] = f"every {' and '.join(constant)} score is the same, no correlation"
        return out
    r, rho, tau = pearsonr(mteb, saber), spearmanr(mteb, saber), kendalltau(mteb, saber)
    values = (r.statistic, r.pvalue, rho.statistic, rho.pvalue, tau.statistic, tau.pvalue)
    return out | {k: float(v) for k, v in zip(COEFFICIENTS, values, strict=True)}


def correlation_subsets(matched: pl.DataFrame, since: date | None) -> list[dict[str, Any]]:
    """The ``all`` subset and (with ``since``) the models released on or after it, each with
    its specs and :func:`correlate`; the since-subset counts the models it leaves out."""
    subsets = [
        {
            "subset": "all",
            "label": "all models",
            "specs": matched["spec"].to_list(),
            **correlate(matched),
        }
    ]
    if since is not None:
        dated = matched.filter(pl.col("release_date").is_not_null())
        part = dated.filter(pl.col("release_date") >= since)
        subsets.append(
            {
                "subset": "since",
                "label": f"released since {since.isoformat()}",
                "since": since.isoformat(),
                "specs": part["spec"].to_list(),
                **correlate(part),
                "excluded_no_release_date": matched.height - dated.height,
                "excluded_released_before": dated.height - part.height,
            }
        )
    return subsets


def describe(subset: dict[str, Any], setting: str) -> list[str]:
    """The printed lines of a subset: n and the three coefficients (or why there are none),
    then, for the since-subset, how many models it left out."""
    head = f"SABER {METRIC} vs MTEB ({setting}), {subset['label']}: n = {subset['n']}"
    if subset["note"]:
        lines = [f"{head}: {subset['note']}"]
    else:
        lines = [
            f"{head}: Pearson r {subset['pearson_r']:.3f} (p {subset['pearson_p']:.3g}), "
            f"Spearman ρ {subset['spearman']:.3f} (p {subset['spearman_p']:.3g}), "
            f"Kendall τ-b {subset['kendall_tau_b']:.3f} (p {subset['kendall_p']:.3g})"
        ]
    if subset["subset"] == "since":
        lines.append(
            f"  left out of the since-{subset['since']} subset: "
            f"{subset['excluded_no_release_date']} model(s) without a release_date in the "
            f"registry, {subset['excluded_released_before']} released before"
        )
    return lines


def _plot_title(subsets: list[dict[str, Any]], setting: str) -> str:
    lines = [setting]
    for s in subsets:
        figures = s["note"] or (
            f"r {s['pearson_r']:.2f}, ρ {s['spearman']:.2f}, τ-b {s['kendall_tau_b']:.2f}"
        )
        lines.append(f"{s['label']} (n = {s['n']}): {figures}")
    return "\n".join(lines)


def write_correlation(
    board: pl.DataFrame, scores_csv: Path, folder: Path, setting: str, since: date | None = None
) -> tuple[dict[str, Any], dict[str, Path]]:
    """Match, correlate both subsets, and write the JSON, CSV and scatter plot into
    ``folder``."""
    from saber_eval.plots import mteb_scatter

    matched = match_scores(board, read_mteb_scores(scores_csv), setting)
    subsets = correlation_subsets(matched, since)
    if since is not None:
        in_since = pl.col("spec").is_in(subsets[1]["specs"])
        matched = matched.with_columns(in_since.alias(SINCE_COLUMN))
    stats = {
        "setting": setting,
        "scores_file": str(scores_csv),
        "since": since.isoformat() if since else None,
        "subsets": subsets,
    }
    files = {
        "json": Path(folder) / "mteb_correlation.json",
        "csv": Path(folder) / "mteb_correlation.csv",
    }
    rows = matched.with_columns(pl.col("release_date").cast(pl.String)).to_dicts()
    files["json"].write_text(json.dumps(stats | {"rows": rows}, indent=2))
    matched.write_csv(files["csv"])
    files["plot"] = mteb_scatter(
        matched["retriever"].to_list(),
        matched[METRIC].to_list(),
        matched["mteb_score"].to_list(),
        _plot_title(subsets, setting),
        Path(folder) / "mteb_correlation.png",
        highlight=matched[SINCE_COLUMN].to_list() if since is not None else None,
    )
    return stats, files
