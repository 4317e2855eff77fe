"""nDCG@k with exponential gain: hand-worked examples and a per-query brute-force reference."""

import math

import numpy as np
import pytest

from bench.reference import python_ndcg
from saber_core.evaluation.metrics import dcg_at_k, mean_by_group, ndcg_at_k

LOG2_3 = math.log2(3)

# Four candidates. Ratings 4.2, 0.0, 2.5, 1.0; scores rank them c0 (0.9), c1 (0.8), c3 (0.5),
# c2 (0.3). The ideal order is c0 (4.2), c2 (2.5), c3 (1.0), c1 (0.0).
SCORES = np.array([[0.9, 0.8, 0.3, 0.5]])
RATINGS = np.array([[4.2, 0.0, 2.5, 1.0]])


def test_hand_worked_k2():
    # DCG@2  = (2^4.2 − 1)/log2(2) + (2^0 − 1)/log2(3)
    # IDCG@2 = (2^4.2 − 1)/log2(2) + (2^2.5 − 1)/log2(3)
    dcg = (2**4.2 - 1) / 1 + (2**0.0 - 1) / LOG2_3
    idcg = (2**4.2 - 1) / 1 + (2**2.5 - 1) / LOG2_3
    assert dcg_at_k(SCORES, RATINGS, k=2) == pytest.approx([dcg])
    assert ndcg_at_k(SCORES, RATINGS, k=2) == pytest.approx([dcg / idcg])


def test_hand_worked_k3():
    # DCG@3  = (2^4.2 − 1) + (2^0 − 1)/log2(3) + (2^1.0 − 1)/log2(4)   (c0, c1, c3)
    # IDCG@3 = (2^4.2 − 1) + (2^2.5 − 1)/log2(3) + (2^1.0 − 1)/log2(4) (c0, c2, c3)
    dcg = (2**4.2 - 1) + 0.0 + (2**1.0 - 1) / 2
    idcg = (2**4.2 - 1) + (2**2.5 - 1) / LOG2_3 + (2**1.0 - 1) / 2
    assert ndcg_at_k(SCORES, RATINGS, k=3) == pytest.approx([dcg / idcg])
    assert ndcg_at_k(SCORES, RATINGS, k=3)[0] == pytest.approx(0.8589, abs=1e-4)  # 17.879 / 20.817


def test_ideal_dcg_uses_all_candidates_not_just_top_k():
    # the model's top 2 hold the two lowest ratings; the 5.0 candidate sits at rank 3
    scores = np.array([[3.0, 2.0, 1.0]])
    ratings = np.array([[0.0, 1.0, 5.0]])
    # DCG@2 = 0 + (2^1 − 1)/log2(3); IDCG@2 = (2^5 − 1) + (2^1 − 1)/log2(3)
    expected = (1 / LOG2_3) / ((2**5 - 1) + 1 / LOG2_3)
    assert ndcg_at_k(scores, ratings, k=2) == pytest.approx([expected])


def test_ties_keep_candidate_order():
    # all scores equal: rank order is c0, c1, c2
    # DCG@2 = (2^0 − 1) + (2^3 − 1)/log2(3); IDCG@2 = (2^3 − 1) + (2^1 − 1)/log2(3)
    scores = np.array([[0.5, 0.5, 0.5]])
    ratings = np.array([[0.0, 3.0, 1.0]])
    assert ndcg_at_k(scores, ratings, k=2) == pytest.approx([(7 / LOG2_3) / (7 + 1 / LOG2_3)])
    # only part of the scores tie: c1 first, then the tie c0, c2 in column order
    # DCG@2 = (2^3 − 1) + (2^0 − 1)/log2(3) = 7 = IDCG@2's first term only
    partial = np.array([[0.2, 0.9, 0.2]])
    assert dcg_at_k(partial, ratings, k=2) == pytest.approx([7.0])


