"""Style-controlled Bradley–Terry: per-query strengths and shared style coefficients, jointly.

Arena-Hard's style control, on the tournament's comparisons. Each candidate ``i`` of query ``q``
has standardized style features ``z_qi`` (K,) (:mod:`saber_core.rating.style`) and

    P(a beats b) = σ(d_r),   d_r = (θ_qa − θ_qb) + β · (z_qa − z_qb),

with ``θ`` (Q, n) the style-free strengths and ``β`` (K,) the judge's taste for each feature,
shared by all queries. ``(θ, β)`` minimize the penalized loss

    f(θ, β) = ½‖θ‖² + ½λ‖β‖² + C · Σ_r [ log(1 + e^{d_r}) − y_r d_r ],

``θ`` penalized as :func:`saber_core.rating.bradley_terry.fit_bradley_terry` penalizes it (so
with no features the fit is that one), ``β`` only lightly (``λ`` = :data:`BETA_PENALTY`, which
keeps the optimum finite when a feature separates the outcomes). Gradient, with the residual
``g`` (Q, n) = C Σ_r (σ(d_r) − y_r)(e_qa − e_qb)::

    ∇_θ f = θ + g,        ∇_β f = λβ + Σ_qi g_qi z_qi.

Each candidate shows the judge one fixed text, so ``β`` is identified through the ``θ`` penalty:
``θ`` is a random effect with prior N(0, C) and ``β`` the fixed effect of style — the share of
strength that style explains across all candidates. A judge's taste for style and a true link
between style and relevance look the same to this fit.

Intervals for ``β``: Laplace (observed Fisher information of the penalized likelihood). With
``W_q = C Σ_r σ(d_r)(1 − σ(d_r)) x_r x_rᵀ`` (``x_r = e_a − e_b``) the Hessian blocks are
``H_θθ = I + W_q`` (per query), ``H_θβ = W_q Z_q`` and ``H_ββ = λI + Σ_q Z_qᵀ W_q Z_q``;
``Cov(β) = C · S⁻¹`` with the Schur complement ``S = H_ββ − Σ_q Z_qᵀ W_q (I + W_q)⁻¹ W_q Z_q``
(``θ`` integrated out; ``C ·`` turns ``f`` into a negative log posterior, ``f / C``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit
from scipy.stats import norm, spearmanr

from saber_core.rating.comparisons import Comparisons

BETA_PENALTY = 0.01  # λ: prior N(0, C / λ) on each coefficient (logit per SD of the feature)


@dataclass(frozen=True)
class StyleFit:
    """The joint fit: ``theta`` (Q, n) style-free strengths, ``beta`` (K,) coefficients, their
    standard errors ``se``, 95% intervals ``lower``/``upper`` (``β ± 1.96 se``), each feature's
    ``variance_share`` and all features' ``total_share`` of the within-query rating variance
    (:func:`variance_shares`), and the final gradient norm ``grad_norm``."""

    theta: np.ndarray
    beta: np.ndarray
    se: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    variance_share: np.ndarray
    total_share: float
    grad_norm: float

    def strengths(self, z: np.ndarray) -> np.ndarray:
        """The strengths the judge acts on, style included: ``θ + z · β`` (Q, n)."""
        return self.theta + z @ self.beta


def _rows(comparisons: Comparisons) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flat (Q·n) indices of ``a`` and ``b`` and the outcomes of the decided rows."""
    comparisons.validate()
    kept = comparisons.select(comparisons.decided)
    n = comparisons.n_players
    return kept.q * n + kept.a, kept.q * n + kept.b, kept.y


def style_objective(
    params: np.ndarray,
    ia: np.ndarray,
    ib: np.ndarray,
    y: np.ndarray,
    z: np.ndarray,
    c: float,
    lam: float = BETA_PENALTY,
) -> tuple[float, np.ndarray]:
    """``f(θ, β)`` and its gradient (module docstring) at ``params = [θ.ravel(), β]``; ``ia``,
    ``ib`` flat indices into θ, ``z`` (Q·n, K)."""
    m = z.shape[0]
    theta, beta = params[:m], params[m:]
    s = theta + z @ beta
    d = s[ia] - s[ib]
    loss = float(np.sum(np.logaddexp(0.0, d) - y * d))
    r = c * (expit(d) - y)
    g = np.bincount(ia, r, m) - np.bincount(ib, r, m)
    f = 0.5 * theta @ theta + 0.5 * lam * beta @ beta + c * loss
    return f, np.concatenate([theta + g, lam * beta + z.T @ g])


def _laplacians(comparisons: Comparisons, s: np.ndarray, c: float) -> np.ndarray:
    """``W_q = C Σ_r σ(d_r)(1 − σ(d_r)) x_r x_rᵀ`` (Q, n, n) at the strengths ``s`` (Q, n)."""
    nq, n = s.shape
    kept = comparisons.select(comparisons.decided)
    p = expit(s[kept.q, kept.a] - s[kept.q, kept.b])
    w = c * p * (1.0 - p)
    lap = np.zeros((nq, n, n))
    for i, j, sign in ((kept.a, kept.a, 1.0), (kept.b, kept.b, 1.0), (kept.a, kept.b, -1.0)):
        np.add.at(lap, (kept.q, i, j), sign * w)
        if sign < 0:
            np.add.at(lap, (kept.q, j, i), sign * w)
    return lap


