"""Top-focused adaptive tournament (``pairing: adaptive``), batched over queries.

nDCG@10 only looks at the top of each ranking, so after ``warmup`` Swiss rounds the judge's
calls go to the candidates whose place in or out of the top ranks is still uncertain, and a
query stops as soon as its top ranks are stable.

Posterior (per query, after every round): the Bradley–Terry fit β̂ (L2, ``C``; hard or soft
outcomes, :func:`saber_core.rating.bradley_terry.fit_bradley_terry`) and its Laplace approximation
``β ~ N(β̂, H⁻¹)`` with the Hessian of the penalized loss at β̂::

    H = I + C Σ_r σ(z_r)(1 − σ(z_r)) x_r x_rᵀ,   z_r = β̂_a − β̂_b,   x_r = e_a − e_b.

``D`` draws ``β⁽ᵈ⁾ = β̂ + L u_d`` (``L Lᵀ = H⁻¹``) form a parametric bootstrap of the ranking; the
standard normal deviates ``u`` (D, n) are ONE seeded array (``default_rng([seed, 11])``) used in
every round (common random numbers), so a query whose judgments did not change gets the same
decision again: a stopped query stays stopped, and a replay with the same judgments pairs alike.

Where the labels matter (nDCG@10 weighs a candidate by its gain ``g_i = 2^{y_i} − 1``, ``y``
the min–max rating in [0, 5]): in every draw the ratings are ``y⁽ᵈ⁾ = rescale(β⁽ᵈ⁾)``; the
uncertainty of candidate ``i`` is the spread of its gain, ``u_i = std_d(g_i⁽ᵈ⁾) / 31`` (31 = the
largest gain), large near the top and ~0 far below it. Pair weight::

    w_ij = p_ij (1 − p_ij) (u_i + u_j),   p_ij = σ(β̂_i − β̂_j),

the Fisher information of the pair times how uncertain its candidates' gains are. A round is the
greedy maximum-weight matching of :mod:`saber_core.tournament.matching` on the unmet pairs, keeping
only the
pairs with ``w_ij ≥ min_weight`` (so a round may have far fewer than ``n // 2`` pairs).

Stop rule (checked before pairing every adaptive round): the top ranks are stable when the
ranking by β̂ keeps its nDCG@``k`` under the draws, ``mean_d nDCG@k(β̂, y⁽ᵈ⁾) ≥ stop_ndcg``
(:func:`saber_core.evaluation.metrics.ndcg_at_k`) → status ``stable``; no pair reaches
``min_weight`` →
``exhausted``; otherwise ``playing``. Rounds 1…``warmup`` are Swiss rounds (status ``warmup``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from saber_core.evaluation.metrics import ndcg_at_k
from saber_core.rating.bradley_terry import fit_bradley_terry, rescale_ratings
from saber_core.rating.comparisons import Comparisons
from saber_core.tournament.matching import greedy_matching, information_weights
from saber_core.tournament.swiss import swiss_round

DRAW_STREAM = 11
STOPPED = ("stable", "exhausted")  # the statuses of a stopped query


@dataclass(frozen=True)
class AdaptiveRule:
    """The adaptive tournament's settings (module docstring)."""

    warmup: int = 4
    k: int = 10
    stop_ndcg: float = 0.9
    draws: int = 200
    min_weight: float = 0.02


DEFAULT_RULE = AdaptiveRule()


@dataclass(frozen=True)
class RoundPlan:
    """One planned round: ``pairs`` (Q, n // 2, 2), ``-1`` = empty slot, and each query's
    ``status`` (Q,) — ``warmup``, ``playing`` or one of :data:`STOPPED` (``swiss`` etc.
    pairings: always ``playing``)."""

    pairs: np.ndarray
    status: np.ndarray


