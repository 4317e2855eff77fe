"""Bradley–Terry strengths from pairwise outcomes, batched over queries (SPEC "Stage 4").

Per query the strengths ``β`` (n,) minimize the L2-regularized logistic loss of the reference
(scikit-learn ``LogisticRegression(fit_intercept=False, C=C)`` on rows ``x = e_a - e_b``)::

    f(β) = ½‖β‖² + C · Σ_r [ log(1 + exp(z_r)) - y_r z_r ],   z_r = β_a - β_b,

where ``y_r`` is the probability that ``a`` beats ``b`` (1 / 0 for hard outcomes). Gradient
``β + C Σ_r (σ(z_r) - y_r) x_r``; Hessian ``I + C Σ_r σ(z_r)(1 - σ(z_r)) x_r x_rᵀ``.
"""

from __future__ import annotations

import warnings
from contextlib import AbstractContextManager, nullcontext

import numpy as np
from scipy.special import expit

from saber_core.rating.comparisons import Comparisons

_CHUNK_ELEMENTS = 250_000  # Hessian entries (Q_chunk · n · n) held at once


def _single_threaded_blas() -> AbstractContextManager:
    """Limit BLAS/LAPACK to one thread while solving many small (n × n) systems.

    Threads give no speed-up at n ≈ 150, and when the CPU is shared with other processes a
    threaded OpenBLAS becomes ~10× slower (measured: 1 s → 12 s). Uses ``threadpoolctl`` when it
    is installed (it comes with scikit-learn / sentence-transformers); otherwise a no-op.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - optional
        return nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def _objective(
    beta: np.ndarray, q: np.ndarray, z: np.ndarray, y: np.ndarray, c: float
) -> np.ndarray:
    """Per-query f(β) (see the module docstring); ``z`` = β_a − β_b for every row."""
    loss = np.bincount(q, np.logaddexp(0.0, z) - y * z, minlength=len(beta))
    return 0.5 * np.einsum("qi,qi->q", beta, beta) + c * loss


def _fit_chunk(q, a, b, y, nq, n, c, tol, max_iter) -> tuple[np.ndarray, np.ndarray]:
    """Damped Newton for ``nq`` queries at once; returns (β (nq, n), converged (nq,))."""
    beta = np.zeros((nq, n))
    ia, ib = q * n + a, q * n + b  # flat indices into (nq, n)
    nn = n * n
    hess_idx = np.concatenate([q * nn + a * (n + 1), q * nn + b * (n + 1), q * nn + a * n + b])
    hess_idx = np.concatenate([hess_idx, q * nn + b * n + a])
    eye = np.arange(n) * (n + 1)
    converged = np.zeros(nq, dtype=bool)
    for it in range(max_iter + 1):
        z = beta.reshape(-1)[ia] - beta.reshape(-1)[ib]
        s = expit(z)
        r = c * (s - y)
        grad = beta + (np.bincount(ia, r, nq * n) - np.bincount(ib, r, nq * n)).reshape(nq, n)
        converged = np.linalg.norm(grad, axis=1) < tol
        if converged.all() or it == max_iter:
            break
        w = c * s * (1.0 - s)
        hess = np.bincount(hess_idx, np.concatenate([w, w, -w, -w]), nq * nn).reshape(nq, nn)
        hess[:, eye] += 1.0
        step = np.zeros_like(beta)
        act = np.flatnonzero(~converged)
        h = (hess if act.size == nq else hess[act]).reshape(-1, n, n)
        step[act] = np.linalg.solve(h, grad[act][..., None])[..., 0]
        # Backtracking (Armijo) per query; the slack absorbs round-off near the optimum.
        f0 = _objective(beta, q, z, y, c)
        slope = np.einsum("qi,qi->q", grad, step)
        t = np.ones(nq)
        pending = ~converged
        for _ in range(60):
            trial = beta - t[:, None] * step
            zt = trial.reshape(-1)[ia] - trial.reshape(-1)[ib]
            ft = _objective(trial, q, zt, y, c)
            bad = pending & (ft > f0 - 1e-4 * t * slope + 1e-12 * np.maximum(1.0, np.abs(f0)))
            if not bad.any():
                break
            t[bad] *= 0.5
            pending = bad
        beta = beta - t[:, None] * step
    return beta, converged


def fit_bradley_terry(
    comparisons: Comparisons, C: float = 1.0, tol: float = 1e-10, max_iter: int = 100
) -> np.ndarray:
    """Raw Bradley–Terry strengths β (Q, n), ``P(a beats b) = σ(β_a − β_b)``.

    Minimizes, per query, ``½‖β‖² + C Σ_r [log(1 + e^{z_r}) − y_r z_r]`` with ``z_r = β_a − β_b``
    and ``y_r`` ∈ [0, 1] the row's outcome (soft outcomes allowed; NaN rows = dropped judgments
    are ignored). Batched damped Newton over all queries, stopping when ‖∇f‖₂ < ``tol`` per query
    (RuntimeWarning if some query has not converged after ``max_iter`` iterations). Players
    without comparisons end at 0. Invalid rows raise ValueError naming the row and field.
    """
    if not C > 0:
        raise ValueError(f"C must be > 0, got {C}")
    comparisons.validate()
    n_queries, n_players = comparisons.n_queries, comparisons.n_players
    kept = comparisons.select(comparisons.decided)
    rows_order = np.argsort(kept.q, kind="stable")
    query_idx, a, b, y = (x[rows_order] for x in (kept.q, kept.a, kept.b, kept.y))

    beta = np.zeros((n_queries, n_players))
    if n_players == 0:
        return beta
    chunk = max(1, _CHUNK_ELEMENTS // (n_players * n_players))
    bounds = np.searchsorted(query_idx, np.arange(0, n_queries + chunk, chunk))
    not_converged = 0
    with _single_threaded_blas():
        for k, start in enumerate(range(0, n_queries, chunk)):
            stop = min(start + chunk, n_queries)
            sl = slice(bounds[k], bounds[k + 1])
            qk = query_idx[sl] - start
            beta[start:stop], ok = _fit_chunk(
                qk, a[sl], b[sl], y[sl], stop - start, n_players, C, tol, max_iter
            )
            not_converged += int((~ok).sum())
    if not_converged:
        warnings.warn(
            f"Bradley–Terry: {not_converged} queries did not reach ‖grad‖ < {tol} "
            f"in {max_iter} Newton iterations",
            RuntimeWarning,
            stacklevel=2,
        )
    return beta


def rescale_ratings(beta: np.ndarray) -> np.ndarray:
    """Min–max rescale per query to [0, 5]: ``5 (β − min) / (max − min)``.

    A query whose strengths are all equal (``max == min`` exactly, e.g. no comparisons) has no
    ranking information and gets all 0.0.
    """
    beta = np.asarray(beta, dtype=float)
    lo = beta.min(axis=-1, keepdims=True)
    span = beta.max(axis=-1, keepdims=True) - lo
    flat = span == 0.0
    # (β − lo) / span first: x / x is exactly 1, while (5 x) / x can round to 5 + 1 ulp.
    return np.where(flat, 0.0, 5.0 * ((beta - lo) / np.where(flat, 1.0, span)))
