"""Retrieval metrics: nDCG@k (SABER's exponential gain, or trec_eval's linear gain on integer
labels), integer relevance labels, per-domain means.

DCG@k = Σ_{r=1..min(k, n)} g(rel_r) / log2(r + 1), where rel_r is the rating of the candidate at
rank r (rank 1 first) when candidates are sorted by descending model score, with
g(x) = 2^x − 1 (``gain="exponential"``, SABER's headline metric on the float ratings) or
g(x) = x (``gain="linear"``, what trec_eval's ``ndcg_cut``, BEIR and MTEB compute on integer
labels). Ties in score keep candidate (column) order — the earlier column ranks first — unless
``tiebreak`` is given: then tied candidates are ordered by descending ``tiebreak`` key (trec_eval
orders ties by descending doc id; :func:`trec_tiebreak` gives that key). NaN scores rank last
(after every real score, -inf included). IDCG@k is the DCG@k of the ratings sorted descending
over ALL n candidates; nDCG@k = DCG@k / IDCG@k, and 0.0 when IDCG@k = 0 (every rating is 0).
Ratings must be finite and ≥ 0 (the benchmark's are 0–5).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import polars as pl

Gain = Literal["exponential", "linear"]


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


def integer_labels(ratings: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """Integer relevance labels ``floor(scale · rating + 1/2)`` (round half up), int64.

    ``scale = 1`` gives the exported ``beir/qrels/test.tsv`` labels (0–5); ``scale = 20`` the
    MTEB task's 0–100 labels (``rating / 5 · 100``).
    """
    return np.floor(np.asarray(ratings, dtype=np.float64) * scale + 0.5).astype(np.int64)


def trec_tiebreak(candidates: Sequence[Sequence[str]], width: int) -> np.ndarray:
    """(Q, width) keys ordering tied candidates as trec_eval does: by descending doc id.

    Key = the position of the doc id among its query's ids sorted ascending (strcmp order of
    the UTF-8 bytes), so a larger key is a larger id; padded columns get −1.
    """
    keys = np.full((len(candidates), width), -1.0)
    for i, docs in enumerate(candidates):
        order = sorted(range(len(docs)), key=lambda j: docs[j].encode("utf-8"))
        keys[i, order] = np.arange(len(docs))
    return keys


def _ranking(scores: np.ndarray, tiebreak: np.ndarray | None) -> np.ndarray:
    """Column indices by descending score (NaN last); ties by column or descending tiebreak."""
    if tiebreak is None:
        # Stable ascending argsort of −score: descending score, ties by column, NaN (= −NaN) last.
        return np.argsort(-scores, axis=1, kind="stable")
    tiebreak = np.asarray(tiebreak, dtype=np.float64)
    if tiebreak.shape != scores.shape:
        raise ValueError(f"tiebreak {tiebreak.shape} must have the shape of scores {scores.shape}")
    return np.lexsort((-tiebreak, -scores), axis=1)  # last key is primary; NaN sorts last


def dcg_at_k(
    scores: np.ndarray,
    ratings: np.ndarray,
    k: int = 10,
    gain: Gain = "exponential",
    tiebreak: np.ndarray | None = None,
) -> np.ndarray:
    """DCG@k per query, shape (Q,): Σ_{r ≤ k} g(rel_r) / log2(r + 1), ranked by score."""
    scores, ratings = _check(scores, ratings, k)
    order = _ranking(scores, tiebreak)[:, :k]
    picked = np.take_along_axis(ratings, order, axis=1)
    if gain == "exponential":
        gains = np.exp2(picked) - 1.0
    elif gain == "linear":
        gains = picked
    else:
        raise ValueError(f"gain must be 'exponential' or 'linear', got {gain!r}")
    discounts = 1.0 / np.log2(np.arange(2, order.shape[1] + 2))
    return gains @ discounts


def ndcg_at_k(
    scores: np.ndarray,
    ratings: np.ndarray,
    k: int = 10,
    gain: Gain = "exponential",
    tiebreak: np.ndarray | None = None,
) -> np.ndarray:
    """nDCG@k per query, shape (Q,): DCG@k / IDCG@k (IDCG over all n candidates); 0 if IDCG = 0."""
    dcg = dcg_at_k(scores, ratings, k, gain, tiebreak)
    ideal = dcg_at_k(ratings, ratings, k, gain)  # ranking by the ratings is the ideal order
    out = np.zeros_like(dcg)
    np.divide(dcg, ideal, out=out, where=ideal > 0)
    return out


def ndcg_trec(
    scores: np.ndarray,
    labels: np.ndarray,
    candidates: Sequence[Sequence[str]],
    k: int = 10,
) -> np.ndarray:
    """nDCG@k as trec_eval's ``ndcg_cut.k`` computes it (pytrec_eval, ir_measures, BEIR, MTEB):
    linear gain on integer ``labels``, ranking by descending score with ties by descending doc
    id, IDCG over the judged candidates (every candidate is judged here)."""
    scores = np.asarray(scores, dtype=np.float64)
    return ndcg_at_k(scores, labels, k, "linear", trec_tiebreak(candidates, scores.shape[1]))


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
