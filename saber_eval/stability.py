"""Confidence on the leaderboard: bootstrap intervals per run and the rank-stability table.

For each setting and each metric (``ndcg@10``, ``ndcg@10_trec``) the per-query values of every
run in the eval folder (``runs/<slug>/<setting>.per_query.csv``, joined on the queries all of
them scored) form an (R, Q) matrix, resampled over queries by
:func:`saber_core.evaluation.confidence.confidence` — the same seeded resamples for every retriever
(paired) and, since Q and the seed are shared, for both metrics. Per run: the percentile 95%
interval. Per adjacent pair of the observed order: the difference, whether the intervals
overlap, the share of resamples in which the order flips, and the paired sign-flip
randomization test (seeded; :func:`saber_eval.significance.compare`): its raw p-value
``p_value``, the bootstrap interval of the difference and, over the family of the m = R − 1
adjacent pairs of one setting and metric, Holm's adjusted p-value ``p_holm``
(:func:`saber_core.evaluation.multiple_testing.holm`: sort the raw p ascending,
adj_(i) = max_{j ≤ i} min(1, (m − j + 1) p_(j))) with ``n_tests`` = m and
``significant`` = ``p_holm ≤ α``; per setting and metric: how often the #1 stays #1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from saber_core.evaluation.confidence import confidence
from saber_core.evaluation.multiple_testing import holm
from saber_eval.runner import METRIC, TREC_METRIC, retriever_slug
from saber_eval.significance import compare

METRICS = (METRIC, TREC_METRIC)
N_RESAMPLES = 10_000
ALPHA = 0.05


@dataclass(frozen=True)
class BootstrapSettings:
    """How the intervals were computed (recorded with the leaderboard)."""

    n_resamples: int = N_RESAMPLES
    seed: int = 0
    alpha: float = ALPHA
    n_permutations: int = 10_000

    def as_dict(self) -> dict:
        """JSON-ready, with what is resampled."""
        return {
            "n_resamples": self.n_resamples,
            "seed": self.seed,
            "alpha": self.alpha,
            "n_permutations": self.n_permutations,
            "unit": "query",
            "paired": True,
            "interval": "percentile",
        }


@dataclass
class BoardConfidence:
    """Interval columns per (spec, setting), the rank-stability rows, #1 shares."""

    intervals: pl.DataFrame
    stability: pl.DataFrame
    top_stays: list[dict] = field(default_factory=list)


def _per_query(folder: Path, spec: str, setting: str, metric: str) -> pl.DataFrame | None:
    path = Path(folder) / "runs" / retriever_slug(spec) / f"{setting}.per_query.csv"
    if not path.exists():
        return None
    frame = pl.read_csv(path, schema_overrides={"query_id": pl.String})
    if metric not in frame.columns:
        return None  # a run stored before this metric existed
    return frame.select("query_id", pl.col(metric).alias(spec))


def value_matrix(
    folder: Path, specs: list[str], setting: str, metric: str
) -> tuple[list[str], pl.DataFrame]:
    """(specs that have the metric, ``query_id`` + one column per spec over shared queries)."""
    frames = {s: _per_query(folder, s, setting, metric) for s in specs}
    kept = [s for s in specs if frames[s] is not None]
    if not kept:
        return [], pl.DataFrame()
    joined = frames[kept[0]]
    for spec in kept[1:]:
        joined = joined.join(frames[spec], on="query_id", how="inner")
    return kept, joined.sort("query_id")


def _empty_intervals() -> pl.DataFrame:
    schema = {"spec": pl.String, "setting": pl.String}
    for metric in METRICS:
        schema |= {f"{metric}_ci_low": pl.Float64, f"{metric}_ci_high": pl.Float64}
    return pl.DataFrame(schema=schema)


STABILITY_SCHEMA = {
    "setting": pl.String,
    "metric": pl.String,
    "rank": pl.Int64,
    "spec": pl.String,
    "next_spec": pl.String,
    "mean": pl.Float64,
    "next_mean": pl.Float64,
    "difference": pl.Float64,
    "ci_overlap": pl.Boolean,
    "flip_share": pl.Float64,
    "p_value": pl.Float64,
    "p_holm": pl.Float64,
    "n_tests": pl.Int64,
    "significant": pl.Boolean,
    "difference_ci_low": pl.Float64,
    "difference_ci_high": pl.Float64,
    "n_queries": pl.Int64,
}


def board_confidence(
    folder: Path, runs: list[tuple[str, str]], settings: BootstrapSettings
) -> BoardConfidence:
    """Intervals and rank stability of every (spec, setting) run in an eval folder."""
    rows: dict[tuple[str, str], dict] = {}
    pairs: list[dict] = []
    tops: list[dict] = []
    for setting in dict.fromkeys(s for _, s in runs):
        specs = [spec for spec, st in runs if st == setting]
        for metric in METRICS:
            kept, matrix = value_matrix(folder, specs, setting, metric)
            if not kept or matrix.height == 0:
                continue
            values = matrix.select(kept).to_numpy().T
            result = confidence(values, settings.n_resamples, settings.seed, settings.alpha)
            for i, spec in enumerate(kept):
                row = rows.setdefault((spec, setting), {"spec": spec, "setting": setting})
                row[f"{metric}_ci_low"] = float(result.intervals[i, 0])
                row[f"{metric}_ci_high"] = float(result.intervals[i, 1])
            family: list[dict] = []
            for pair in result.pairs:
                upper, lower = kept[pair.upper], kept[pair.lower]
                test = compare(
                    upper,
                    lower,
                    setting,
                    values[pair.upper],
                    values[pair.lower],
                    n_permutations=settings.n_permutations,
                    seed=settings.seed,
                    alpha=settings.alpha,
                )
                family.append(
                    {
                        "setting": setting,
                        "metric": metric,
                        "rank": pair.rank,
                        "spec": upper,
                        "next_spec": lower,
                        "mean": float(result.means[pair.upper]),
                        "next_mean": float(result.means[pair.lower]),
                        "difference": pair.difference,
                        "ci_overlap": pair.overlap,
                        "flip_share": pair.flip_share,
                        "p_value": test.p_value,
                        "difference_ci_low": test.ci_low,
                        "difference_ci_high": test.ci_high,
                        "n_queries": matrix.height,
                    }
                )
            adjusted = holm([entry["p_value"] for entry in family])
            for entry, p_holm in zip(family, adjusted.tolist(), strict=True):
                entry |= {
                    "p_holm": p_holm,
                    "n_tests": len(family),
                    "significant": p_holm <= settings.alpha,
                }
            pairs += family
            tops.append(
                {
                    "setting": setting,
                    "metric": metric,
                    "top": kept[int(result.order[0])],
                    "top_stays": result.top_stays,
                    "n_systems": len(kept),
                    "n_queries": matrix.height,
                }
            )
    intervals = _empty_intervals()
    if rows:
        intervals = pl.concat(
            [intervals, pl.DataFrame(list(rows.values()))], how="diagonal_relaxed"
        )
    return BoardConfidence(
        intervals=intervals, stability=pl.DataFrame(pairs, schema=STABILITY_SCHEMA), top_stays=tops
    )
