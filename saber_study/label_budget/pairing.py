"""Demand pairing: the round planner of the study's focused designs (compiled, per query).

A round gives each candidate a number of games (its demand, from the design's priorities,
:func:`demands`) and pairs candidates of close current strength: walking the candidates in
strength order, each candidate with demand left takes, among the candidates within ``window``
places of it that still have demand, the one it has met least often (ties: the nearest; then
the one above), and only when the window holds none looks at every position. A pair is played
at most once per round; a candidate left without a partner loses its demand.
"""

from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True)
def _pair_query(order, demand, met, window, out):
    n = order.shape[0]
    seen = np.zeros((n, n), dtype=np.bool_)
    left = demand.copy()
    count = 0
    for p in range(n):
        i = order[p]
        while left[i] > 0 and count < out.shape[0]:
            best, best_met, best_dist = -1, 1 << 30, 1 << 30
            for radius in (window, n):
                for d in range(1, radius + 1):
                    for pos in (p - d, p + d):
                        if pos < 0 or pos >= n:
                            continue
                        j = order[pos]
                        if left[j] <= 0 or seen[i, j]:
                            continue
                        m = met[i, j]
                        if m < best_met or (m == best_met and d < best_dist):
                            best, best_met, best_dist = j, m, d
                if best >= 0:
                    break
            if best < 0:
                left[i] = 0
                break
            seen[i, best] = seen[best, i] = True
            left[i] -= 1
            left[best] -= 1
            out[count, 0] = min(i, best)
            out[count, 1] = max(i, best)
            count += 1
    return count


@nb.njit(cache=True)
def _pair_all(order, demand, met, window, out):
    for q in range(order.shape[0]):
        _pair_query(order[q], demand[q], met[q], window, out[q])


def pair_by_demand(
    order: np.ndarray, demand: np.ndarray, met: np.ndarray, window: int, max_pairs: int
) -> np.ndarray:
    """Pairs (Q, max_pairs, 2), smaller id first, ``-1`` = empty slot (module docstring).

    ``order`` (Q, n) candidate ids by current strength, descending; ``demand`` (Q, n) games per
    candidate this round; ``met`` (Q, n, n) how often each pair was judged before.
    """
    out = np.full((order.shape[0], max_pairs, 2), -1, dtype=np.int64)
    _pair_all(
        np.ascontiguousarray(order, dtype=np.int64),
        np.ascontiguousarray(demand, dtype=np.int64),
        np.ascontiguousarray(met),
        int(window),
        out,
    )
    return out


def demands(
    priority: np.ndarray,
    order: np.ndarray,
    games: int,
    background: float,
    cap: int,
    offset: np.ndarray,
) -> np.ndarray:
    """Integer games per candidate (Q, n) summing to ``games`` per query (when the cap allows).

    Shares ``w = (1 − background) π / Σπ + background / n`` (π the priorities, ≥ 0; all-zero π
    gives equal shares), expected games ``e = games · w`` capped at ``cap`` (the excess spread
    over the uncapped candidates in proportion, repeated), then systematic rounding along
    ``order`` with the per-query ``offset`` ∈ [0, 1): ``d = Δ floor(cumsum(e) + offset)``.
    """
    pi = np.maximum(np.asarray(priority, dtype=float), 0.0)
    n = pi.shape[1]
    total = pi.sum(axis=1, keepdims=True)
    share = np.where(total > 0, pi / np.where(total > 0, total, 1.0), 1.0 / n)
    e = games * ((1.0 - background) * share + background / n)
    for _ in range(20):
        over = e > cap
        if not over.any():
            break
        excess = np.where(over, e - cap, 0.0).sum(axis=1, keepdims=True)
        e = np.minimum(e, cap)
        room = np.where(e < cap, e, 0.0)
        mass = room.sum(axis=1, keepdims=True)
        e = e + np.where(mass > 0, excess * room / np.where(mass > 0, mass, 1.0), 0.0)
    e = np.take_along_axis(e, order, axis=1)
    cum = np.floor(np.cumsum(e, axis=1) + offset[:, None] + 1e-9)
    along = np.diff(np.concatenate([np.floor(offset[:, None] + 1e-9), cum], axis=1), axis=1)
    out = np.empty_like(along)
    np.put_along_axis(out, order, along, axis=1)
    return out.astype(np.int64)
