"""SABER vs MTEB: rank correlation of the leaderboard's nDCG@10 with given MTEB scores.

``saber eval --mteb-scores FILE``: FILE is a CSV with a ``retriever`` column (a spec such as
``st:minilm`` or a display name) and a score column (``mteb_score``, else the second column).
Retrievers on the leaderboard (one setting, default the main one) are matched by spec first,
then by display name; with n ≥ 3 matches the result gives Spearman's ρ and Kendall's τ-b
(scipy.stats, two-sided p-values) between the SABER nDCG@10 and the MTEB score, as the
authors' analysis correlates SABER-Math with MTEB. Written next to the leaderboard:
``mteb_correlation.json``, ``mteb_correlation.csv`` and the scatter ``mteb_correlation.png``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from saber_eval.runner import METRIC

MIN_POINTS = 3


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
    """``spec, retriever, ndcg@10, mteb_score`` of the leaderboard rows the CSV names."""
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
                    METRIC: row[METRIC],
                    "mteb_score": score,
                }
            )
    schema = {
        "spec": pl.String,
        "retriever": pl.String,
        METRIC: pl.Float64,
        "mteb_score": pl.Float64,
    }
    return pl.DataFrame(rows, schema=schema).unique("spec", keep="first", maintain_order=True)


def correlate(matched: pl.DataFrame) -> dict[str, Any]:
    """Spearman ρ and Kendall τ-b (with p-values) of SABER nDCG@10 vs the MTEB score."""
    from scipy.stats import kendalltau, spearmanr

    n = matched.height
    if n < MIN_POINTS:
        raise ValueError(f"need ≥ {MIN_POINTS} retrievers on both sides, matched {n}")
    saber, mteb = matched[METRIC].to_numpy(), matched["mteb_score"].to_numpy()
    rho = spearmanr(saber, mteb)
    tau = kendalltau(saber, mteb)
    return {
        "n": n,
        "spearman": float(rho.statistic),
        "spearman_p": float(rho.pvalue),
        "kendall_tau_b": float(tau.statistic),
        "kendall_p": float(tau.pvalue),
    }


def write_correlation(
    board: pl.DataFrame, scores_csv: Path, folder: Path, setting: str
) -> tuple[dict[str, Any], dict[str, Path]]:
    """Match, correlate, and write the JSON, CSV and scatter plot into ``folder``."""
    from saber_eval.plots import mteb_scatter

    matched = match_scores(board, read_mteb_scores(scores_csv), setting)
    stats = correlate(matched) | {"setting": setting, "scores_file": str(scores_csv)}
    files = {
        "json": Path(folder) / "mteb_correlation.json",
        "csv": Path(folder) / "mteb_correlation.csv",
    }
    files["json"].write_text(json.dumps(stats | {"rows": matched.to_dicts()}, indent=2))
    matched.write_csv(files["csv"])
    title = (
        f"{setting}: Spearman ρ {stats['spearman']:.3f}, Kendall τ {stats['kendall_tau_b']:.3f} "
        f"(n = {stats['n']})"
    )
    files["plot"] = mteb_scatter(
        matched["retriever"].to_list(),
        matched[METRIC].to_list(),
        matched["mteb_score"].to_list(),
        title,
        Path(folder) / "mteb_correlation.png",
    )
    return stats, files
