"""The study's Bradley–Terry solver: the objective of :func:`saber_core.rating.bradley_terry.
fit_bradley_terry` (per query ``½‖β‖² + C Σ_r [log(1 + e^{z_r}) − y_r z_r]``, ``z_r = β_a − β_b``),
minimized per query by damped Newton with a Cholesky factor of the Hessian
``H = I + C Σ_r σ(z_r)(1 − σ(z_r)) x_r x_rᵀ``, compiled (numba) and warm-started from the
previous budget's strengths: the study refits tens of times per query, so this replaces the
build's batched solver here (equal to it to ``tol``; tests/unit/test_label_budget_bt.py).

Rows of query ``q`` are ``a[q, :count[q]]``, ``b[q, :count[q]]``, ``y[q, :count[q]]`` (``y`` = 1
if ``a`` won, 0 if ``b`` won); players ``0 … n − 1``.
"""

from __future__ import annotations

import numba as nb
import numpy as np

TOL = 1e-8
MAX_ITER = 50


@nb.njit(cache=True)
def _objective(beta, a, b, y, m, c):
    f = 0.0
    for i in range(beta.shape[0]):
        f += 0.5 * beta[i] * beta[i]
    for r in range(m):
        z = beta[a[r]] - beta[b[r]]
        f += c * ((max(z, 0.0) + np.log1p(np.exp(-abs(z)))) - y[r] * z)
    return f


@nb.njit(cache=True)
def _cho_solve(low, g):
    n = g.shape[0]
    x = g.copy()
    for i in range(n):  # L u = g
        s = x[i]
        for k in range(i):
            s -= low[i, k] * x[k]
        x[i] = s / low[i, i]
    for i in range(n - 1, -1, -1):  # Lᵀ x = u
        s = x[i]
        for k in range(i + 1, n):
            s -= low[k, i] * x[k]
        x[i] = s / low[i, i]
    return x


@nb.njit(cache=True)
def _gradient(beta, a, b, y, m, c, grad):
    """``grad = ∇f(β)``; returns ‖grad‖₂."""
    grad[:] = beta
    for r in range(m):
        g = c * (1.0 / (1.0 + np.exp(beta[b[r]] - beta[a[r]])) - y[r])
        grad[a[r]] += g
        grad[b[r]] -= g
    return np.sqrt(np.sum(grad * grad))


@nb.njit(cache=True)
def _factor(beta, a, b, m, c, hess):
    """The lower Cholesky factor of ``H`` at β (module docstring)."""
    n = beta.shape[0]
    hess[:, :] = 0.0
    for i in range(n):
        hess[i, i] = 1.0
    for r in range(m):
        p = 1.0 / (1.0 + np.exp(beta[b[r]] - beta[a[r]]))
        w = c * p * (1.0 - p)
        hess[a[r], a[r]] += w
        hess[b[r], b[r]] += w
        hess[a[r], b[r]] -= w
        hess[b[r], a[r]] -= w
    return np.linalg.cholesky(hess)


@nb.njit(cache=True)
def _fit_one(beta, a, b, y, m, c, tol, max_iter):
    """Newton from ``beta`` (modified in place); returns the iterations used (−1: no convergence).

    A step is taken whole when it lowers the gradient norm, else it is halved until the objective
    meets the Armijo condition. The Hessian's Cholesky factor is reused while the gradient norm
    falls at least fourfold per step (a chord step: same optimum), and recomputed otherwise.
    """
    n = beta.shape[0]
    grad = np.empty(n)
    trial_grad = np.empty(n)
    hess = np.empty((n, n))
    low = np.empty((n, n))
    fresh = False
    have = False
    norm = _gradient(beta, a, b, y, m, c, grad)
    ratio = 1.0
    for it in range(max_iter + 1):
        if norm < tol:
            return it
        if it == max_iter:
            break
        if not have or ratio > 0.25:
            low[:, :] = _factor(beta, a, b, m, c, hess)
            have, fresh = True, True
        else:
            fresh = False
        step = _cho_solve(low, grad)
        trial = beta - step
        trial_norm = _gradient(trial, a, b, y, m, c, trial_grad)
        if trial_norm >= norm:
            if not fresh:  # a stale factor: refactor and retry
                have = False
                continue
            f0 = _objective(beta, a, b, y, m, c)
            slope = np.sum(grad * step)
            t = 1.0
            for _ in range(60):
                t *= 0.5
                trial = beta - t * step
                if _objective(trial, a, b, y, m, c) <= f0 - 1e-4 * t * slope:
                    break
            trial_norm = _gradient(trial, a, b, y, m, c, trial_grad)
        ratio = trial_norm / norm
        beta[:] = trial
        grad[:] = trial_grad
        norm = trial_norm
    return -1


