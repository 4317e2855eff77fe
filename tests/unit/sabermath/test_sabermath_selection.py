"""docs/sabermath.md §8: groups, eligibility and pools, §9 domains and the final sampler, against
row-by-row
references (sabermath_reference.py)."""

from __future__ import annotations

import numpy as np
import pytest
import sabermath_reference as ref
from selection_reference import compact_candidates, select_block

from saber_core.discovery.final_sampler import sample_final_queries, tag_domains
from saber_core.published import DOMAIN_QUOTAS

B_CUT, J_CUT = 1757 / 2048 + 2**-41, 1725 / 8192 + 2**-41


def random_scores(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """float16 (n, n) BMA and Jaccard near the published cuts, exact cut values included."""
    rng = np.random.default_rng(seed)
    shift = rng.uniform(-0.12, 0.0, (n, 1))  # rows differ: some are not eligible
    bma = (rng.uniform(0.7, 1.0, (n, n)) + shift).astype(np.float16)
    jac = (rng.uniform(0.1, 0.35, (n, n)) + shift / 2).astype(np.float16)
    bma[rng.random((n, n)) < 0.1] = 1757 / 2048  # on the float16 cut: high
    bma[rng.random((n, n)) < 0.05] = 1756 / 2048  # one float16 step below: low
    jac[rng.random((n, n)) < 0.1] = 1725 / 8192
    return bma, jac


@pytest.mark.parametrize("seed", range(4))
def test_selection_equals_the_reference_and_streams_by_blocks(seed):
    n, k = 90, 6
    bma, jac = random_scores(seed, n)
    rows = np.arange(n)
    counts, targets, pools = ref.select(rows, bma, jac, B_CUT, J_CUT, k, seed)
    assert 0 < len(targets) < n  # both outcomes occur

    rng = np.random.default_rng(seed)
    parts = [
        select_block(rows[s], bma[s], jac[s], B_CUT, J_CUT, rng, per_group_count=k)
        for s in (slice(0, 40), slice(40, 41), slice(41, n))
    ]
    assert np.concatenate([p.group_counts for p in parts]).tolist() == counts
    assert np.concatenate([p.eligible for p in parts]).tolist() == [min(c) >= k for c in counts]
    assert np.concatenate([p.targets for p in parts]).tolist() == targets
    candidates = np.concatenate([p.candidates for p in parts])
    assert candidates.tolist() == pools
    target_rows = np.array(targets)
    bma_scores = np.concatenate([p.bma_scores for p in parts])
    assert np.array_equal(
        bma_scores.view(np.uint16), bma[target_rows[:, None], candidates].view(np.uint16)
    )
    jaccard_scores = np.concatenate([p.jaccard_scores for p in parts])
    assert np.array_equal(jaccard_scores, jac[target_rows[:, None], candidates])
    assert np.all(np.concatenate([p.groups for p in parts]) == np.repeat([0, 1, 2], k))


def test_threshold_compares_in_float16_and_the_query_is_never_high():
    # 1757/2048 is below the float64 threshold but equal to it in float16: high.
    bma = np.full((1, 4), 1757 / 2048, dtype=np.float16)
    jac = np.array([[0.5, 0.0, 0.5, 1725 / 8192 - 2**-14]], dtype=np.float16)
    got = select_block(np.array([2]), bma, jac, B_CUT, J_CUT, np.random.default_rng(0), 1)
    # column 2 is the query itself: not high on either signal
    assert got.group_counts.tolist() == [[2, 0, 1]]
    assert not got.eligible[0] and got.targets.size == 0
    with pytest.raises(ValueError, match="float16"):
        select_block(np.array([0]), bma.astype(float), jac, B_CUT, J_CUT, np.random.default_rng(0))


def test_compact_candidates_sorts_distinct_rows_and_remaps():
    table, positions = compact_candidates(np.array([[9, 4, 7], [4, 12, 9]]))
    assert table.tolist() == [4, 7, 9, 12]
    assert positions.tolist() == [[2, 0, 1], [0, 3, 2]]


# --------------------------------------------------------------------------------- §9
def test_domains_come_from_the_first_level_below_the_root():
    tags = [
        "/Mathematics/NumberTheory/Primes/X",
        "/Mathematics/DiscreteMathematics/Graphs",
        "/Mathematics/ProbabilityandStatistics/Y",
        "/Mathematics/Topology/Z",
        "/Mathematics",
    ]
    assert tag_domains(tags) == ("Combinatorics", "Number Theory")
    assert tag_domains(["/Mathematics/Topology"]) == ()
    for tag, domain in ref.DOMAINS.items():
        assert tag_domains([f"/Mathematics/{tag}/A"]) == (domain,)


def random_domain_lists(seed: int, n: int) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    names = sorted(set(ref.DOMAINS.values()))
    return [list(rng.choice(names, size=rng.integers(0, 4), replace=False)) for _ in range(n)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_final_sampler_equals_the_module_level_random_reference(seed):
    domain_lists = random_domain_lists(seed, 400)
    quotas = [
        (("Algebra",), 10),
        (("Geometry",), 8),
        (("Combinatorics", "Number Theory"), 5),
        (("Algebra", "Combinatorics"), 4),
        (("Algebra", "Calculus and Analysis"), 1),
    ]
    keys = [tuple(sorted(d)) for d in domain_lists]
    got = sample_final_queries(keys, quotas, seed)
    assert got.tolist() == ref.final_sample(domain_lists, quotas, seed)
    assert [keys[i] for i in got[:10]] == [("Algebra",)] * 10  # bucket by bucket
    assert all(len(keys[i]) < 3 for i in got)  # three-domain targets are never chosen


def test_a_too_small_bucket_raises_naming_it_and_the_published_table():
    keys = [("Algebra",)] * 3 + [("Geometry",)]
    with pytest.raises(ValueError, match=r"\('Geometry',\) has 1 targets.*quota of 2"):
        sample_final_queries(keys, [(("Algebra",), 3), (("Geometry",), 2)], seed=0)
    assert sum(q for _, q in DOMAIN_QUOTAS) == 1000
    assert sum(q for key, q in DOMAIN_QUOTAS if len(key) == 1) == 844
    assert all(tuple(sorted(key)) == key for key, _ in DOMAIN_QUOTAS)
