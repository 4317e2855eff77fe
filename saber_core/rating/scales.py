"""Label scales: Bradley–Terry strengths (queries × candidates) → relevance labels in [0, 5].

One entry point, :func:`scale_ratings`, so the build config can name a scale (``label_scale``).
``β`` is a (Q, n) array of strengths, NaN where a query has fewer candidates (absent); absent
candidates stay NaN. Statistics are over each query's present candidates; ``β̄`` is their mean and
``clip(x) = min(max(x, 0), 1)``.

* ``minmax`` (the published ``sabermath`` default): ``y = 5 (β − min) / (max − min)``; a query
  whose strengths are all equal gets 0.0 (as ``saber_core.rating.bradley_terry.rescale_ratings``).
  The two most extreme — and noisiest — estimates set every label.
* ``quantile`` (robust anchors): ``y = 5 clip((β − q_lo) / (q_hi − q_lo))`` with ``q_lo``,
  ``q_hi`` the query's ``quantile_low`` / ``quantile_high`` quantiles of β (numpy's linear
  interpolation); candidates beyond an anchor get 0 or 5.
* ``zscore`` (noise-corrected): ``z = (β − β̄) / σ̂``, ``σ̂² = var(β) − mean(noise_var)`` (the
  spread of β minus the estimation noise it contains, floored at ``min_reliability · var(β)``),
  ``y = 5 clip(½ + z / (2 z_width))``: ``z = ±z_width`` map to 0 and 5. Without noise it is the
  z-score of β; ``noise_var`` (Q, n) or (Q,) is the sampling variance of each strength.
* ``posterior_gain`` (the ``zscore`` labels, estimated without the winner's curse): with ``ẑ``
  and ``σ̂`` of ``zscore``, the noise on the z scale ``ν_i = noise_var_i / σ̂²`` and the prior
  ``z ~ N(0, 1)`` (a z-score has unit variance), the posterior is ``z_i ~ N(λ_i ẑ_i, λ_i ν_i)``
  with ``λ_i = 1 / (1 + ν_i)``; the label is ``log2(1 + G_i)`` with ``G_i`` the posterior
  expected gain ``E[2^{y(z)} − 1]`` of the ``zscore`` label ``y(z)`` (Gauss–Hermite quadrature,
  ``GH_NODES`` nodes). Its gains are unbiased for the true labels' gains (given a calibrated
  posterior), so a retriever's DCG is too, and an ideal ranking picked on them is not inflated
  by the noise. Without noise it equals ``zscore``.
* ``logit`` (a fixed logit-to-grade map shared by all queries):
  ``y = 5 clip((β − β̄ − logit_low) / (logit_high − logit_low))``; strengths are on the judge's
  logit scale, centred on the pool mean (a BT fit has no other origin).
* ``anchored`` (gain against a reference item): ``y = 5 σ(β − β_ref)``, five times the
  probability that the candidate beats the query's reference candidate ``reference[q]``.

``noise_var`` for a BT fit: :func:`saber_core.rating.noise.strength_noise_variance`. All-NaN
queries stay NaN (``anchored`` needs a present reference). Invalid input raises ValueError naming
the query and field.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.special import expit

SCALES = ("minmax", "quantile", "zscore", "posterior_gain", "logit", "anchored")
DEFAULT_SCALE = "minmax"
NOISY = ("zscore", "posterior_gain")  # the scales that use noise_var
MAX_LABEL = 5.0
GH_NODES = 32


@dataclass(frozen=True)
class ScaleParams:
    """The scales' settings (module docstring); recorded with the labels."""

    quantile_low: float = 0.02
    quantile_high: float = 0.98
    z_width: float = 2.5
    min_reliability: float = 0.1
    logit_low: float = -3.0
    logit_high: float = 3.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.quantile_low < self.quantile_high <= 1.0:
            raise ValueError(
                f"need 0 ≤ quantile_low < quantile_high ≤ 1, got "
                f"{self.quantile_low}, {self.quantile_high}"
            )
        if not self.z_width > 0 or not 0 < self.min_reliability <= 1:
            raise ValueError("z_width must be > 0 and min_reliability in (0, 1]")
        if not self.logit_low < self.logit_high:
            raise ValueError(f"logit_low {self.logit_low} must be < logit_high {self.logit_high}")

    def provenance(self) -> dict[str, float]:
        """The settings as a fingerprint mapping."""
        return asdict(self)