def laplace_covariance(history: Comparisons, beta: np.ndarray, C: float) -> np.ndarray:
    """``H⁻¹`` (Q, n, n) at the fit β̂ (module docstring); dropped (NaN) rows are ignored."""
    nq, n = beta.shape
    kept = history.select(history.decided)
    s = expit(beta[kept.q, kept.a] - beta[kept.q, kept.b])
    w = C * s * (1.0 - s)
    hess = np.zeros((nq, n, n))
    hess[:, np.arange(n), np.arange(n)] = 1.0
    np.add.at(hess, (kept.q, kept.a, kept.a), w)
    np.add.at(hess, (kept.q, kept.b, kept.b), w)
    np.add.at(hess, (kept.q, kept.a, kept.b), -w)
    np.add.at(hess, (kept.q, kept.b, kept.a), -w)
    return np.linalg.inv(hess)


def posterior_draws(beta: np.ndarray, cov: np.ndarray, deviates: np.ndarray) -> np.ndarray:
    """``β̂ + L u_d`` for every row ``u_d`` of ``deviates`` (D, n); (Q, D, n)."""
    chol = np.linalg.cholesky(0.5 * (cov + cov.transpose(0, 2, 1)))
    return beta[:, None, :] + np.einsum("dn,qmn->qdm", deviates, chol)


def gain_spread(ratings: np.ndarray) -> np.ndarray:
    """``u_i = std_d(2^{y_i⁽ᵈ⁾} − 1) / 31`` (Q, n) for draw ratings ``y`` (Q, D, n)."""
    return np.exp2(ratings).std(axis=1) / 31.0


def self_ndcg(beta: np.ndarray, ratings: np.ndarray, k: int) -> np.ndarray:
    """``mean_d nDCG@k(β̂, y⁽ᵈ⁾)`` per query (Q,): how much of its nDCG@k the ranking by β̂
    keeps when the ratings are the draws' ``y`` (Q, D, n)."""
    nq, nd, n = ratings.shape
    scores = np.repeat(beta, nd, axis=0)
    return ndcg_at_k(scores, ratings.reshape(nq * nd, n), k).reshape(nq, nd).mean(axis=1)


def draw_deviates(seed: int, draws: int, n: int) -> np.ndarray:
    """The fixed standard normal deviates (draws, n) of the posterior draws."""
    return np.random.default_rng([seed, DRAW_STREAM]).standard_normal((draws, n))


def adaptive_round(
    round_no: int,
    wins: np.ndarray,
    met: np.ndarray,
    history: Comparisons,
    rng: np.random.Generator,
    rule: AdaptiveRule,
    seed: int,
    C: float = 1.0,
) -> RoundPlan:
    """Plan round ``round_no`` (1-based) of every query (module docstring): Swiss while
    ``round_no ≤ warmup``, else the top-focused matching of the still-uncertain queries.

    ``wins`` (Q, n), ``met`` (Q, n, n), ``history`` the earlier judgments (hard or soft),
    ``rng`` the round's generator (tie-breaks), ``seed`` the build seed (posterior deviates).
    """
    wins = np.asarray(wins, dtype=float)
    nq, n = wins.shape
    if round_no <= rule.warmup:
        return RoundPlan(swiss_round(wins, met, rng), np.full(nq, "warmup", dtype=object))
    beta = fit_bradley_terry(history, C=C) if history.decided.any() else np.zeros((nq, n))
    draws = posterior_draws(
        beta, laplace_covariance(history, beta, C), draw_deviates(seed, rule.draws, n)
    )
    ratings = rescale_ratings(draws)
    spread = gain_spread(ratings)
    weights = information_weights(beta) * (spread[:, :, None] + spread[:, None, :])
    stable = self_ndcg(beta, ratings, rule.k) >= rule.stop_ndcg
    pairs = greedy_matching(weights, met, rng, repair=False)
    qi, slot = np.nonzero(pairs[..., 0] >= 0)
    light = weights[qi, pairs[qi, slot, 0], pairs[qi, slot, 1]] < rule.min_weight
    pairs[qi[light], slot[light]] = -1
    pairs[stable] = -1
    filled_first = np.argsort(pairs[..., 0] < 0, axis=1, kind="stable")
    pairs = np.take_along_axis(pairs, filled_first[..., None], axis=1)
    played = (pairs[..., 0] >= 0).any(axis=1)
    status = np.where(stable, "stable", np.where(played, "playing", "exhausted")).astype(object)
    return RoundPlan(pairs, status)
