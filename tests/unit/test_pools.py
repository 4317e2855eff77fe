"""Pool selection and query sampling against brute-force definitions."""

import hashlib
from collections import Counter

import numpy as np
import pytest

from saber_core.discovery.pools import PoolConfig, sample_queries, select_pool, top_k


def scores(seed: int, n: int = 400):
    rng = np.random.default_rng(seed)
    bma = rng.random(n).round(2)  # rounding creates exact ties
    jac = (rng.random(n) ** 2).round(2)
    prob = rng.random(n) * 0.5
    return bma, jac, prob


def brute_force_groups(bma, jac, prob, cfg, query_doc):
    """The group definitions of the module docstring, element by element."""
    eligible = [i for i in range(len(bma)) if prob[i] < cfg.near_duplicate_cut and i != query_doc]
    b_low, b_high = np.quantile([bma[i] for i in eligible], [cfg.topic_low, cfg.topic_high])
    j_low, j_high = np.quantile([jac[i] for i in eligible], [cfg.summary_low, cfg.summary_high])
    hb = {i for i in eligible if bma[i] >= b_high and bma[i] > b_low}
    lb = {i for i in eligible if bma[i] <= b_low}
    hj = {i for i in eligible if jac[i] >= j_high and jac[i] > j_low}
    lj = {i for i in eligible if jac[i] <= j_low}
    return {"topic": hb & lj, "summary": hj & lb, "both": hb & hj}


def test_pool_groups_match_definition_and_are_disjoint():
    bma, jac, prob = scores(0)
    prob[[5, 6]] = 0.95  # near-duplicates of the query
    cfg = PoolConfig(n_topic_only=10, n_summary_only=10, n_both=3, near_duplicate_cut=0.8)
    expected = brute_force_groups(bma, jac, prob, cfg, 7)
    assert all(len(expected[g]) >= n for g, n in cfg.sizes.items()), "fixture fills every group"
    pool = select_pool(3, bma, jac, prob, cfg, seed=1, query_doc_index=7)
    assert pool.status == "ok", pool.reason
    assert len(pool.doc_index) == 23 == len(set(pool.doc_index.tolist()))
    assert pool.group.tolist() == ["topic"] * 10 + ["summary"] * 10 + ["both"] * 3
    assert not {5, 6, 7} & set(pool.doc_index.tolist())
    assert pool.n_near_duplicates == 2
    ranking = {"topic": bma, "summary": jac, "both": bma + jac}
    for g in ("topic", "summary", "both"):
        picked = pool.doc_index[pool.group == g]
        assert set(picked) <= expected[g]
        # the picked are the best of the group: nobody left out scores higher than the worst in
        worst = ranking[g][picked].min()
        assert all(ranking[g][i] <= worst for i in expected[g] - set(picked))
        assert np.all(np.diff(ranking[g][picked]) <= 0), "descending within a group"


def test_pool_is_deterministic_and_seed_breaks_ties():
    bma, jac, prob = scores(1)
    cfg = PoolConfig(n_topic_only=8, n_summary_only=8, n_both=4)
    a = select_pool(0, bma, jac, prob, cfg, seed=5)
    b = select_pool(0, bma, jac, prob, cfg, seed=5)
    np.testing.assert_array_equal(a.doc_index, b.doc_index)
    # all-tied scores: only the seed decides, so different seeds give different pools
    flat = np.zeros(300)
    cfg_abs = PoolConfig(
        5, 5, 5, threshold_mode="absolute", topic_high=0, topic_low=0, summary_high=0, summary_low=0
    )
    p1 = select_pool(0, flat, flat, flat, cfg_abs, seed=1)
    p2 = select_pool(0, flat, flat, flat, cfg_abs, seed=2)
    assert p1.status == p2.status == "relaxed"
    assert set(p1.doc_index.tolist()) != set(p2.doc_index.tolist())


def test_relax_fallback_flags_and_counts():
    bma, jac, prob = scores(2, n=200)
    cfg = PoolConfig(n_topic_only=10, n_summary_only=10, n_both=40)
    pool = select_pool(0, bma, jac, prob, cfg, seed=0)
    strict_both = len(brute_force_groups(bma, jac, prob, cfg, None)["both"])
    assert strict_both < 40
    assert pool.status == "relaxed"
    assert f"both-group relaxed by {40 - strict_both}" in pool.reason
    assert pool.relaxed[pool.group == "both"].sum() == 40 - strict_both
    assert pool.relaxed[pool.group == "both"][-(40 - strict_both) :].all()
    assert len(set(pool.doc_index.tolist())) == 60