@nb.njit(cache=True)
def _fit_all(beta, a, b, y, count, c, tol, max_iter):
    failed = 0
    for q in range(beta.shape[0]):
        if _fit_one(beta[q], a[q], b[q], y[q], count[q], c, tol, max_iter) < 0:
            failed += 1
    return failed


@nb.njit(cache=True)
def _information(beta, a, b, count, c):
    """Per player ``I_i = C Σ_{r ∋ i} σ(z_r)(1 − σ(z_r))`` (the likelihood Hessian's diagonal)."""
    nq, n = beta.shape
    info = np.zeros((nq, n))
    for q in range(nq):
        for r in range(count[q]):
            p = 1.0 / (1.0 + np.exp(-(beta[q, a[q, r]] - beta[q, b[q, r]])))
            w = c * p * (1.0 - p)
            info[q, a[q, r]] += w
            info[q, b[q, r]] += w
    return info


def fit(
    a: np.ndarray,
    b: np.ndarray,
    y: np.ndarray,
    count: np.ndarray,
    n_players: int,
    C: float = 1.0,
    start: np.ndarray | None = None,
    tol: float = TOL,
) -> np.ndarray:
    """BT strengths (Q, n_players) on the first ``count[q]`` rows of each query (module
    docstring), from ``start`` (default zeros). RuntimeError if a query does not converge."""
    nq = len(count)
    beta = np.zeros((nq, n_players)) if start is None else np.array(start, dtype=float)
    failed = _fit_all(
        beta,
        np.ascontiguousarray(a, dtype=np.int64),
        np.ascontiguousarray(b, dtype=np.int64),
        np.ascontiguousarray(y, dtype=np.float64),
        np.ascontiguousarray(count, dtype=np.int64),
        float(C),
        tol,
        MAX_ITER,
    )
    if failed:
        raise RuntimeError(f"Bradley–Terry: {failed} queries did not converge")
    return beta


def sandwich_variance(
    beta: np.ndarray, a: np.ndarray, b: np.ndarray, count: np.ndarray, C: float = 1.0
) -> np.ndarray:
    """Diagonal approximation of the fit's sampling variance ``H⁻¹ I_L H⁻¹`` (I_L the
    likelihood's information, ``H = I + I_L``): ``I_i / (1 + I_i)²`` per player (Q, n)."""
    info = _information(
        np.ascontiguousarray(beta, dtype=np.float64),
        np.ascontiguousarray(a, dtype=np.int64),
        np.ascontiguousarray(b, dtype=np.int64),
        np.ascontiguousarray(count, dtype=np.int64),
        float(C),
    )
    return info / (1.0 + info) ** 2


def information(
    beta: np.ndarray, a: np.ndarray, b: np.ndarray, count: np.ndarray, C: float = 1.0
) -> np.ndarray:
    """``I_i`` per player (Q, n): the likelihood Hessian's diagonal at ``beta``."""
    return _information(
        np.ascontiguousarray(beta, dtype=np.float64),
        np.ascontiguousarray(a, dtype=np.int64),
        np.ascontiguousarray(b, dtype=np.int64),
        np.ascontiguousarray(count, dtype=np.int64),
        float(C),
    )
