"""Pairing strategies for the tournament rounds: Swiss (the published default, in
:mod:`saber_core.tournament`), information-gain pairing and random pairing (a baseline).

Same budget and rules as :mod:`saber_core.tournament`: every round each candidate plays at most
once (``n // 2`` comparisons per query), no pair ever meets twice, pairs are written smaller id
first, an empty slot is ``(-1, -1)``.

Rule (per query and round): refit Bradley–Terry on all outcomes so far (hard or soft), giving
strengths β; the weight of a not-yet-met pair is the Fisher information one judgment carries
about ``β_i − β_j``::

    w_ij = p_ij (1 − p_ij),   p_ij = σ(β_i − β_j),

largest (¼) for candidates of equal estimated strength. The round is a greedy maximum-weight
matching on the unmet pairs: repeatedly take the heaviest remaining pair whose two candidates
are both still free. Ties in weight are broken by a seeded random key, so weights are a strict
order and the greedy matching is unique; in round 1 every weight is ¼ and the round is a uniformly
random matching. The greedy is computed for all queries at once as "mutual best" rounds: every
free candidate points to its heaviest free unmet partner, pairs pointing at each other are
matched (with distinct weights this is exactly the greedy matching: the heaviest remaining edge
is always mutual, and a mutual edge is never blocked by a heavier one). Candidates left over
because all their free partners were already met are placed by the swap repair of
:mod:`saber_core.tournament`; only what cannot be repaired gets a bye.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from saber_core.bradley_terry import fit_bradley_terry
from saber_core.comparisons import Comparisons, hard_outcomes, soft_outcomes
from saber_core.tournament import SwissResult, repair_round, swiss_round

ProbabilityJudge = Callable[[int, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class AdaptiveResult(SwissResult):
    """A finished :func:`run_pairing` tournament: the :class:`SwissResult` fields plus
    ``p_first`` (R, Q, m) the judge's probability that the first candidate wins (NaN = dropped
    or empty slot) and ``strengths`` (Q, n) the BT fit on all its judgments (soft or hard, as
    played).

    ``outcomes`` are the hard outcomes ``1[p > ½]`` / ``0[p < ½]`` (NaN for p = ½), as the
    platform's round assets store them.
    """

    p_first: np.ndarray
    strengths: np.ndarray

    def comparisons(self, soft: bool = False) -> Comparisons:
        """The played rows with hard outcomes, or the judge's probabilities when ``soft``
        (:func:`saber_core.comparisons.soft_outcomes`)."""
        rows = super().comparisons()
        played = self.p_first[self.pairs[..., 0] >= 0]
        return rows.with_outcomes(soft_outcomes(played)) if soft else rows


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


def information_round(
    strengths: np.ndarray, met: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Pair one information-gain round for every query; (Q, n // 2, 2), ``-1`` = empty slot.

    ``strengths`` (Q, n) current BT strengths (all zeros before any judgment: a random round),
    ``met`` (Q, n, n) who has already played whom.
    """
    return greedy_matching(information_weights(strengths), met, rng)


