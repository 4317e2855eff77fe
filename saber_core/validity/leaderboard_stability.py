"""Leaderboard stability: does a set of labels rank the retrievers as reference labels do?

For retrievers ``r = 1 … R`` with scores ``S_r`` (Q, n) over the same pools, the leaderboard
under ratings ``Y`` (Q, n) is the mean nDCG@10 per retriever (SABER's exponential gain,
:func:`saber_core.evaluation.metrics.ndcg_at_k`)::

    L_r(Y) = (1 / Q) Σ_q nDCG@10(S_r[q], Y[q]).

Compared with reference ratings ``Y*`` (round-robin labels): Kendall τ-b between the vectors
``L(Y)`` and ``L(Y*)`` (:func:`saber_core.validity.reliability.kendall_tau_b`), and the nDCG@10
error per
retriever ``|L_r(Y) − L_r(Y*)|`` with its mean and maximum over retrievers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from saber_core.evaluation.metrics import ndcg_at_k
from saber_core.validity.reliability import kendall_tau_b


@dataclass(frozen=True)
class LeaderboardStability:
    """``ndcg`` and ``reference_ndcg`` (R,) leaderboards, ``tau`` between them, ``abs_error``
    (R,) = ``|ndcg − reference_ndcg|``."""

    ndcg: np.ndarray
    reference_ndcg: np.ndarray
    tau: float
    abs_error: np.ndarray

    @property
    def mean_abs_error(self) -> float:
        """Mean |ΔnDCG@10| over retrievers."""
        return float(self.abs_error.mean())

    @property
    def max_abs_error(self) -> float:
        """Largest |ΔnDCG@10| of a retriever."""
        return float(self.abs_error.max())


def leaderboard(scores: np.ndarray, ratings: np.ndarray, k: int = 10) -> np.ndarray:
    """Mean nDCG@k per retriever, (R,), for ``scores`` (R, Q, n) and ``ratings`` (Q, n)."""
    scores = np.asarray(scores, dtype=float)
    return np.array([ndcg_at_k(s, ratings, k).mean() for s in scores])


def leaderboard_stability(
    scores: np.ndarray, ratings: np.ndarray, reference: np.ndarray, k: int = 10
) -> LeaderboardStability:
    """The leaderboards of ``scores`` (R, Q, n) under ``ratings`` and ``reference`` (Q, n),
    their Kendall τ-b and the per-retriever |ΔnDCG@k| (module docstring)."""
    own, ref = leaderboard(scores, ratings, k), leaderboard(scores, reference, k)
    return LeaderboardStability(own, ref, float(kendall_tau_b(own, ref)), np.abs(own - ref))
