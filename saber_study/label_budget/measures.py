"""What the label-budget study measures, per seed (one leaderboard of Q queries × R retrievers).

Per query: nDCG@10 (SABER's gain ``2^y − 1``, ideal over all candidates; :func:`ndcg10`) of each
retriever under a design's labels (``est``) and under the true labels of the same scale
(``truth``, the scale applied to the latent strengths). Per leaderboard (means over queries,
``L``):

* ``delta_r = L_r(est) − L_r(truth)``; ``abs_dndcg = mean_r |delta_r|``; the common shift
  ``mean_r delta_r`` and ``abs_dndcg_shift_removed = mean_r |delta_r − shift|``.
* ``tau``: Kendall τ-b between the two leaderboards; ``tau_ap``: AP correlation (Yilmaz, Aslam
  and Robertson 2008), walking the labels' leaderboard from the top:
  ``τ_AP = 2 / (R − 1) Σ_{i=2..R} C(i) / (i − 1) − 1`` with ``C(i)`` the retrievers placed above
  the i-th one by the labels that the true labels also place above it (1 = same order; swaps at
  the top cost most).
* Paired significance of every retriever pair (r, r') over queries: two-sided paired t-test at
  ``α = 0.05`` on ``d_q = nDCG_r − nDCG_r'`` (``t = mean(d) / (sd(d) / √Q)``, sd with Q − 1,
  Student-t with Q − 1 degrees of freedom); the verdict is +1 / −1 (significant, sign of the
  mean) or 0. ``sig_agreement`` = share of pairs whose verdict under the labels equals the
  verdict under the true labels; a reversal = a significant verdict under the labels whose sign
  is opposite to the true labels' mean difference.
* Confidence intervals: the percentile bootstrap 95% interval of ``L_r(est)`` (queries resampled
  with replacement, ``B`` resamples shared by every retriever and design of the seed). Coverage
  is judged against the true-label value of the retriever: its expected nDCG@10 under the true
  labels over the query population (estimated by the mean over every simulated query of every
  seed).
"""

from __future__ import annotations

import numpy as np
from scipy.stats import t as student_t

from saber_core.validity.reliability import kendall_tau_b

K = 10
DISCOUNTS = 1.0 / np.log2(np.arange(2, K + 2))
ALPHA = 0.05


def top10(scores: np.ndarray) -> np.ndarray:
    """Indices (…, 10) of the 10 highest scores of each row, best first (ties: lower index)."""
    part = np.argpartition(-scores, K - 1, axis=-1)[..., :K]
    vals = np.take_along_axis(scores, part, axis=-1)
    order = np.lexsort((part, -vals), axis=-1)
    return np.take_along_axis(part, order, axis=-1)


def dcg10(labels: np.ndarray, tops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """DCG@10 (R, Q) of rankings whose top 10 are ``tops`` (R, Q, 10) under ``labels`` (Q, n)
    (gain ``2^y − 1``) and the ideal DCG@10 (Q,) over all candidates."""
    gains = np.exp2(labels) - 1.0
    dcg = np.take_along_axis(gains[None], tops, axis=-1) @ DISCOUNTS
    best = -np.sort(np.partition(-gains, K - 1, axis=-1)[..., :K], axis=-1)
    return dcg, best @ DISCOUNTS


def normalized(dcg: np.ndarray, ideal: np.ndarray) -> np.ndarray:
    """``dcg / ideal`` (R, Q) with 0 where the ideal (Q,) is 0."""
    out = np.zeros(dcg.shape)
    np.divide(dcg, ideal[None], out=out, where=ideal[None] > 0)
    return out


def ndcg10(labels: np.ndarray, tops: np.ndarray) -> np.ndarray:
    """nDCG@10 (R, Q): :func:`dcg10` divided by its ideal, 0 where the ideal is 0."""
    return normalized(*dcg10(labels, tops))


def tau_ap(estimate: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """AP correlation (module docstring) per row of (C, R) leaderboards."""
    est = np.asarray(estimate, dtype=float)
    tru = np.asarray(truth, dtype=float)
    r = est.shape[-1]
    order = np.argsort(-est, axis=-1, kind="stable")
    t_sorted = np.take_along_axis(tru, order, axis=-1)  # truth of the retrievers in est order
    above = t_sorted[..., None, :] > t_sorted[..., :, None]  # [i, j]: j truly above i
    earlier = np.tril(np.ones((r, r), dtype=bool), k=-1)  # j placed above i by the labels
    correct = (above & earlier).sum(axis=-1)[..., 1:]
    return 2.0 / (r - 1) * (correct / np.arange(1, r)).sum(axis=-1) - 1.0


def verdicts(per_query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Paired t-test verdicts (C, P) ∈ {−1, 0, 1} and mean differences (C, P) of every pair
    r < r' (``np.triu_indices(R, 1)`` order) of per-query values (C, R, Q)."""
    x = np.asarray(per_query, dtype=np.float64)
    q = x.shape[-1]
    mean = x.mean(axis=-1)
    second = np.einsum("crq,csq->crs", x, x) / q
    i, j = np.triu_indices(x.shape[1], k=1)
    diff = mean[:, i] - mean[:, j]
    var = (second[:, i, i] + second[:, j, j] - 2.0 * second[:, i, j] - diff**2) * q / (q - 1)
    se = np.sqrt(np.maximum(var, 0.0) / q)
    crit = student_t.ppf(1.0 - ALPHA / 2.0, q - 1)
    t = np.divide(diff, se, out=np.zeros_like(diff), where=se > 0)
    sig = (np.abs(t) > crit) | ((se == 0) & (diff != 0))
    return np.where(sig, np.sign(diff), 0.0), diff


def bootstrap_weights(n_queries: int, n_resamples: int, seed: int) -> np.ndarray:
    """(B, Q) float32 multiplicities of each query in each resample (``default_rng(seed)``)."""
    idx = np.random.default_rng(seed).integers(0, n_queries, (n_resamples, n_queries))
    w = np.zeros((n_resamples, n_queries), dtype=np.float32)
    np.add.at(w, (np.arange(n_resamples)[:, None], idx), 1.0)
    return w


def bootstrap_intervals(per_query: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Percentile 95% intervals (…, 2) of the mean over queries of ``per_query`` (…, Q)."""
    shape = per_query.shape[:-1]
    flat = per_query.reshape(-1, per_query.shape[-1]).astype(np.float32)
    means = flat @ weights.T / weights.shape[1]
    lo, hi = np.percentile(means, [100 * ALPHA / 2, 100 * (1 - ALPHA / 2)], axis=1)
    return np.stack([lo, hi], axis=-1).reshape(*shape, 2)


def leaderboard_measures(est: np.ndarray, truth: np.ndarray) -> dict[str, np.ndarray]:
    """Per design row c of ``est`` (C, R, Q) against ``truth`` (C, R, Q) (the true-label values
    of row c's scale): ``delta`` (C, R), ``tau``, ``tau_ap``, ``sig_agreement``, ``reversals``
    (C,) (module docstring)."""
    own, ref = est.mean(axis=-1), truth.mean(axis=-1)
    v_est, _ = verdicts(est)
    v_true, d_true = verdicts(truth)
    return {
        "delta": own - ref,
        "tau": kendall_tau_b(own, ref),
        "tau_ap": tau_ap(own, ref),
        "sig_agreement": (v_est == v_true).mean(axis=-1),
        "reversals": ((v_est != 0) & (v_est == -np.sign(d_true))).sum(axis=-1),
    }