DEFAULT_PARAMS = ScaleParams()


def _unit_clip(x: np.ndarray) -> np.ndarray:
    return MAX_LABEL * np.clip(x, 0.0, 1.0)


def _row_stats(beta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per query: present mask, mean and (population) variance over present candidates."""
    present = np.isfinite(beta)
    count = present.sum(axis=1, keepdims=True)
    filled = np.where(present, beta, 0.0)
    mean = filled.sum(axis=1, keepdims=True) / np.maximum(count, 1)
    var = np.where(present, (beta - mean) ** 2, 0.0).sum(axis=1, keepdims=True)
    return present, mean, var / np.maximum(count, 1)


def minmax_scale(beta: np.ndarray) -> np.ndarray:
    """``5 (β − min) / (max − min)`` per query; all-equal queries 0.0."""
    present = np.isfinite(beta)
    lo = np.min(np.where(present, beta, np.inf), axis=1, keepdims=True)
    span = np.max(np.where(present, beta, -np.inf), axis=1, keepdims=True) - lo
    flat = ~(span > 0)
    out = np.where(flat, 0.0, MAX_LABEL * ((beta - lo) / np.where(flat, 1.0, span)))
    return np.where(present, out, np.nan)


def quantile_scale(beta: np.ndarray, low: float, high: float) -> np.ndarray:
    """``5 clip((β − q_low) / (q_high − q_low))`` with per-query quantiles of β."""
    present = np.isfinite(beta)
    out = np.full(beta.shape, np.nan)
    rows = np.flatnonzero(present.any(axis=1))
    if rows.size:
        q = np.nanquantile(beta[rows], [low, high], axis=1)  # (2, rows)
        lo, span = q[0][:, None], (q[1] - q[0])[:, None]
        flat = ~(span > 0)
        scaled = np.where(flat, 0.0, (beta[rows] - lo) / np.where(flat, 1.0, span))
        out[rows] = _unit_clip(scaled)
    return np.where(present, out, np.nan)


def _z_and_noise(
    beta: np.ndarray, noise_var: np.ndarray, min_reliability: float
) -> tuple[np.ndarray, np.ndarray]:
    """``ẑ = (β − β̄) / σ̂`` and ``ν = noise_var / σ̂²`` (σ̂ as in :func:`zscore_scale`)."""
    present, mean, var = _row_stats(beta)
    noise = np.where(present, noise_var, 0.0).sum(axis=1, keepdims=True)
    noise = noise / np.maximum(present.sum(axis=1, keepdims=True), 1)
    signal = np.maximum(var - noise, min_reliability * var)
    flat = ~(signal > 0)
    safe = np.where(flat, 1.0, signal)
    z = np.where(flat, 0.0, (beta - mean) / np.sqrt(safe))
    return z, np.where(flat, 0.0, noise_var / safe)


def zscore_scale(
    beta: np.ndarray, noise_var: np.ndarray, z_width: float, min_reliability: float
) -> np.ndarray:
    """Noise-corrected z-score: ``z = (β − β̄) / sqrt(var β − mean noise_var)`` → ``5 clip(½ +
    z / (2 z_width))``; the corrected variance is floored at ``min_reliability · var β``."""
    z, _ = _z_and_noise(beta, noise_var, min_reliability)
    return np.where(np.isfinite(beta), _unit_clip(0.5 + z / (2.0 * z_width)), np.nan)


def posterior_gain_scale(
    beta: np.ndarray, noise_var: np.ndarray, z_width: float, min_reliability: float
) -> np.ndarray:
    """``log2(1 + E[2^{y(z)} − 1])`` over the posterior ``z ~ N(λ ẑ, λ ν)``, ``λ = 1 / (1 + ν)``."""
    z, nu = _z_and_noise(beta, noise_var, min_reliability)
    lam = 1.0 / (1.0 + nu)
    nodes, weights = np.polynomial.hermite_e.hermegauss(GH_NODES)
    weights = weights / weights.sum()
    draws = (lam * z)[..., None] + np.sqrt(lam * nu)[..., None] * nodes
    gain = (np.exp2(_unit_clip(0.5 + draws / (2.0 * z_width))) - 1.0) @ weights
    return np.where(np.isfinite(beta), np.log2(1.0 + gain), np.nan)


def logit_scale(beta: np.ndarray, low: float, high: float) -> np.ndarray:
    """``5 clip((β − β̄ − low) / (high − low))``: one logit-to-grade map for every query."""
    present, mean, _ = _row_stats(beta)
    return np.where(present, _unit_clip((beta - mean - low) / (high - low)), np.nan)


def anchored_scale(beta: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``5 σ(β − β_ref)``: five times the probability of beating the query's reference."""
    ref = np.take_along_axis(beta, reference[:, None], axis=1)
    return MAX_LABEL * expit(beta - ref)


def _check(name: str, beta: np.ndarray, noise_var, reference) -> tuple[np.ndarray, ...]:
    if name not in SCALES:
        raise ValueError(f"label scale must be one of {SCALES}, got {name!r}")
    if beta.ndim != 2:
        raise ValueError(f"strengths must be (queries, candidates), got shape {beta.shape}")
    if np.isinf(beta).any():
        q = int(np.argwhere(np.isinf(beta))[0, 0])
        raise ValueError(f"strengths of query {q} contain ±inf")
    nq, n = beta.shape
    noise = np.zeros(beta.shape)
    if name in NOISY and noise_var is not None:
        noise = np.asarray(noise_var, dtype=float)
        noise = noise[:, None] if noise.ndim == 1 else noise
        noise = np.broadcast_to(noise, beta.shape) if noise.shape[1] == 1 else noise
        if noise.shape != beta.shape:
            raise ValueError(f"noise_var must be (Q,) or {beta.shape}, got {noise.shape}")
        bad = np.isfinite(beta) & ~(noise >= 0)
        if bad.any():
            q, i = (int(x) for x in np.argwhere(bad)[0])
            raise ValueError(f"noise_var of query {q}, candidate {i} must be finite and ≥ 0")
    ref = np.zeros(nq, dtype=np.int64)
    if name == "anchored":
        if reference is None:
            raise ValueError("the anchored scale needs a reference candidate per query")
        ref = np.asarray(reference)
        if ref.shape != (nq,) or not np.issubdtype(ref.dtype, np.integer):
            raise ValueError(f"reference must be ({nq},) integer candidate indices")
        bad = (ref < 0) | (ref >= n)
        bad[~bad] = ~np.isfinite(beta[np.flatnonzero(~bad), ref[~bad]])
        if bad.any():
            q = int(np.flatnonzero(bad)[0])
            raise ValueError(f"reference of query {q} ({int(ref[q])}) is not a present candidate")
    return noise, ref.astype(np.int64)


def scale_ratings(
    name: str,
    strengths: np.ndarray,
    *,
    noise_var: np.ndarray | None = None,
    reference: np.ndarray | None = None,
    params: ScaleParams = DEFAULT_PARAMS,
) -> np.ndarray:
    """Labels in [0, 5] (Q, n) from strengths (Q, n, NaN = absent) under scale ``name``.

    ``noise_var`` (zscore and posterior_gain; (Q, n) or (Q,), default 0): the sampling variance
    of each strength. ``reference`` (anchored only, required): the reference candidate of each
    query. Formulas in the module docstring.
    """
    beta = np.asarray(strengths, dtype=float)
    noise, ref = _check(name, beta, noise_var, reference)
    if name == "minmax":
        return minmax_scale(beta)
    if name == "quantile":
        return quantile_scale(beta, params.quantile_low, params.quantile_high)
    if name == "zscore":
        return zscore_scale(beta, noise, params.z_width, params.min_reliability)
    if name == "posterior_gain":
        return posterior_gain_scale(beta, noise, params.z_width, params.min_reliability)
    if name == "logit":
        return logit_scale(beta, params.logit_low, params.logit_high)
    return anchored_scale(beta, ref)
