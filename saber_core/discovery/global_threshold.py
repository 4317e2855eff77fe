"""docs/sabermath.md §7: the global threshold of a signal
(``build_benchmark/select/get_percentile_thresholds.py``).

Published estimator (:func:`zoom_threshold`), over the stored float16 values of all ordered pairs
(self-pairs included), non-finite values skipped, ``M`` finite values:

1. rank ``r = ceil(q · M)`` (Python float product, then ``math.ceil``);
2. ``rounds`` = 4 times: on ``[low, high]`` (first ``[0, 1]``) count the values below ``low``
   and histogram those in ``[low, high]`` into ``bins`` = 1024 equal bins, bin
   ``int((v − low) · bins / (high − low))``, a value on the upper edge in the last bin; the first
   bin whose cumulative count (values below ``low`` included) reaches ``r`` becomes the next
   ``[low, high]``;
3. return the midpoint of the final bin.

Exact-histogram form: the counts of the 65,536 float16 bit patterns (:func:`float16_histogram`,
mergeable across blocks by adding) determine the answer; :func:`histogram_threshold` returns the
closed form ``v + 2⁻⁴¹``, with ``v`` the ``r``-th smallest finite value (``1 − 2⁻⁴¹`` when
``v = 1``; for ``r = 0`` the smallest value, which must be 0 — else the zoom, always keeping the
first bin, runs out of values and raises). It equals the zoom because float16 values in [0, 1] are
multiples of 2⁻²⁴, so every zoom bound is exact and the final bin (width 2⁻⁴⁰) starts at ``v``.
Only values in [0, 1] are allowed there (BMA and Jaccard are).
"""

from __future__ import annotations

import math

import numpy as np

from saber_core.published import THRESHOLD_QUANTILE, ZOOM_BINS, ZOOM_ROUNDS

FINAL_HALF_WIDTH = 2.0**-41  # half of the last zoom bin: (1 / 1024)**4 / 2


def _check_quantile(quantile: float) -> None:
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {quantile}")


def zoom_threshold(
    values: np.ndarray,
    quantile: float = THRESHOLD_QUANTILE,
    rounds: int = ZOOM_ROUNDS,
    bins: int = ZOOM_BINS,
) -> float:
    """The published histogram-zoom estimate of the ``quantile`` of ``values`` (module
    docstring), computed literally (float64 arithmetic as the published code)."""
    _check_quantile(quantile)
    if bins <= 1 or rounds < 0:
        raise ValueError(f"need bins > 1 and rounds >= 0, got bins={bins}, rounds={rounds}")
    data = np.asarray(values).astype(np.float64).ravel()
    data = data[np.isfinite(data)]
    if data.size == 0:
        raise ValueError("no finite values")
    rank = math.ceil(quantile * data.size)
    low, high = 0.0, 1.0
    for _ in range(rounds):
        if low == high:
            return low
        inside = data[(data >= low) & (data <= high)]
        if inside.size == 0:
            raise ValueError(f"no values within [{low}, {high}]")
        index = ((inside - low) * (bins / (high - low))).astype(np.int64)
        index[index == bins] = bins - 1
        cumulative = np.count_nonzero(data < low) + np.cumsum(np.bincount(index, minlength=bins))
        width = (high - low) / bins
        low = low + int(np.searchsorted(cumulative, rank, side="left")) * width
        high = low + width
    return low if low == high else (low + high) / 2.0


def float16_histogram(values: np.ndarray) -> np.ndarray:
    """Counts of each float16 bit pattern in ``values`` (cast to float16), (65536,) int64."""
    bits = np.ascontiguousarray(values, dtype=np.float16).view(np.uint16).ravel()
    return np.bincount(bits, minlength=1 << 16).astype(np.int64)


_PATTERN_VALUES = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float64)
_FINITE_PATTERNS = np.flatnonzero(np.isfinite(_PATTERN_VALUES))
_FINITE_BY_VALUE = _FINITE_PATTERNS[np.argsort(_PATTERN_VALUES[_FINITE_PATTERNS], kind="stable")]


def histogram_threshold(counts: np.ndarray, quantile: float = THRESHOLD_QUANTILE) -> float:
    """The published threshold from a :func:`float16_histogram` (summed over blocks): the
    closed form ``v + 2⁻⁴¹`` of the module docstring. ValueError when there is no finite value,
    ``v`` lies outside [0, 1], or the rank is 0 and the smallest value is not 0."""
    _check_quantile(quantile)
    counts = np.asarray(counts, dtype=np.int64)
    if counts.shape != (1 << 16,):
        raise ValueError(f"counts must have one entry per float16 pattern, got {counts.shape}")
    cumulative = np.cumsum(counts[_FINITE_BY_VALUE])
    total = int(cumulative[-1])
    if total == 0:
        raise ValueError("no finite values")
    rank = math.ceil(quantile * total)
    value = float(_PATTERN_VALUES[_FINITE_BY_VALUE[np.searchsorted(cumulative, max(rank, 1))]])
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"the rank-{rank} value {value} is outside [0, 1]")
    if rank == 0 and value != 0.0:  # the zoom keeps the first bin, which soon holds no value
        raise ValueError(f"rank 0: the zoom finds no values near 0 (smallest value {value})")
    return 1.0 - FINAL_HALF_WIDTH if value == 1.0 else value + FINAL_HALF_WIDTH