def test_skip_fallback_and_too_small_corpus_are_counted_outcomes():
    bma, jac, prob = scores(2, n=200)
    cfg = PoolConfig(n_topic_only=10, n_summary_only=10, n_both=40, fallback="skip")
    pool = select_pool(4, bma, jac, prob, cfg, seed=0)
    assert pool.status == "skipped" and "both-group" in pool.reason
    assert len(pool.doc_index) == 0
    tiny = select_pool(4, bma[:20], jac[:20], prob[:20], PoolConfig(10, 10, 10), seed=0)
    assert tiny.status == "skipped"
    assert "only 20 eligible documents for a pool of 30" in tiny.reason


def test_top_k_equals_sort_reference():
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(1, 80))
        s = rng.integers(0, 5, size=n).astype(float)
        mask = rng.random(n) < 0.7
        tb = rng.random(n)
        k = int(rng.integers(0, n + 2))
        expected = sorted(np.flatnonzero(mask), key=lambda i: (-s[i], tb[i]))[:k]
        assert top_k(s, mask, k, tb).tolist() == [int(i) for i in expected]


def test_sample_queries_balanced_and_redistributes_shortfall():
    domains = ["Algebra"] * 50 + ["Geometry"] * 3 + ["Number Theory"] * 50 + ["Combinatorics"] * 50
    picked = sample_queries(domains, 30, seed=0)
    counts = Counter(domains[i] for i in picked)
    assert counts["Geometry"] == 3
    assert sorted(counts.values()) == [3, 9, 9, 9]
    assert (
        Counter(domains[i] for i in sample_queries(domains, 10, seed=0)).most_common(1)[0][1] == 3
    )
    assert len(set(picked.tolist())) == 30
    np.testing.assert_array_equal(picked, sample_queries(domains, 30, seed=0))
    assert not np.array_equal(picked, sample_queries(domains, 30, seed=1))
    with pytest.raises(ValueError, match="only 153 rows"):
        sample_queries(domains, 200, seed=0)


def _blake(seed: int, key: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}:{key}".encode(), digest_size=8).digest(), "big")


def test_stable_draw_takes_each_domains_lowest_hashes_and_survives_appended_rows():
    rng = np.random.default_rng(3)
    names = ["Algebra", "Geometry", "Number Theory"]
    domains = [names[i] for i in rng.integers(0, 3, 300)]
    ids = [f"doc-{i}" for i in range(300)]
    picked = sample_queries(domains, 30, seed=7, keys=ids)
    # brute force: per domain the ten ids of smallest hash (every domain has ≥ 10 rows)
    expected = []
    for d in names:
        rows = [j for j in range(300) if domains[j] == d]
        expected += sorted(rows, key=lambda j: _blake(7, ids[j]))[:10]
    expected.sort()
    assert picked.tolist() == expected
    assert not np.array_equal(picked, sample_queries(domains, 30, seed=8, keys=ids))
    # three rows appended: an old query leaves only for a new row that hashes ahead of it
    grown_domains = [*domains, "Algebra", "Algebra", "Algebra"]
    grown_ids = [*ids, "new-1", "new-2", "new-3"]
    grown = sample_queries(grown_domains, 30, seed=7, keys=grown_ids)
    before, after = {ids[i] for i in picked}, {grown_ids[i] for i in grown}
    assert after - before <= {"new-1", "new-2", "new-3"}
    assert len(before - after) == len(after - before) <= 3
    reshuffled = {grown_ids[i] for i in sample_queries(grown_domains, 30, seed=7)}
    assert len(before & after) > len(before & reshuffled)  # what the permutation draw keeps
    with pytest.raises(ValueError, match="'doc-1' at rows 1 and 300"):
        sample_queries([*domains, "Algebra"], 30, seed=7, keys=[*ids, "doc-1"])


def test_config_validation():
    with pytest.raises(ValueError, match="n_both"):
        PoolConfig(n_both=-1)
    with pytest.raises(ValueError, match="quantile"):
        PoolConfig(topic_high=1.5)