def _schur(lap: np.ndarray, z: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """``S`` (K, K) (module docstring) and ``(I + W_q)⁻¹ W_q Z_q`` (Q, n, K)."""
    wz = lap @ z
    solved = np.linalg.solve(np.eye(lap.shape[1]) + lap, wz)
    schur = lam * np.eye(z.shape[2]) + np.einsum("qik,qil->kl", z, wz - lap @ solved)
    return schur, solved


def _newton_step(lap: np.ndarray, z: np.ndarray, grad: np.ndarray, lam: float) -> np.ndarray:
    """``H⁻¹ ∇f`` by the block structure: ``Δβ = S⁻¹ (∇_β − Σ_q (W_q Z_q)ᵀ A_q⁻¹ ∇_θq)``,
    ``Δθ_q = A_q⁻¹ (∇_θq − W_q Z_q Δβ)`` with ``A_q = I + W_q``."""
    nq, n, _ = z.shape
    g_theta, g_beta = grad[: nq * n].reshape(nq, n), grad[nq * n :]
    schur, solved = _schur(lap, z, lam)
    a_inv_g = np.linalg.solve(np.eye(n) + lap, g_theta[..., None])[..., 0]
    d_beta = np.linalg.solve(schur, g_beta - np.einsum("qik,qi->k", lap @ z, a_inv_g))
    d_theta = a_inv_g - solved @ d_beta
    return np.concatenate([d_theta.ravel(), d_beta])


def variance_shares(
    theta: np.ndarray, z: np.ndarray, beta: np.ndarray, games: np.ndarray
) -> tuple[np.ndarray, float]:
    """Per feature ``Σ_q Var_q(z_k β_k) / Σ_q Var_q(θ + z · β)`` and the same for ``z · β``:
    variances within each query (the ranking is within queries) over its candidates with a
    decided game, summed over queries."""
    style = z * beta  # (Q, n, K)
    total = theta + style.sum(axis=-1)
    played = games > 0

    def within(x: np.ndarray) -> float:
        return float(sum(np.var(x[q][played[q]]) for q in range(x.shape[0]) if played[q].sum() > 1))

    denominator = within(total)
    if denominator == 0.0:
        return np.zeros(len(beta)), 0.0
    shares = np.array([within(style[..., k]) for k in range(len(beta))]) / denominator
    return shares, within(style.sum(axis=-1)) / denominator


def fit_style_bradley_terry(
    comparisons: Comparisons,
    z: np.ndarray,
    C: float = 1.0,
    gtol: float = 1e-9,
    max_iter: int = 20_000,
    polish: int = 8,
) -> StyleFit:
    """Jointly fit ``θ`` (Q, n) and ``β`` (K,) (module docstring); ``z`` (Q, n, K) are the
    standardized features of every pool candidate.

    L-BFGS with the analytic gradient from ``θ = 0, β = 0`` until it stops making progress
    (float resolution of ``f`` ends it near |∇f|∞ ≈ 1e-5), then up to ``polish`` Newton steps
    (the Hessian's block structure, module docstring) until every gradient entry is below
    ``gtol``. ``f`` is strictly convex (``H ⪰ min(1, λ) I``), so the optimum is unique and
    ``‖x − x*‖ ≤ ‖∇f‖ / min(1, λ)``. RuntimeError if the gradient stays above ``1000 · gtol``.
    """
    if not C > 0:
        raise ValueError(f"C must be > 0, got {C}")
    nq, n = comparisons.n_queries, comparisons.n_players
    if z.ndim != 3 or z.shape[:2] != (nq, n):
        raise ValueError(f"z must be (Q, n, K) = ({nq}, {n}, K), got {z.shape}")
    z = np.asarray(z, dtype=float)
    ia, ib, y = _rows(comparisons)
    zf = z.reshape(nq * n, -1)
    args = (ia, ib, y, zf, C)
    x = minimize(
        style_objective,
        np.zeros(nq * n + zf.shape[1]),
        args=args,
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": max_iter, "maxfun": 2 * max_iter, "gtol": gtol},
    ).x
    grad = style_objective(x, *args)[1]
    for _ in range(polish):
        if np.abs(grad).max(initial=0.0) < gtol:
            break
        s = x[: nq * n].reshape(nq, n) + z @ x[nq * n :]
        x = x - _newton_step(_laplacians(comparisons, s, C), z, grad, BETA_PENALTY)
        grad = style_objective(x, *args)[1]
    grad_norm = float(np.abs(grad).max(initial=0.0))
    if grad_norm > 1000 * gtol:
        raise RuntimeError(f"style Bradley–Terry: stopped at |∇f|∞ = {grad_norm:.2e}")
    theta, beta = x[: nq * n].reshape(nq, n), x[nq * n :]
    schur, _ = _schur(_laplacians(comparisons, theta + z @ beta, C), z, BETA_PENALTY)
    se = np.sqrt(np.diag(C * np.linalg.inv(schur)))
    half = norm.ppf(0.975) * se
    shares, total = variance_shares(theta, z, beta, comparisons.games())
    return StyleFit(theta, beta, se, beta - half, beta + half, shares, total, grad_norm)


def rank_changes(plain: np.ndarray, style_free: np.ndarray) -> tuple[float, int]:
    """Mean over queries of the Spearman correlation of two strength matrices (Q, n) (queries
    with a constant row skipped; NaN if all are), and how many candidates' rank within their
    query differs (ranks by strength descending, ties by pool position)."""
    rho = [
        spearmanr(p, s).statistic
        for p, s in zip(plain, style_free, strict=True)
        if np.ptp(p) > 0 and np.ptp(s) > 0
    ]
    ranks = [np.argsort(np.argsort(-x, axis=1, kind="stable"), axis=1) for x in (plain, style_free)]
    return float(np.mean(rho)) if rho else float("nan"), int((ranks[0] != ranks[1]).sum())
