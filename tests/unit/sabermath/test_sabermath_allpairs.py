"""Group counts, replayed draws and row pools against the row-by-row published selection
(sabermath_reference.py) and a direct count (the passes: test_sabermath_pair_kernel.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import sabermath_reference as ref
from test_sabermath_selection import B_CUT, J_CUT, random_scores

from saber_core.discovery.pair_scorer import eligible, replay_draws, row_counts, row_pools


@dataclass(frozen=True)
class MatrixScorer:
    """A scorer over stored (n, n) float16 matrices."""

    bma: np.ndarray
    jac: np.ndarray

    @property
    def n_docs(self) -> int:
        return self.bma.shape[1]

    def rows(self, rows):
        return self.bma[rows], self.jac[rows]


@pytest.mark.parametrize("seed", range(4))
def test_counts_replayed_draws_and_row_pools_equal_the_published_selection(seed):
    n, k = 90, 6
    bma, jac = random_scores(seed, n)
    counts, targets, pools = ref.select(np.arange(n), bma, jac, B_CUT, J_CUT, k, seed)
    scorer = MatrixScorer(bma, jac)
    got = row_counts(scorer, np.arange(n), B_CUT, J_CUT)
    assert got.tolist() == counts
    assert np.flatnonzero(eligible(got, (k, k, k))).tolist() == targets
    # only some targets are used: their pools still follow the one shared generator
    used = targets[1::2]
    drawn = replay_draws(got, (k, k, k), seed, keep=used)
    assert sorted(drawn) == used
    pools_of = row_pools(scorer, np.array(used), B_CUT, J_CUT, (k, k, k), [drawn[r] for r in used])
    assert pools_of.candidates.tolist() == [pools[targets.index(r)] for r in used]
    np.testing.assert_array_equal(
        pools_of.bma.view(np.uint16),
        bma[np.array(used)[:, None], pools_of.candidates].view(np.uint16),
    )


def test_top_score_choice_takes_each_groups_best():
    bma, jac = random_scores(5, 60)
    scorer = MatrixScorer(bma, jac)
    counts = row_counts(scorer, np.arange(60), B_CUT, J_CUT)
    row = int(np.flatnonzero(eligible(counts, (3, 3, 3)))[0])
    top = row_pools(scorer, np.array([row]), B_CUT, J_CUT, (3, 3, 3), None)
    b, j = bma[row].astype(np.float64), jac[row].astype(np.float64)
    high_b, high_j = b >= np.float16(B_CUT), j >= np.float16(J_CUT)
    high_b[row] = high_j[row] = False
    for g, (mask, score) in enumerate(
        [(high_b & ~high_j, b), (~high_b & high_j, j), (high_b & high_j, b + j)]
    ):
        members = np.flatnonzero(mask)
        expected = sorted(members.tolist(), key=lambda d: (-score[d], d))[:3]
        assert top.candidates[0, 3 * g : 3 * g + 3].tolist() == expected
