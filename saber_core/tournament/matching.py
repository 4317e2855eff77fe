"""Greedy maximum-weight matching of candidates within a round, batched over queries — the
matching step of information-gain pairing (:mod:`saber_core.tournament.pairing`) and of the
top-focused
adaptive tournament (:mod:`saber_core.tournament.adaptive`).

The weight of a pair is the Fisher information one judgment carries about ``β_i − β_j``::

    w_ij = p_ij (1 − p_ij),   p_ij = σ(β_i − β_j).

A round is a greedy maximum-weight matching on the unmet pairs: repeatedly take the heaviest
remaining pair whose two candidates are both still free. Ties in weight are broken by a seeded
random key, so weights are a strict order and the greedy matching is unique. The greedy is
computed for all queries at once as "mutual best" rounds: every free candidate points to its
heaviest free unmet partner, pairs pointing at each other are matched (with distinct weights this
is exactly the greedy matching: the heaviest remaining edge is always mutual, and a mutual edge is
never blocked by a heavier one). Candidates left over because all their free partners were
already met are placed by the swap repair of :mod:`saber_core.tournament.swiss`.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from saber_core.tournament.swiss import repair_round


def information_weights(strengths: np.ndarray) -> np.ndarray:
    """``w_ij = σ(β_i − β_j) (1 − σ(β_i − β_j))`` for every pair; (Q, n, n), symmetric."""
    beta = np.asarray(strengths, dtype=float)
    p = expit(beta[:, :, None] - beta[:, None, :])
    return p * (1.0 - p)


def _strict_ranks(weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Symmetric (Q, n, n) int32 ranks of the pairs i < j by (weight, random key), ascending.

    The diagonal is −1. Draws one ``rng.random((Q, n (n − 1) / 2))`` array of tie-break keys.
    """
    nq, n, _ = weights.shape
    iu, ju = np.triu_indices(n, k=1)
    w = weights[:, iu, ju]
    # Sort by weight, ties in random order: a stable sort of randomly permuted columns
    # (the permutation = argsort of the random keys).
    perm = np.argsort(rng.random(w.shape), axis=-1)
    order = np.take_along_axis(
        perm, np.argsort(np.take_along_axis(w, perm, axis=-1), axis=-1, kind="stable"), axis=-1
    )
    rank = np.empty(order.shape, dtype=np.int32)
    np.put_along_axis(rank, order, np.arange(w.shape[1], dtype=np.int32)[None, :], axis=-1)
    out = np.full((nq, n, n), -1, dtype=np.int32)
    out[:, iu, ju] = rank
    out[:, ju, iu] = rank
    return out


def greedy_matching(
    weights: np.ndarray, met: np.ndarray, rng: np.random.Generator, repair: bool = True
) -> np.ndarray:
    """Greedy maximum-weight matching on unmet pairs, per query; (Q, n // 2, 2), ``-1`` = empty.

    ``weights`` (Q, n, n) symmetric, ``met`` (Q, n, n) bool. See the module docstring for the
    rule, the random tie-break and the repair of left-over candidates. Pairs are smaller id
    first, in the order they were matched (heaviest first).
    """
    weights = np.asarray(weights, dtype=float)
    met = np.asarray(met, dtype=bool)
    nq, n = weights.shape[:2]
    if weights.shape != (nq, n, n) or met.shape != weights.shape:
        raise ValueError(f"weights {weights.shape} and met {met.shape} must both be (Q, n, n)")
    m = n // 2
    pairs = np.full((nq, m, 2), -1, dtype=np.int64)
    if n < 2:
        return pairs
    rank = _strict_ranks(weights, rng)
    rank[met] = -1
    free = np.ones((nq, n), dtype=bool)
    count = np.zeros(nq, dtype=np.int64)
    ids = np.arange(n)
    while True:
        live = np.where(free[:, :, None] & free[:, None, :], rank, -1)
        best = live.argmax(axis=2)
        has = np.take_along_axis(live, best[..., None], axis=2)[..., 0] >= 0
        mutual = has & (np.take_along_axis(best, best, axis=1) == ids) & (ids < best)
        if not mutual.any():
            break
        qi, i = np.nonzero(mutual)
        j = best[qi, i]
        # Matched pairs of one step go into consecutive slots of their query, heaviest first.
        heavy = np.lexsort((-rank[qi, i, j], qi))
        qi, i, j = qi[heavy], i[heavy], j[heavy]
        first = np.r_[True, qi[1:] != qi[:-1]]
        run_start = np.maximum.accumulate(np.where(first, np.arange(len(qi)), 0))
        slot = count[qi] + np.arange(len(qi)) - run_start
        pairs[qi, slot, 0], pairs[qi, slot, 1] = i, j
        count += np.bincount(qi, minlength=nq)
        free[qi, i] = free[qi, j] = False
    if repair:
        for q in np.flatnonzero(free.sum(axis=1) >= 2):
            repair_round(pairs[q], int(count[q]), [int(x) for x in np.flatnonzero(free[q])], met[q])
    return np.sort(pairs, axis=-1)
