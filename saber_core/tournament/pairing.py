"""Pairing strategies for the tournament rounds: Swiss (the published default, in
:mod:`saber_core.tournament.swiss`), information-gain pairing, random pairing (a baseline) and the
top-focused adaptive tournament (:mod:`saber_core.tournament.adaptive`), behind one entry point,
:func:`plan_round`, that the build's round assets and the study both call.

Same rules as :mod:`saber_core.tournament.swiss`: every round each candidate plays at most once (at
most ``n // 2`` comparisons per query; the adaptive rounds play fewer), no pair ever meets twice,
pairs are written smaller id first, an empty slot is ``(-1, -1)``.

Information-gain rule (per query and round): refit Bradley–Terry on all outcomes so far (hard or
soft), giving strengths β; the weight of a not-yet-met pair is the Fisher information one
judgment carries about ``β_i − β_j``::

    w_ij = p_ij (1 − p_ij),   p_ij = σ(β_i − β_j),

largest (¼) for candidates of equal estimated strength; the round is the greedy maximum-weight
matching of :mod:`saber_core.tournament.matching` (seeded tie-breaks; in round 1 every weight is ¼
and the
round is a uniformly random matching), left-over candidates placed by the swap repair of
:mod:`saber_core.tournament.swiss`; only what cannot be repaired gets a bye.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from saber_core.rating.bradley_terry import fit_bradley_terry
from saber_core.rating.comparisons import Comparisons, hard_outcomes, soft_outcomes
from saber_core.tournament.adaptive import DEFAULT_RULE, AdaptiveRule, RoundPlan, adaptive_round
from saber_core.tournament.matching import greedy_matching, information_weights
from saber_core.tournament.rows import Rows, RowsGenerator
from saber_core.tournament.swiss import SwissResult, swiss_round

ProbabilityJudge = Callable[[int, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class AdaptiveResult(SwissResult):
    """A finished :func:`run_pairing` tournament: the :class:`SwissResult` fields plus
    ``p_first`` (R, Q, m) the judge's probability that the first candidate wins (NaN = dropped
    or empty slot), ``strengths`` (Q, n) the BT fit on all its judgments (soft or hard, as
    played) and ``status`` (R, Q) each query's round status
    (:class:`saber_core.tournament.adaptive.RoundPlan`;
    ``playing`` for the non-adaptive pairings).

    ``outcomes`` are the hard outcomes ``1[p > ½]`` / ``0[p < ½]`` (NaN for p = ½), as the
    platform's round assets store them.
    """

    p_first: np.ndarray
    strengths: np.ndarray
    status: np.ndarray

    def comparisons(self, soft: bool = False) -> Comparisons:
        """The played rows with hard outcomes, or the judge's probabilities when ``soft``
        (:func:`saber_core.rating.comparisons.soft_outcomes`)."""
        rows = super().comparisons()
        played = self.p_first[self.pairs[..., 0] >= 0]
        return rows.with_outcomes(soft_outcomes(played)) if soft else rows


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


PAIRINGS = ("swiss", "information", "random", "adaptive")


def plan_round(
    pairing: str,
    round_no: int,
    wins: np.ndarray,
    met: np.ndarray,
    history: Comparisons,
    seed: int,
    C: float = 1.0,
    rule: AdaptiveRule = DEFAULT_RULE,
    rows: Rows | None = None,
) -> RoundPlan:
    """Plan round ``round_no`` (1-based) of every query with ``pairing``: pairs (Q, n // 2, 2),
    ``-1`` = empty, and each query's status (``playing`` unless ``adaptive``); ``rows``: these
    queries are those rows of a whole tournament (a replay, :class:`Rows`).

    All randomness comes from :func:`round_rng` ``(seed, round_no)`` (and, for ``adaptive``, the
    posterior deviates of ``seed``). ``swiss``: :func:`saber_core.tournament.swiss.swiss_round` on
    the
    win counts; ``information``: :func:`information_round` on the BT strengths fitted (L2, ``C``)
    on ``history`` — the earlier judgments, hard or soft outcomes in [0, 1], NaN = dropped;
    strengths are zero before any judgment; ``random``: :func:`random_round`; ``adaptive``:
    :func:`saber_core.tournament.adaptive.adaptive_round` with ``rule``.
    """
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
    wins = np.asarray(wins, dtype=float)
    rng = round_rng(seed, round_no)
    if rows is not None:
        rng = RowsGenerator(rng, rows)
    if pairing == "adaptive":
        return adaptive_round(round_no, wins, met, history, rng, rule, seed, C)
    if pairing == "swiss":
        pairs = swiss_round(wins, met, rng)
    elif pairing == "random":
        pairs = random_round(met, rng)
    else:
        beta = fit_bradley_terry(history, C=C) if history.decided.any() else np.zeros(wins.shape)
        pairs = information_round(beta, met, rng)
    return RoundPlan(pairs, np.full(wins.shape[0], "playing", dtype=object))


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
    rule: AdaptiveRule = DEFAULT_RULE,
) -> AdaptiveResult:
    """Play ``n_rounds`` rounds of ``strategy`` (one of :data:`PAIRINGS`) for every query.

    ``judge(round, pairs)`` gets (Q, m, 2) pairs (``-1`` = empty slot) and returns the
    probability (Q, m) that the first candidate wins (NaN = dropped). Each round is
    :func:`plan_round` with ``seed``, so the round assets of a build with the same seed, pools
    and verdicts pair exactly the same way. ``soft``: the information and adaptive pairings
    refit BT on the probabilities, else on the hard outcomes; ``rule``: the adaptive settings.
    """
    if strategy not in PAIRINGS:
        raise ValueError(f"strategy must be one of {PAIRINGS}, got {strategy!r}")
    nq, n, m = n_queries, n_players, n_players // 2
    met = np.zeros((nq, n, n), dtype=bool)
    wins = np.zeros((nq, n))
    all_pairs = np.full((n_rounds, nq, m, 2), -1, dtype=np.int64)
    all_p = np.full((n_rounds, nq, m), np.nan)
    byes = np.zeros((n_rounds, nq), dtype=np.int64)
    status = np.full((n_rounds, nq), "playing", dtype=object)

    def history(rounds: int) -> Comparisons:
        """The judgments of the first ``rounds`` rounds, flattened (soft or hard outcomes)."""
        valid = all_pairs[:rounds, ..., 0] >= 0
        _, qi, _ = np.nonzero(valid)
        sel, y = all_pairs[:rounds][valid], all_p[:rounds][valid]
        return Comparisons(
            qi, sel[:, 0], sel[:, 1], (soft_outcomes if soft else hard_outcomes)(y), nq, n
        )

    for r in range(n_rounds):
        plan = plan_round(strategy, r + 1, wins, met, history(r), seed, C=C, rule=rule)
        pairs, status[r] = plan.pairs, plan.status
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
        status=status,
    )
