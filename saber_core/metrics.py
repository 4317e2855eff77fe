"""Retrieval metrics: nDCG@k with exponential gain on float ratings, per-domain means.

DCG@k = Σ_{r=1..min(k, n)} (2^rel_r − 1) / log2(r + 1), where rel_r is the rating of the
candidate at rank r (rank 1 first) when candidates are sorted by descending model score.
Ties in score keep candidate (column) order: the earlier column ranks first. NaN scores rank
last (after every real score, -inf included). IDCG@k is the DCG@k of the ratings sorted
descending over ALL n candidates; nDCG@k = DCG@k / IDCG@k, and 0.0 when IDCG@k = 0 (every
rating is 0). Ratings must be finite and ≥ 0 (the benchmark's are 0–5).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl


def _check(scores: np.ndarray, ratings: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    scores = np.asarray(scores, dtype=np.float64)
    ratings = np.asarray(ratings, dtype=np.float64)
    if scores.ndim != 2 or scores.shape != ratings.shape:
        raise ValueError(f"scores {scores.shape} and ratings {ratings.shape} must be equal (Q, n)")
    if not np.all(np.isfinite(ratings)) or np.any(ratings < 0):
        raise ValueError("ratings must be finite and >= 0")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return scores, ratings


def dcg_at_k(scores: np.ndarray, ratings: np.ndarray, k: int = 10) -> np.ndarray:
    """DCG@k per query, shape (Q,): Σ_{r ≤ k} (2^rel_r − 1) / log2(r + 1), ranked by score."""
    scores, ratings = _check(scores, ratings, k)
    # Stable ascending argsort of −score: descending score, ties by column, NaN (= −NaN) last.
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    gains = np.exp2(np.take_along_axis(ratings, order, axis=1)) - 1.0
    discounts = 1.0 / np.log2(np.arange(2, order.shape[1] + 2))
    return gains @ discounts


def ndcg_at_k(scores: np.ndarray, ratings: np.ndarray, k: int = 10) -> np.ndarray:
    """nDCG@k per query, shape (Q,): DCG@k / IDCG@k (IDCG over all n candidates); 0 if IDCG = 0."""
    dcg = dcg_at_k(scores, ratings, k)
    ideal = dcg_at_k(ratings, ratings, k)  # ranking by the ratings themselves is the ideal order
    out = np.zeros_like(dcg)
    np.divide(dcg, ideal, out=out, where=ideal > 0)
    return out


def mean_by_group(values: np.ndarray, groups: Sequence[str]) -> dict[str, float]:
    """Mean of ``values`` per group label (e.g. nDCG per domain), keys sorted; NaN propagates."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or len(values) != len(groups):
        raise ValueError(f"{values.shape} values for {len(groups)} group labels")
    frame = pl.DataFrame({"group": pl.Series(groups, dtype=pl.String), "value": values})
    means = frame.group_by("group").agg(pl.col("value").mean()).sort("group")
    return dict(zip(means["group"].to_list(), means["value"].to_list(), strict=True))


def mean_by_labels(values: np.ndarray, labels: Sequence[Sequence[str]]) -> dict[str, float]:
    """Mean of ``values`` per label, each value counted under every label of its set (a
    multi-domain query counts in each of its domains); keys sorted; NaN propagates."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or len(values) != len(labels):
        raise ValueError(f"{values.shape} values for {len(labels)} label sets")
    flat = [(label, v) for v, ls in zip(values.tolist(), labels, strict=True) for label in ls]
    if not flat:
        return {}
    names, items = zip(*flat, strict=True)
    return mean_by_group(np.array(items), list(names))
