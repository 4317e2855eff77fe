"""Holm's step-down adjusted p-values against the formula written out as loops, a hand-worked
family and Holm's sequential rejection rule (statsmodels is not installed in the project's
environment, so it is not the reference here)."""

import numpy as np
import pytest

from saber_core.evaluation.multiple_testing import holm


def brute_force_holm(p: list[float]) -> list[float]:
    """adj_(i) = max_{j ≤ i} min(1, (m − j + 1) p_(j)) over the ascending order, as loops."""
    m = len(p)
    ranked = sorted(range(m), key=lambda k: p[k])
    adjusted = [0.0] * m
    for i in range(m):
        adjusted[ranked[i]] = max(min(1.0, (m - j) * p[ranked[j]]) for j in range(i + 1))
    return adjusted


def holm_rejections(p: list[float], alpha: float) -> set[int]:
    """Holm's procedure: walk up the sorted p; reject while p_(j) ≤ α / (m − j + 1)."""
    m, rejected = len(p), set()
    for j, k in enumerate(sorted(range(m), key=lambda k: p[k])):
        if p[k] > alpha / (m - j):
            break
        rejected.add(k)
    return rejected


def test_hand_worked_family():
    # sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → running max
    # 0.02, 0.03, 0.06, 0.06; back in input order (0.04 < 0.05 alone, 0.06 after Holm):
    assert holm([0.01, 0.04, 0.03, 0.005]).tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]).tolist() == [1.0, 1.0]  # 2·0.5 clipped at 1, then the running max
    assert holm([0.02]).tolist() == [0.02]  # a family of one is not adjusted
    assert holm([]).tolist() == []


@pytest.mark.parametrize("seed", range(6))
def test_random_families_with_ties_equal_the_formula_and_holms_rule(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(2, 49))  # up to 48 adjacent pairs
    # randomization p-values are (1 + k) / (1 + R): a coarse grid, so ties are common
    p = ((1 + rng.integers(0, 60, m)) / 1001 * rng.choice([1, 10], m)).tolist()
    adjusted = holm(p)
    assert adjusted.tolist() == pytest.approx(brute_force_holm(p), abs=1e-15)
    for alpha in (0.01, 0.05, 0.1):
        assert set(np.flatnonzero(adjusted <= alpha).tolist()) == holm_rejections(p, alpha)
    perm = rng.permutation(m)  # the order of the input (and of tied values) does not matter
    assert holm(np.asarray(p)[perm]).tolist() == pytest.approx(adjusted[perm].tolist(), abs=1e-15)
    assert np.all(adjusted >= np.asarray(p)) and np.all(adjusted <= 1)


@pytest.mark.parametrize("bad", [[0.1, 1.2], [0.1, -0.01], [0.1, float("nan")]])
def test_values_outside_the_unit_interval_are_named(bad):
    with pytest.raises(ValueError, match=r"p-value #1 = .* is not in \[0, 1\]"):
        holm(bad)
