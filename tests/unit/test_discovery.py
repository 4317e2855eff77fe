"""Vectorized discovery equals a per-query brute force: BMA, Jaccard, near-duplicates, pools."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from saber_core.discovery.per_query import (
    DiscoveryInputs,
    bma_block,
    build_bma_index,
    build_near_duplicate_index,
    discover_pools,
    doc_topic_sets,
    iter_discovery,
    near_duplicates,
    numpy_order_sum,
    pool_frames,
    query_topics,
    select_pools,
    top_neighbours,
)
from saber_core.discovery.pools import PoolConfig, linear_quantiles, sample_queries, select_pool
from saber_core.inputs.synth import synthesize
from saber_core.ontology.dag import build_ontology
from saber_core.signals.jaccard import build_token_matrix, jaccard_dense_block, tokenize
from saber_core.signals.lin_bma import TopicSets, bma, lin, lin_rows, topic_sets


@pytest.fixture(scope="module")
def corpus():
    """424 documents over a 300-node DAG, a 400-word vocabulary and 5 % near-duplicates."""
    data = synthesize(0.0015, seed=5, n_nodes=300, vocab_size=400, near_duplicate_share=0.05)
    onto = build_ontology(data.ontology)
    frame = data.corpus
    sets = doc_topic_sets(onto, frame["topics"])
    summaries = build_token_matrix(frame["summary"])
    problems = build_token_matrix(frame["problem"])
    return onto, frame, sets, summaries, problems


def set_jaccard(a: frozenset, b: frozenset) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


@pytest.fixture(scope="module")
def reference(corpus):
    """Brute force per query: ontology.bma and python-set Jaccard against every document."""
    onto, frame, _, _, _ = corpus
    summary_sets = [tokenize(t) for t in frame["summary"].to_list()]
    problem_sets = [tokenize(t) for t in frame["problem"].to_list()]
    topics = [onto.indices(t) for t in frame["topics"].to_list()]
    n = frame.height
    near = [
        d for d in range(n) if any(set_jaccard(problem_sets[d], problem_sets[e]) >= 0.8
                                   for e in range(n) if e != d)
    ]  # fmt: skip
    queries = np.unique(np.concatenate([near[:4], sample_queries(frame["domain"], 8, seed=2)]))

    def rows(d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        b = np.array([bma(onto, topics[d], topics[e]) for e in range(n)], dtype=np.float32)
        j = [set_jaccard(summary_sets[d], summary_sets[e]) for e in range(n)]
        p = [set_jaccard(problem_sets[d], problem_sets[e]) for e in range(n)]
        return b, np.asarray(j, dtype=np.float32), np.asarray(p, dtype=np.float32)

    return queries, {int(d): rows(int(d)) for d in queries}


CONFIGS = [
    PoolConfig(n_topic_only=8, n_summary_only=8, n_both=8),
    PoolConfig(n_topic_only=20, n_summary_only=5, n_both=30, topic_high=0.8, summary_high=0.8),
    PoolConfig(
        n_topic_only=10, n_summary_only=10, n_both=10, threshold_mode="absolute",
        topic_high=0.5, topic_low=0.3, summary_high=0.15, summary_low=0.1,
        near_duplicate_cut=0.6, fallback="skip",
    ),
    PoolConfig(n_topic_only=4, n_summary_only=4, n_both=4, near_duplicate_cut=0.0),  # dense path
]  # fmt: skip


@pytest.mark.parametrize("config", CONFIGS)
def test_discovery_equals_brute_force_pools(corpus, reference, config):
    onto, _, sets, summaries, problems = corpus
    queries, rows = reference
    result = discover_pools(
        DiscoveryInputs(onto, sets, queries, summaries, problems), config, seed=9, block_size=5
    )
    assert len(result.pools) == len(queries)
    statuses = set()
    for q, d in enumerate(queries.tolist()):
        b, j, p = rows[d]
        expected = select_pool(q, b, j, p, config, seed=9, query_doc_index=d)
        got = result.pools[q]
        statuses.add(got.status)
        assert (got.query_index, got.status, got.reason) == (q, expected.status, expected.reason)
        assert got.thresholds == expected.thresholds
        assert (got.n_eligible, got.n_near_duplicates) == (
            expected.n_eligible, expected.n_near_duplicates,
        )  # fmt: skip
        np.testing.assert_array_equal(got.doc_index, expected.doc_index)
        np.testing.assert_array_equal(got.group, expected.group)
        np.testing.assert_array_equal(got.relaxed, expected.relaxed)
        np.testing.assert_array_equal(result.bma[q], b[got.doc_index])
        np.testing.assert_array_equal(result.jaccard[q], j[got.doc_index])
        if got.status != "skipped":
            assert d not in got.doc_index.tolist()
            assert not (p[got.doc_index] >= config.near_duplicate_cut).any()
            assert len(set(got.doc_index.tolist())) == config.pool_size
            for g, n in config.sizes.items():
                assert int((got.group == g).sum()) == n
    # the fixture exercises near-duplicate exclusion and more than one outcome
    assert sum(pool.n_near_duplicates for pool in result.pools) > 0
    if config.fallback == "skip":
        assert "skipped" in statuses


@pytest.mark.parametrize("config", CONFIGS)
def test_select_pools_on_stored_matrices_equals_brute_force(corpus, reference, config):
    """The candidate_pools path (precomputed score matrices) gives the brute-force pools."""
    _, _, _, _, problems = corpus
    queries, rows = reference
    bma_matrix = np.stack([rows[d][0] for d in queries.tolist()])
    jaccard_matrix = np.stack([rows[d][1] for d in queries.tolist()])
    seen = []
    result = select_pools(
        queries, bma_matrix, jaccard_matrix, problems, config, seed=9, block_size=3,
        progress=lambda done, total: seen.append((done, total)),
    )  # fmt: skip
    assert seen[-1] == (len(queries), len(queries)) and len(seen) == -(-len(queries) // 3)
    for q, d in enumerate(queries.tolist()):
        b, j, p = rows[d]
        expected = select_pool(q, b, j, p, config, seed=9, query_doc_index=d)
        got = result.pools[q]
        assert (got.status, got.reason, got.n_near_duplicates) == (
            expected.status, expected.reason, expected.n_near_duplicates,
        )  # fmt: skip
        np.testing.assert_array_equal(got.doc_index, expected.doc_index)
        np.testing.assert_array_equal(got.group, expected.group)
        np.testing.assert_array_equal(result.jaccard[q], j[got.doc_index])
    with pytest.raises(ValueError, match="queries"):
        select_pools(queries, bma_matrix[:-1], jaccard_matrix, problems, config, seed=9)


@pytest.mark.parametrize("cut", [0.05, 0.3, 0.5, 0.8, 0.9, 1.0, 1.5])
def test_near_duplicates_find_every_document_at_or_above_the_cut(corpus, cut):
    frame, problems = corpus[1], corpus[4]
    index = build_near_duplicate_index(problems)
    texts = frame["problem"].to_list()
    # corpus rows, edited copies (some words outside the vocabulary) and an empty text
    extra = [texts[3] + " zzzq zzzr", " ".join(texts[7].split()[:-2]), "", texts[11] + " zzzq"]
    queries = build_token_matrix(texts[:40] + extra, vocabulary=problems.vocabulary)
    dense = jaccard_dense_block(queries, problems)
    for q in range(queries.n_texts):
        docs, values = near_duplicates(index, queries.rows(q), cut)
        expected = np.flatnonzero(dense[q] >= cut)
        assert set(expected.tolist()) <= set(docs.tolist())
        np.testing.assert_array_equal(values, dense[q][docs])
    with pytest.raises(ValueError, match="cut"):
        near_duplicates(index, queries.rows(0), 0.0)


def test_bma_block_is_bit_identical_to_ontology_bma(corpus):
    onto, frame, _, _, _ = corpus
    # add a document without topics and query sets that are empty or hold the root (IC 0)
    lists = [*frame["topics"].to_list()[:60], []]
    docs = topic_sets([onto.indices(t) for t in lists])
    index = build_bma_index(onto, docs)
    doc_lists = query_topics(docs, range(docs.n_docs))
    queries = [*doc_lists[:12], np.zeros(0, dtype=np.int64), np.array([onto.root])]
    queries.append(np.array([onto.root, *doc_lists[3]]))
    got = bma_block(onto, index, queries)
    expected = np.array([[bma(onto, q, d) for d in doc_lists] for q in queries], dtype=np.float32)
    np.testing.assert_array_equal(got, expected)
    assert (got[:, -1] == 0).all() and (got[12] == 0).all()


def test_bma_on_a_dag_with_virtual_root_and_root_topics():
    rng = np.random.default_rng(4)
    ids = [f"n{k}" for k in range(60)]
    parents = [[], [], *[sorted({ids[p] for p in rng.integers(0, k, 1 + (k % 3 == 0))})
                         for k in range(2, 60)]]  # fmt: skip
    frame = pl.DataFrame(
        {"node_id": ids, "name": ids, "parent_ids": parents},
        schema_overrides={"parent_ids": pl.List(pl.String)},
    )
    onto = build_ontology(frame)
    assert onto.virtual_root_added
    lists = [rng.choice(onto.n_nodes, size=rng.integers(1, 10), replace=True) for _ in range(40)]
    lists[0] = np.array([onto.root, 0])  # the virtual root as a topic: lin(root, root) = 1
    docs = topic_sets(lists)
    got = bma_block(onto, build_bma_index(onto, docs), lists[:10])
    expected = [[bma(onto, q, d) for d in lists] for q in lists[:10]]
    np.testing.assert_array_equal(got, np.asarray(expected, dtype=np.float32))


def test_lin_rows_equals_scalar_lin(corpus):
    onto = corpus[0]
    rng = np.random.default_rng(0)
    rows = rng.integers(0, onto.n_nodes, 40)
    cols = np.concatenate([rng.integers(0, onto.n_nodes, 60), rows[:5], [onto.root]])
    table = lin_rows(onto, rows, cols)
    expected = [[lin(onto, a, b) for b in cols] for a in rows]
    np.testing.assert_array_equal(table, np.asarray(expected, dtype=np.float32))


def test_inputs_of_different_lengths_are_refused_with_both_counts(corpus):
    onto, frame, sets, _, problems = corpus
    fewer = build_token_matrix(frame["summary"].head(frame.height - 1))
    with pytest.raises(ValueError, match=rf"{frame.height} topic sets but {frame.height - 1} "):
        DiscoveryInputs(onto, sets, np.arange(3), fewer, problems)


def test_results_do_not_depend_on_block_size(corpus):
    onto, frame, sets, summaries, problems = corpus
    queries = sample_queries(frame["domain"], 20, seed=1)
    config = CONFIGS[0]
    inputs = DiscoveryInputs(onto, sets, queries, summaries, problems)
    runs = [list(iter_discovery(inputs, config, 3, block, 5)) for block in (1, 7, 64)]
    base = [p for block in runs[0] for p in block.pools]
    for run in runs[1:]:
        pools = [p for block in run for p in block.pools]
        for a, b in zip(base, pools, strict=True):
            np.testing.assert_array_equal(a.doc_index, b.doc_index)
        for name in ("bma", "jaccard"):
            first = np.concatenate([block.neighbours[name][0] for block in runs[0]])
            again = np.concatenate([block.neighbours[name][0] for block in run])
            np.testing.assert_array_equal(first, again)


def test_neighbours_are_the_top_k_by_score_then_index():
    rng = np.random.default_rng(2)
    block = rng.integers(0, 6, size=(5, 40)).astype(np.float32) / 5
    idx, val = top_neighbours(block, 7)
    for r in range(5):
        expected = sorted(range(40), key=lambda i: (-block[r, i], i))[:7]
        assert idx[r].tolist() == expected
        np.testing.assert_array_equal(val[r], block[r, expected])
    idx, val = top_neighbours(block[:, :3], 5)
    assert (idx[:, 3:] == -1).all() and np.isnan(val[:, 3:]).all()


def test_doc_topic_sets_equals_topic_sets(corpus):
    onto, frame, sets, _, _ = corpus
    lists = [*frame["topics"].to_list()[:30], None, []]
    got = doc_topic_sets(onto, lists)
    expected = topic_sets([onto.indices(t or []) for t in lists])
    for name in ("used", "ptr", "local"):
        np.testing.assert_array_equal(getattr(got, name), getattr(expected, name))
    assert sets.n_docs == frame.height
    with pytest.raises(KeyError, match="'nope'"):
        doc_topic_sets(onto, [["nope"]])


@pytest.mark.parametrize("n", [*range(1, 20), 24, 31, 64, 127, 128, 129, 300])
def test_numpy_order_sum_is_bit_identical_to_numpy(n):
    rng = np.random.default_rng(n)
    terms = rng.random((n, 50)) * 10.0 ** rng.integers(-12, 12, size=(n, 50))
    got = numpy_order_sum(lambda i: terms[i], n)
    expected = np.array([terms[:, c].copy().sum() for c in range(50)])
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got / n, np.array([terms[:, c].copy().mean() for c in range(50)]))


def test_linear_quantiles_bit_identical_to_np_quantile():
    rng = np.random.default_rng(1)
    for trial in range(2000):
        n = int(rng.integers(1, 60))
        values = rng.random(n) * 10.0 ** rng.integers(-3, 3)
        if trial % 3 == 0:
            values = values.round(1)  # ties
        values = values.astype(np.float32 if trial % 2 else np.float64)
        q = rng.random(2)
        q[rng.random(2) < 0.15] = 0.0
        q[rng.random(2) < 0.15] = 1.0
        expected = np.quantile(values.astype(np.float64), q)
        np.testing.assert_array_equal(linear_quantiles(values, q), expected)
    with_nan = np.array([0.1, np.nan, 0.3], dtype=np.float32)
    assert np.isnan(linear_quantiles(with_nan, [0.5])).all()


def test_pool_frames_match_the_asset_layout(corpus):
    onto, frame, sets, summaries, problems = corpus
    queries = sample_queries(frame["domain"], 6, seed=0)
    result = discover_pools(
        DiscoveryInputs(onto, sets, queries, summaries, problems), CONFIGS[0], seed=1
    )
    query_ids = [f"q{i}" for i in range(len(queries))]
    pools, outcomes = pool_frames(result, query_ids, frame["doc_id"].to_numpy())
    assert pools.columns == ["query_id", "position", "doc_id", "group", "relaxed", "bma", "jaccard"]
    assert outcomes.height == len(queries)
    first = result.pools[0]
    rows = pools.filter(pl.col("query_id") == "q0")
    assert rows["doc_id"].to_list() == frame["doc_id"].to_numpy()[first.doc_index].tolist()
    assert rows["position"].to_list() == list(range(CONFIGS[0].pool_size))
    assert math.isclose(rows["bma"][0], float(result.bma[0][0]))


def test_empty_topic_sets_give_zero_bma():
    onto = build_ontology(
        pl.DataFrame(
            {"node_id": ["r", "a", "b"], "name": ["r", "a", "b"], "parent_ids": [[], ["r"], ["r"]]},
            schema_overrides={"parent_ids": pl.List(pl.String)},
        )
    )
    docs = TopicSets(used=np.array([1]), ptr=np.array([0, 0, 1]), local=np.array([0]))
    got = bma_block(onto, build_bma_index(onto, docs), [np.array([2]), np.array([1]), []])
    np.testing.assert_array_equal(got, [[0, 0], [0, 1], [0, 0]])


def test_float32_bounds_compare_like_float64():
    from saber_core.discovery.pools import _bounds

    rng = np.random.default_rng(6)
    x = np.concatenate([rng.random(500), [0.0, 1.0, np.inf, -np.inf, np.nan, 3.4e38, -0.5]]).astype(
        np.float32
    )
    picks = x[np.isfinite(x)][:50].astype(np.float64)
    thresholds = [
        *picks,
        *np.nextafter(picks, np.inf),
        *np.nextafter(picks, -np.inf),
        *(rng.random(50) * 1.2 - 0.1),
        0.8, 1e39, -1e39, np.inf, -np.inf, np.nan,
    ]  # fmt: skip
    wide = x.astype(np.float64)
    for t in thresholds:
        lo, hi = _bounds(x, float(t))
        np.testing.assert_array_equal(x >= hi, wide >= t)
        np.testing.assert_array_equal(x > lo, wide > t)
        np.testing.assert_array_equal(x <= lo, wide <= t)