def test_nan_scores_rank_last():
    # order: c1 (0.1), c2 (−inf), c0 (NaN)
    # DCG@3 = (2^1 − 1) + (2^2 − 1)/log2(3) + (2^5 − 1)/log2(4)
    scores = np.array([[np.nan, 0.1, -np.inf]])
    ratings = np.array([[5.0, 1.0, 2.0]])
    assert dcg_at_k(scores, ratings, k=3) == pytest.approx([1 + 3 / LOG2_3 + 31 / 2])


def test_k_larger_than_n_equals_k_equal_n():
    for k in (4, 10, 150):
        np.testing.assert_allclose(ndcg_at_k(SCORES, RATINGS, k=k), ndcg_at_k(SCORES, RATINGS, 4))
    # DCG@4 = (2^4.2 − 1) + 0/log2(3) + (2^1 − 1)/log2(4) + (2^2.5 − 1)/log2(5)
    expected = (2**4.2 - 1) + 1 / 2 + (2**2.5 - 1) / math.log2(5)
    assert dcg_at_k(SCORES, RATINGS, k=10) == pytest.approx([expected])


def test_idcg_zero_gives_zero_next_to_normal_rows():
    scores = np.array([[0.3, 0.2, 0.1], [0.3, 0.2, 0.1]])
    ratings = np.array([[0.0, 0.0, 0.0], [5.0, 1.0, 0.0]])
    np.testing.assert_array_equal(ndcg_at_k(scores, ratings, k=2), [0.0, 1.0])


def test_perfect_and_reversed_rankings():
    rng = np.random.default_rng(3)
    ratings = rng.uniform(0, 5, size=(20, 150))
    np.testing.assert_allclose(ndcg_at_k(ratings, ratings), 1.0)
    np.testing.assert_allclose(ndcg_at_k(2 * ratings + 1, ratings), 1.0)  # any increasing map
    reversed_ = ndcg_at_k(-ratings, ratings)
    assert np.all(reversed_ < 1.0) and np.all(reversed_ > 0.0)


def brute_force_ndcg(scores: np.ndarray, ratings: np.ndarray, k: int) -> list[float]:
    """Per-query loop over the shared plain-Python reference (``bench.reference``)."""
    return [python_ndcg(s.tolist(), r.tolist(), k) for s, r in zip(scores, ratings, strict=True)]


@pytest.mark.parametrize("k", [1, 3, 10, 200])
def test_vectorized_equals_brute_force(k):
    rng = np.random.default_rng(11)
    scores = np.round(rng.normal(size=(60, 150)), 1)  # rounding creates many ties
    scores[rng.random(scores.shape) < 0.05] = np.nan
    ratings = np.round(rng.uniform(0, 5, size=(60, 150)), 2)
    ratings[rng.random(ratings.shape) < 0.5] = 0.0
    ratings[:3] = 0.0  # a few all-zero queries (IDCG = 0)
    np.testing.assert_allclose(ndcg_at_k(scores, ratings, k), brute_force_ndcg(scores, ratings, k))


def test_invalid_inputs():
    with pytest.raises(ValueError):
        ndcg_at_k(SCORES, RATINGS[:, :3])
    with pytest.raises(ValueError):
        ndcg_at_k(SCORES, -RATINGS)
    with pytest.raises(ValueError):
        ndcg_at_k(SCORES, RATINGS, k=0)


def test_mean_by_group_by_hand():
    values = np.array([0.2, 0.4, 1.0, 0.0, 0.6])
    groups = ["Algebra", "Geometry", "Algebra", "Geometry", "Calculus"]
    # Algebra (0.2 + 1.0)/2 = 0.6, Geometry (0.4 + 0.0)/2 = 0.2, Calculus 0.6
    means = mean_by_group(values, groups)
    assert list(means) == ["Algebra", "Calculus", "Geometry"]
    assert means == pytest.approx({"Algebra": 0.6, "Calculus": 0.6, "Geometry": 0.2})
    with pytest.raises(ValueError):
        mean_by_group(values, groups[:4])