def random_round(met: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random round without rematches (the greedy matching with equal weights)."""
    met = np.asarray(met, dtype=bool)
    return greedy_matching(np.zeros(met.shape), met, rng)


PAIRINGS = ("swiss", "information", "random")


def pair_round(
    pairing: str,
    wins: np.ndarray,
    met: np.ndarray,
    history: Comparisons,
    rng: np.random.Generator,
    C: float = 1.0,
) -> np.ndarray:
    """Pair the next round of every query with ``pairing``; (Q, n // 2, 2), ``-1`` = empty.

    ``swiss``: :func:`saber_core.tournament.swiss_round` on the win counts; ``information``:
    :func:`information_round` on the BT strengths fitted (L2, ``C``) on ``history`` — the
    earlier judgments, hard or soft outcomes in [0, 1], NaN = dropped; strengths are zero
    before any judgment; ``random``: :func:`random_round`.
    """
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
    wins = np.asarray(wins, dtype=float)
    if pairing == "swiss":
        return swiss_round(wins, met, rng)
    if pairing == "random":
        return random_round(met, rng)
    beta = fit_bradley_terry(history, C=C) if history.decided.any() else np.zeros(wins.shape)
    return information_round(beta, met, rng)


def round_rng(seed: int, r: int) -> np.random.Generator:
    """The generator of round ``r`` (1-based): ``default_rng([seed, r])``, as the round assets."""
    return np.random.default_rng([seed, r])


def run_pairing(
    n_queries: int,
    n_players: int,
    n_rounds: int,
    judge: ProbabilityJudge,
    seed: int,
    strategy: str = "information",
    soft: bool = False,
    C: float = 1.0,
) -> AdaptiveResult:
    """Play ``n_rounds`` rounds of ``strategy`` (one of :data:`PAIRINGS`) for every query.

    ``judge(round, pairs)`` gets (Q, m, 2) pairs (``-1`` = empty slot) and returns the
    probability (Q, m) that the first candidate wins (NaN = dropped). Each round is
    :func:`pair_round` with :func:`round_rng` ``(seed, r)``, so the round assets of a build with
    the same seed, pools and verdicts pair exactly the same way. ``soft``: the information
    pairing refits BT on the probabilities, else on the hard outcomes.
    """
    if strategy not in PAIRINGS:
        raise ValueError(f"strategy must be one of {PAIRINGS}, got {strategy!r}")
    nq, n, m = n_queries, n_players, n_players // 2
    met = np.zeros((nq, n, n), dtype=bool)
    wins = np.zeros((nq, n))
    all_pairs = np.full((n_rounds, nq, m, 2), -1, dtype=np.int64)
    all_p = np.full((n_rounds, nq, m), np.nan)
    byes = np.zeros((n_rounds, nq), dtype=np.int64)

    def history(rounds: int) -> Comparisons:
        """The judgments of the first ``rounds`` rounds, flattened (soft or hard outcomes)."""
        valid = all_pairs[:rounds, ..., 0] >= 0
        _, qi, _ = np.nonzero(valid)
        sel, y = all_pairs[:rounds][valid], all_p[:rounds][valid]
        return Comparisons(
            qi, sel[:, 0], sel[:, 1], (soft_outcomes if soft else hard_outcomes)(y), nq, n
        )

    for r in range(n_rounds):
        pairs = pair_round(strategy, wins, met, history(r), round_rng(seed, r + 1), C=C)
        filled = pairs[..., 0] >= 0
        p = np.asarray(judge(r, pairs.copy()), dtype=float)
        if p.shape != (nq, m):
            raise ValueError(f"judge returned shape {p.shape} in round {r}, expected {(nq, m)}")
        p = np.where(filled, p, np.nan)
        bad = filled & np.isfinite(p) & ((p < 0.0) | (p > 1.0))
        if bad.any():
            raise ValueError(f"judge returned a probability outside [0, 1] in round {r}")
        qi, slot = np.nonzero(filled)
        a, b = pairs[qi, slot, 0], pairs[qi, slot, 1]
        met[qi, a, b] = met[qi, b, a] = True
        hard = hard_outcomes(p[qi, slot])
        decided = np.isfinite(hard)
        winner = np.where(hard == 1.0, a, b)[decided]
        np.add.at(wins, (qi[decided], winner), 1.0)
        all_pairs[r], all_p[r] = pairs, p
        byes[r] = n - 2 * filled.sum(axis=1)
    final = history(n_rounds)
    return AdaptiveResult(
        pairs=all_pairs,
        outcomes=hard_outcomes(all_p),
        wins=wins,
        byes=byes,
        p_first=all_p,
        strengths=fit_bradley_terry(final, C=C) if len(final) else np.zeros((nq, n)),
    )
