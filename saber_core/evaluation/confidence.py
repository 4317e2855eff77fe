"""Paired bootstrap over queries: per-system confidence intervals and rank stability.

``values`` is an (R, Q) matrix: one row per system (retriever), one column per query, the same
queries for every row. Resample b draws Q query indices with replacement,
``idx_b = default_rng(seed).integers(0, Q, (B, Q))[b]``, and **every** system is scored on the
same resample (paired), so

    mean*_{b,r} = (1/Q) Σ_j values[r, idx_b[j]]

* interval of system r: the (α/2, 1 − α/2) percentiles (numpy's linear interpolation) of
  mean*_{·,r} — the percentile bootstrap;
* rank stability, systems ordered by observed mean (descending; ties by row order): for each
  adjacent pair (a above b) whether their intervals overlap (lo_a ≤ hi_b and lo_b ≤ hi_a) and
  the flip share = (#{b: mean*_b > mean*_a} + ½ #{b: mean*_b = mean*_a}) / B; and the share of
  resamples in which the observed #1 is still the best (a resample where k systems tie for
  the best counts 1/k for each of them).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np

CHUNK = 1000


def bootstrap_indices(n_queries: int, n_resamples: int, seed: int) -> np.ndarray:
    """(B, Q) query indices drawn with replacement from ``default_rng(seed)``."""
    if n_queries < 1 or n_resamples < 1:
        raise ValueError(f"need ≥ 1 query and resample, got {n_queries}, {n_resamples}")
    return np.random.default_rng(seed).integers(0, n_queries, size=(n_resamples, n_queries))


def bootstrap_means(values: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """(B, R) resampled means: mean*_{b,r} = mean_j values[r, indices[b, j]]."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 2 or not np.all(np.isfinite(values)):
        raise ValueError("values must be a finite (systems, queries) matrix")
    if indices.ndim != 2 or indices.shape[1] != values.shape[1]:
        raise ValueError(f"indices {indices.shape} do not resample {values.shape[1]} queries")
    out = np.empty((indices.shape[0], values.shape[0]))
    for start in range(0, indices.shape[0], CHUNK):  # bounded memory: R × CHUNK × Q
        block = indices[start : start + CHUNK]
        out[start : start + len(block)] = values[:, block].mean(axis=2).T
    return out


def percentile_intervals(means: np.ndarray, alpha: float = 0.05) -> np.ndarray:
    """(R, 2) percentile intervals (α/2, 1 − α/2) of the resampled means of each system."""
    return np.quantile(means, [alpha / 2, 1 - alpha / 2], axis=0).T


@dataclass(frozen=True)
class PairStability:
    """Two systems adjacent in the observed order (``upper`` ranked just above ``lower``)."""

    rank: int
    upper: int
    lower: int
    difference: float
    overlap: bool
    flip_share: float


@dataclass(frozen=True)
class Confidence:
    """Observed means, intervals, observed order, adjacent-pair stability, top-1 share."""

    means: np.ndarray
    intervals: np.ndarray
    order: np.ndarray
    pairs: tuple[PairStability, ...]
    top_stays: float
    n_resamples: int
    seed: int
    alpha: float


def flip_share(means: np.ndarray, upper: int, lower: int) -> float:
    """Share of resamples with mean*_lower > mean*_upper (ties count ½)."""
    a, b = means[:, upper], means[:, lower]
    return float((np.sum(b > a) + 0.5 * np.sum(b == a)) / len(a))


def top_share(means: np.ndarray, system: int) -> float:
    """Share of resamples in which ``system`` has the highest mean (k-way ties count 1/k)."""
    best = means.max(axis=1, keepdims=True)
    at_top = means == best
    return float(np.mean(at_top[:, system] / at_top.sum(axis=1)))


def confidence(
    values: np.ndarray, n_resamples: int = 10_000, seed: int = 0, alpha: float = 0.05
) -> Confidence:
    """Paired bootstrap of an (R, Q) matrix: intervals and the rank-stability of its order."""
    values = np.asarray(values, dtype=np.float64)
    indices = bootstrap_indices(values.shape[1], n_resamples, seed)
    resampled = bootstrap_means(values, indices)
    observed = values.mean(axis=1)
    intervals = percentile_intervals(resampled, alpha)
    order = np.argsort(-observed, kind="stable")
    pairs = tuple(
        PairStability(
            rank=rank,
            upper=int(a),
            lower=int(b),
            difference=float(observed[a] - observed[b]),
            overlap=bool(intervals[a, 0] <= intervals[b, 1] and intervals[b, 0] <= intervals[a, 1]),
            flip_share=flip_share(resampled, int(a), int(b)),
        )
        for rank, (a, b) in enumerate(pairwise(order), start=1)
    )
    return Confidence(
        means=observed,
        intervals=intervals,
        order=order,
        pairs=pairs,
        top_stays=top_share(resampled, int(order[0])),
        n_resamples=n_resamples,
        seed=seed,
        alpha=alpha,
    )
