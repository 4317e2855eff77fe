"""docs/sabermath.md §11: Bradley–Terry scores (``build_benchmark/generate_scores/{bradley_terry.py,
bradley_terry_run.py}``, ``build_benchmark/final_transform.py``).

Per query: one row per recorded match, ``+1`` in the Sample-1 column and ``−1`` in the Sample-2
column, ``y = 1`` if Sample 1 won; the players (columns) are the ids seen in the matches, in order
of first appearance in the Sample-1 column, then the Sample-2 column (``pd.unique`` of the two
columns, column by column; the order changes nothing but float round-off). If all labels are
equal, a zero row with the opposite label and weight 0 is added. The strengths are the
coefficients of scikit-learn's ``LogisticRegression(fit_intercept=False, C=1.0)`` (L2, lbfgs,
tol 1e-4, max_iter 100), reproduced here without scikit-learn, as scikit-learn 1.9.1 sets it up
(``linear_model/_logistic.py``, ``_linear_loss.py``)::

    f(w) = Σ_r s_r ℓ(y_r, z_r) / Σ_r s_r + ½ λ ‖w‖²,   λ = 1 / (C Σ_r s_r),   z_r = w_a − w_b
    ℓ(y, z) = log(1 + e^z) − y z   (HalfBinomialLoss, its piecewise stable forms)
    ∇f = Xᵀ (s (σ(z) − y) / Σ s) + λ w

minimized by ``scipy.optimize.minimize(method="L-BFGS-B", jac=True)`` from w = 0 with
``maxiter=100, maxls=50, gtol=1e-4, ftol=64·eps`` (no ``iprint``: SciPy ≥ 1.15).

Relevance (published): strengths read in the query's candidate order, min–max to [0, 1], ×5
(``((β − min) / (max − min)) · 5``). A candidate without a recorded match crashes the published
script (KeyError): here its strength and relevance are NaN and min/max skip it — the caller
decides. Fix ``bt_exact``: the exact penalized optimum of the same objective,
:func:`saber_core.rating.bradley_terry.fit_bradley_terry` (C = 1).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize

from saber_core.rating.bradley_terry import fit_bradley_terry
from saber_core.rating.comparisons import Comparisons

LBFGS_OPTIONS = {"maxiter": 100, "maxls": 50, "gtol": 1e-4, "ftol": 64 * np.finfo(float).eps}


def _half_binomial(y: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's ``closs_grad_half_binomial``: loss and d loss / d z per row, with its
    four branches (z ≤ −37, ≤ −2, ≤ 18, above)."""
    loss, grad = np.empty_like(z), np.empty_like(z)
    branch = np.searchsorted([-37.0, -2.0, 18.0], z, side="left")  # 0: z ≤ −37, …, 3: z > 18
    for k in range(4):
        at = branch == k
        yk, zk = y[at], z[at]
        e = np.exp(zk) if k < 2 else np.exp(-zk)
        if k == 0:
            loss[at], grad[at] = e - yk * zk, e - yk
        elif k == 1:
            loss[at] = np.log1p(e) - yk * zk
            grad[at] = ((1.0 - yk) * e - yk) / (1.0 + e)
        else:
            loss[at] = (np.log1p(e) if k == 2 else e) + (1.0 - yk) * zk
            grad[at] = ((1.0 - yk) - yk * e) / (1.0 + e)
    return loss, grad


def _lbfgs_fit(
    a: np.ndarray, b: np.ndarray, y: np.ndarray, weight: np.ndarray, n: int, c: float
) -> np.ndarray:
    """sklearn's lbfgs coefficients for rows ``x = e_a − e_b`` (columns 0..n−1)."""
    weight_sum = float(weight.sum())
    l2 = 1.0 / (c * weight_sum)

    def loss_gradient(w: np.ndarray) -> tuple[float, np.ndarray]:
        loss, grad = _half_binomial(y, w[a] - w[b])
        pointwise = weight * grad / weight_sum
        value = float((weight * loss).sum() / weight_sum) + float(0.5 * l2 * (w @ w))
        xtg = np.bincount(a, pointwise, minlength=n) - np.bincount(b, pointwise, minlength=n)
        return value, xtg + l2 * w

    result = minimize(
        loss_gradient, np.zeros(n), method="L-BFGS-B", jac=True, options=LBFGS_OPTIONS
    )
    return result.x


def published_strengths(comparisons: Comparisons, C: float = 1.0) -> np.ndarray:
    """Per query the scikit-learn-equivalent strengths (module docstring), (Q, n); NaN for a
    candidate without a decided match. Rows with a NaN outcome (dropped matches) are not
    recorded and so ignored; ``a`` = Sample 1, ``y`` = 1.0 if Sample 1 won."""
    comparisons.validate()
    kept = comparisons.select(comparisons.decided)
    if np.any((kept.y != 0.0) & (kept.y != 1.0)):
        raise ValueError("published Bradley–Terry needs hard outcomes (1.0 or 0.0)")
    out = np.full((comparisons.n_queries, comparisons.n_players), np.nan)
    order = np.argsort(kept.q, kind="stable")
    bounds = np.searchsorted(kept.q[order], np.arange(comparisons.n_queries + 1))
    for query in range(comparisons.n_queries):
        rows = order[bounds[query] : bounds[query + 1]]
        if rows.size == 0:
            continue
        a, b, y = kept.a[rows], kept.b[rows], kept.y[rows]
        players, columns = np.unique(np.concatenate([a, b]), return_index=True)
        players = players[np.argsort(columns)]  # order of first appearance, a-column first
        column = np.empty(comparisons.n_players, dtype=np.int64)
        column[players] = np.arange(len(players))
        weight = np.ones(len(y))
        if np.all(y == y[0]):  # the zero row of weight 0 with the opposite label
            a, b = np.append(column[a], 0), np.append(column[b], 0)
            y, weight = np.append(y, 1.0 - y[0]), np.append(weight, 0.0)
        else:
            a, b = column[a], column[b]
        out[query, players] = _lbfgs_fit(a, b, y, weight, len(players), C)
    return out


def exact_strengths(comparisons: Comparisons, C: float = 1.0) -> np.ndarray:
    """The ``bt_exact`` fix: the exact optimum
    (:func:`saber_core.rating.bradley_terry.fit_bradley_terry`),
    NaN for a candidate without a decided match (as :func:`published_strengths`)."""
    beta = fit_bradley_terry(comparisons, C=C)
    return np.where(comparisons.games() > 0, beta, np.nan)


def relevance_scores(strengths: np.ndarray) -> np.ndarray:
    """``((β − min) / (max − min)) · 5`` per query over its candidates with a strength (NaN stays
    NaN); a query whose strengths are all equal or all NaN gets NaN (published:
    ZeroDivisionError / KeyError)."""
    beta = np.asarray(strengths, dtype=np.float64)
    out = np.full(beta.shape, np.nan)
    for query, row in enumerate(beta):
        finite = ~np.isnan(row)
        if not finite.any():
            continue
        low, high = row[finite].min(), row[finite].max()
        if high > low:
            out[query] = (row - low) / (high - low) * 5
    return out


def bt_relevance(comparisons: Comparisons, bt_exact: bool = False) -> np.ndarray:
    """The query's relevance scores in [0, 5] (Q, n), candidate order: published strengths or,
    with ``bt_exact``, the exact optimum; NaN as :func:`relevance_scores`."""
    strengths = exact_strengths(comparisons) if bt_exact else published_strengths(comparisons)
    return relevance_scores(strengths)
