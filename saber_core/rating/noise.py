"""The estimation noise of Bradley–Terry strengths, the ``noise_var`` input of the ``zscore`` and
``posterior_gain`` label scales (:mod:`saber_core.rating.scales`).

For the L2 fit of :func:`saber_core.rating.bradley_terry.fit_bradley_terry` (penalty ``½‖β‖²``, loss
weight ``C``) the Hessian at β̂ is ``H = I + I_L`` with ``I_L = C Σ_r σ(z_r)(1 − σ(z_r)) x_r x_rᵀ``
the likelihood's information (``z_r = β̂_a − β̂_b``, ``x_r = e_a − e_b``). The sampling variance of
β̂ is to first order the sandwich ``H⁻¹ I_L H⁻¹``; its diagonal is approximated per candidate by
the diagonal of ``I_L``, ``I_i = C Σ_{r ∋ i} σ(z_r)(1 − σ(z_r))``::

    noise_var_i = I_i / (1 + I_i)²

(exact for a candidate whose opponents are known exactly; 0 for a candidate without games).
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from saber_core.rating.comparisons import Comparisons


def strength_information(comparisons: Comparisons, beta: np.ndarray, C: float = 1.0) -> np.ndarray:
    """``I_i = C Σ_{r ∋ i} σ(z_r)(1 − σ(z_r))`` per query and candidate (Q, n); dropped (NaN)
    judgments do not count."""
    beta = np.asarray(beta, dtype=float)
    nq, n = beta.shape
    if (comparisons.n_queries, comparisons.n_players) != (nq, n):
        raise ValueError(
            f"strengths {beta.shape} do not match the comparisons "
            f"({comparisons.n_queries}, {comparisons.n_players})"
        )
    kept = comparisons.select(comparisons.decided)
    p = expit(beta[kept.q, kept.a] - beta[kept.q, kept.b])
    w = C * p * (1.0 - p)
    info = np.bincount(kept.q * n + kept.a, w, nq * n) + np.bincount(kept.q * n + kept.b, w, nq * n)
    return info.reshape(nq, n)


def strength_noise_variance(
    comparisons: Comparisons, beta: np.ndarray, C: float = 1.0
) -> np.ndarray:
    """``noise_var`` (Q, n) of the L2 BT fit ``beta`` on ``comparisons`` (module docstring)."""
    info = strength_information(comparisons, beta, C)
    return info / (1.0 + info) ** 2
