"""Cheap-judge triage of pairwise judgments (SPEC "Cheap judge triage", issue 8).

A cheap scorer (a cross-encoder or an embedding similarity) gives each candidate a pointwise
relevance score ``c``; a pair's margin is ``c_a − c_b``. Pairs whose outcome the cheap scorer
predicts confidently skip the LLM; the uncertain middle goes to the LLM. Every function returns a
:class:`TriageSplit`, a partition of the pair indices ``0 .. N − 1`` into two disjoint sorted
index arrays (``cheap`` and ``llm``) whose union is all pairs.

Two rules:

* probability rule (:func:`triage_by_probability`): a calibrated ``p_cheap`` = P(a wins) per
  pair, cheap when ``|p_cheap − ½| ≥ threshold`` (``threshold`` in [0, ½]; 0 sends everything to
  the cheap path, anything above ½ sends everything to the LLM). NaN ``p_cheap`` → LLM.
  Calibration (:func:`calibrate_margin`): ``p_cheap = σ(k · margin)``, one slope ``k`` fitted by
  maximum likelihood on pairs the LLM has judged (no intercept: swapping a and b must flip p);
* band rule (:func:`triage_by_bands`, MathPinpoint-Judge on its 0–2 scale): a score ``< low``
  (0.5) is confidently irrelevant, ``≥ high`` (1.5) confidently relevant, anything between is
  uncertain. A pair is decided cheaply only when one candidate is confidently relevant and the
  other confidently irrelevant (the relevant one wins); two candidates in the same band, or any
  uncertain one, go to the LLM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy.special import expit

from saber_core.rating.bradley_terry import fit_bradley_terry
from saber_core.rating.comparisons import Comparisons
from saber_core.validity.reliability import kendall_tau_b, mean_and_se


@dataclass(frozen=True)
class TriageSplit:
    """A partition of ``n_pairs`` pair indices.

    ``cheap`` / ``llm``: sorted int64 indices (disjoint, union = all pairs); ``cheap_outcome``:
    the cheap path's outcome for each ``cheap`` index (P(a wins), hard 0/1 or calibrated soft).
    """

    cheap: np.ndarray
    llm: np.ndarray
    cheap_outcome: np.ndarray
    n_pairs: int

    @property
    def saved_fraction(self) -> float:
        """Share of pairs that skip the LLM (0 when there are no pairs)."""
        return len(self.cheap) / self.n_pairs if self.n_pairs else 0.0

    def merge(self, llm_outcome: np.ndarray) -> np.ndarray:
        """All ``n_pairs`` outcomes: the cheap outcomes and ``llm_outcome`` (one per ``llm``
        index, in that order) scattered back to their pair positions."""
        llm_outcome = np.asarray(llm_outcome, dtype=float).reshape(-1)
        if len(llm_outcome) != len(self.llm):
            raise ValueError(f"{len(llm_outcome)} LLM outcomes for {len(self.llm)} LLM pairs")
        out = np.empty(self.n_pairs)
        out[self.cheap] = self.cheap_outcome
        out[self.llm] = llm_outcome
        return out


def _split(confident: np.ndarray, outcome: np.ndarray) -> TriageSplit:
    confident = np.asarray(confident, dtype=bool).reshape(-1)
    cheap = np.flatnonzero(confident)
    return TriageSplit(
        cheap=cheap,
        llm=np.flatnonzero(~confident),
        cheap_outcome=np.asarray(outcome, dtype=float).reshape(-1)[cheap],
        n_pairs=len(confident),
    )


def calibrate_margin(margin: np.ndarray, outcome: np.ndarray, max_iter: int = 100) -> float:
    """Slope ``k ≥ 0`` of ``P(a wins) = σ(k · margin)`` by maximum likelihood.

    Maximizes ``ℓ(k) = Σ [y k m − log(1 + e^{k m})]`` over the rows with a finite margin and
    outcome ``y`` ∈ [0, 1] (soft allowed): Newton steps on the concave ``ℓ`` with step halving
    whenever ``ℓ`` would not increase. A margin that predicts nothing (``ℓ'(0) = Σ (y − ½) m ≤
    0``) gives ``k = 0``. Separable data have no maximum: ``k`` then grows until ``ℓ`` stops
    improving numerically (capped at 1e6), i.e. the calibration is near-hard.
    """
    m = np.asarray(margin, dtype=float).reshape(-1)
    y = np.asarray(outcome, dtype=float).reshape(-1)
    keep = np.isfinite(m) & np.isfinite(y)
    m, y = m[keep], y[keep]
    if m.size == 0 or np.sum((y - 0.5) * m) <= 0:
        return 0.0

    def loglik(k: float) -> float:
        z = k * m
        return float(np.sum(y * z - np.logaddexp(0.0, z)))

    k, f = 0.0, loglik(0.0)
    for _ in range(max_iter):
        p = expit(k * m)
        grad = float(np.sum((y - p) * m))
        hess = float(np.sum(p * (1.0 - p) * m * m))
        step = grad / hess if hess > 0 else max(k, 1.0)
        while step != 0:
            k_new = min(max(k + step, 0.0), 1e6)
            f_new = loglik(k_new)
            if f_new >= f:
                break
            step /= 2.0
        if step == 0 or abs(k_new - k) <= 1e-10 * max(1.0, k):
            k = k_new
            break
        k, f = k_new, f_new
        if k >= 1e6:
            break
    return float(k)


def triage_by_probability(p_cheap: np.ndarray, threshold: float, soft: bool = False) -> TriageSplit:
    """Cheap path for ``|p_cheap − ½| ≥ threshold``, the rest (and NaN) to the LLM.

    The cheap outcome is ``1[p > ½]`` (hard, default) or ``p`` itself (``soft``).
    """
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold}")
    p = np.asarray(p_cheap, dtype=float).reshape(-1)
    with np.errstate(invalid="ignore"):
        confident = np.isfinite(p) & (np.abs(p - 0.5) >= threshold)
    # A threshold of 0 accepts p = ½, whose hard outcome is undefined: keep it soft (½).
    outcome = p if soft else np.where(p > 0.5, 1.0, np.where(p < 0.5, 0.0, 0.5))
    return _split(confident, outcome)


def triage_by_bands(
    score_a: np.ndarray, score_b: np.ndarray, low: float = 0.5, high: float = 1.5
) -> TriageSplit:
    """MathPinpoint-style bands on pointwise scores (module docstring); hard cheap outcomes.

    Cheap iff one score is ``≥ high`` and the other ``< low``; outcome 1.0 if ``a`` is the
    relevant one, else 0.0. NaN scores are never confident.
    """
    if not low <= high:
        raise ValueError(f"need low <= high, got low={low}, high={high}")
    sa = np.asarray(score_a, dtype=float).reshape(-1)
    sb = np.asarray(score_b, dtype=float).reshape(-1)
    if sa.shape != sb.shape:
        raise ValueError(f"score_a {sa.shape} and score_b {sb.shape} differ")
    with np.errstate(invalid="ignore"):
        a_wins = (sa >= high) & (sb < low)
        b_wins = (sb >= high) & (sa < low)
    return _split(a_wins | b_wins, a_wins.astype(float))


def triage_replay(
    played: Comparisons,
    calibration: np.ndarray,
    cheap: np.ndarray,
    thresholds: Sequence[float],
    C: float = 1.0,
) -> tuple[pl.DataFrame, float]:
    """Replay probability triage on a finished tournament: ``(threshold, llm_calls_saved,
    tau_to_full_judge, tau_se)`` per threshold, and the calibration slope ``k``.

    ``cheap`` (Q, n) is a cheap pointwise relevance of every pool member; a pair's margin
    ``cheap[q, a] − cheap[q, b]`` is calibrated (:func:`calibrate_margin`) on the rows flagged
    ``calibration`` (e.g. round 1); per threshold the confident pairs take the cheap hard
    outcome, the rest keep the judge's, BT is refitted and compared (Kendall τ-b per query,
    mean ± s.e.) with BT on the judge's outcomes alone.
    """
    q, a, b, y = played.q, played.a, played.b, played.y
    margin = cheap[q, a] - cheap[q, b]
    k = calibrate_margin(margin[calibration], y[calibration])
    p_cheap = expit(k * margin)
    full = fit_bradley_terry(played, C=C)
    rows = []
    for threshold in thresholds:
        split = triage_by_probability(p_cheap, threshold)
        beta = fit_bradley_terry(played.with_outcomes(split.merge(y[split.llm])), C=C)
        tau, se = mean_and_se(kendall_tau_b(beta, full))
        rows.append(
            {
                "threshold": threshold,
                "llm_calls_saved": split.saved_fraction,
                "tau_to_full_judge": tau,
                "tau_se": se,
            }
        )
    return pl.DataFrame(rows), k
