"""docs/sabermath.md §7: threshold: the literal histogram zoom on hand examples, and literal zoom
== exact
float16 histogram == the sorted-values closed form (sabermath_reference.py) on random data."""

from __future__ import annotations

import numpy as np
import pytest
import sabermath_reference as ref

from saber_core.discovery.global_threshold import (
    float16_histogram,
    histogram_threshold,
    zoom_threshold,
)
from saber_core.published import PUBLISHED_BMA_THRESHOLD, PUBLISHED_JACCARD_THRESHOLD


def test_zoom_by_hand():
    values = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
    # q = 0.5: rank ceil(2.5) = 3. Round 1 puts 0.5 in bin 512 of [0, 1]: cumulative counts reach
    # 3 there, so [512/1024, 513/1024]; then 0.5 always sits on the lower edge of bin 0, and the
    # last bin [0.5, 0.5 + 2⁻⁴⁰] has the midpoint 0.5 + 2⁻⁴¹.
    assert zoom_threshold(values, 0.5) == 0.5 + 2**-41
    # q = 0.9: rank 5 is the value 1, which goes to the last bin every round: 1 − 2⁻⁴¹.
    assert zoom_threshold(values, 0.9) == 1 - 2**-41
    # one round only: the midpoint of bin 512 of [0, 1]
    assert zoom_threshold(values, 0.5, rounds=1) == (512 + 0.5) / 1024
    # q = 0: rank 0 is reached by the first bin every round, which must keep a value (the 0)
    assert zoom_threshold(values, 0.0) == 2**-41
    with pytest.raises(ValueError, match="no values within"):
        zoom_threshold(values + 0.5, 0.0)
    # non-finite values are skipped: the rank counts finite values only
    assert zoom_threshold(np.array([np.nan, 0.25, np.inf, 0.5, -np.inf]), 0.5) == 0.25 + 2**-41


def random_float16(rng: np.random.Generator, size: int) -> np.ndarray:
    """float16 scores in [0, 1] with ties, exact 0s and 1s, tiny subnormals and non-finite."""
    values = rng.beta(0.7, 3.0, size).astype(np.float16)
    values[rng.random(size) < 0.05] = 1.0
    values[rng.random(size) < 0.05] = 0.0
    values[rng.random(size) < 0.02] = np.float16(2**-24) * rng.integers(1, 5)
    values[rng.random(size) < 0.03] = rng.choice([np.nan, np.inf, -np.inf])
    return values


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("quantile", [0.99, 0.5, 0.93, 1.0, 0.001])
def test_literal_zoom_equals_histogram_equals_closed_form(seed, quantile):
    rng = np.random.default_rng(seed)
    values = random_float16(rng, int(rng.integers(20, 4000)))
    if seed == 0:
        values[:] = 1.0  # everything on the upper edge
    expected = ref.threshold_closed_form(values, quantile)
    assert zoom_threshold(values, quantile) == expected
    blocks = np.array_split(values, 3)  # histograms of blocks merge by adding
    counts = sum(float16_histogram(block) for block in blocks)
    assert histogram_threshold(counts, quantile) == expected


def test_published_constants_are_the_closed_form_of_float16_values():
    assert PUBLISHED_BMA_THRESHOLD == 0.8579101562504547
    assert PUBLISHED_JACCARD_THRESHOLD == 0.21057128906295475
    for constant in (PUBLISHED_BMA_THRESHOLD, PUBLISHED_JACCARD_THRESHOLD):
        value = constant - 2**-41
        assert float(np.float16(value)) == value
        assert zoom_threshold(np.array([value], np.float16), 0.99) == constant


def test_histogram_errors():
    with pytest.raises(ValueError, match="no finite"):
        histogram_threshold(float16_histogram(np.array([np.nan, np.inf])), 0.5)
    with pytest.raises(ValueError, match="outside"):
        histogram_threshold(float16_histogram(np.array([2.0])), 0.5)
    assert histogram_threshold(float16_histogram(np.array([0.0, 0.5])), 0.0) == 2**-41
    with pytest.raises(ValueError, match="rank 0"):
        histogram_threshold(float16_histogram(np.array([0.25, 0.5])), 0.0)
    with pytest.raises(ValueError, match="quantile"):
        zoom_threshold(np.array([0.5]), 1.5)
