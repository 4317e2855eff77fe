"""Multiple-testing correction: Holm's step-down (Holm–Bonferroni) adjusted p-values.

For a family of m raw p-values sorted ascending, p_(1) ≤ … ≤ p_(m),

    adj_(i) = max_{j ≤ i} min(1, (m − j + 1) · p_(j)),

returned in the input order. Rejecting every hypothesis whose adjusted p is ≤ α controls the
family-wise error rate (the chance of any false rejection) at α, without assuming independence;
it rejects the same hypotheses as Holm's procedure (p_(j) ≤ α / (m − j + 1) for all j ≤ i).
Tied raw p-values get the same adjusted value.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def holm(p_values: ArrayLike) -> np.ndarray:
    """Holm-adjusted p-values of one family, in the input order (module docstring)."""
    p = np.asarray(p_values, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError(f"p-values must be one vector, got shape {p.shape}")
    bad = np.flatnonzero(~((p >= 0) & (p <= 1)))  # also catches NaN
    if len(bad):
        raise ValueError(f"p-value #{bad[0]} = {p[bad[0]]} is not in [0, 1]")
    m = len(p)
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted
