"""Recipe sensitivity: the other-recipe pools, tournament and figures on the tiny build,
checked against independent recomputations (python-set Jaccard, scipy rank correlations, the
evaluation package on the exported benchmark)."""

import json

import numpy as np
import polars as pl
import pytest
from scipy.stats import kendalltau, spearmanr

from saber_assets.tables import matrix_path
from saber_core.discovery.pools import select_pool
from saber_core.rating.bradley_terry import fit_bradley_terry, rescale_ratings
from saber_core.rating.comparisons import Comparisons
from saber_core.signals.jaccard import tokenize
from saber_eval.benchmark import MAIN_SETTING
from saber_eval.loading import load_benchmark
from saber_eval.registry import load_registry
from saber_eval.retrievers import retriever_factory
from saber_eval.runner import run_retriever
from saber_store.sources import alternative_summaries, champ_llm_summaries


def set_jaccard(a: frozenset, b: frozenset) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


def figures(result, asset):
    return next(
        e.event_specific_data.materialization.metadata
        for e in result.get_asset_materialization_events()
        if e.asset_key.to_user_string() == asset
    )


def test_other_recipe_pools_equal_a_brute_force_selection(tiny_build):
    build, store, _ = tiny_build
    corpus = store.read_table("corpus")
    queries = store.read_table("queries")
    gpt = dict(champ_llm_summaries().rows())
    alt_sets = [tokenize(gpt.get(d)) for d in corpus["doc_id"]]
    prob_sets = [tokenize(p) for p in corpus["problem"]]
    bma = np.load(matrix_path(build, "topic_similarity"))
    pools = store.read_table("recipe_pools")
    assert set(pools["summary_origin"]) == {"llm"}
    for q, (query_id, row) in enumerate(queries.select("query_id", "doc_index").rows()):
        jac = np.array([set_jaccard(alt_sets[row], s) for s in alt_sets], dtype=np.float32)
        prob = np.array([set_jaccard(prob_sets[row], s) for s in prob_sets], dtype=np.float32)
        expected = select_pool(q, bma[q], jac, prob, build.plan().pools.config, build.seed, row)
        got = pools.filter(pl.col("query_id") == query_id).sort("position")
        if expected.status == "skipped":
            assert got.height == 0
            continue
        assert got["doc_id"].to_list() == corpus["doc_id"].to_numpy()[expected.doc_index].tolist()
        assert got["group"].to_list() == expected.group.tolist()


def test_other_recipe_ratings_and_correlations(tiny_build):
    build, store, result = tiny_build
    pools = store.read_table("recipe_pools").sort("query_id", "position")
    judged = store.read_table("recipe_judgments")
    ids = pools["query_id"].unique(maintain_order=True).to_list()
    n = build.plan().pools.config.pool_size
    index = {q: i for i, q in enumerate(ids)}
    # every candidate plays once per round, rounds × n/2 judgments per query
    assert judged.height == len(ids) * build.tournament.rounds * (n // 2)
    hard = judged["p_a"].map_elements(lambda p: 1.0 if p > 0.5 else 0.0 if p < 0.5 else None,
                                      return_dtype=pl.Float64).fill_null(np.nan)  # fmt: skip
    rows = Comparisons(
        np.array([index[q] for q in judged["query_id"]]), judged["pos_a"].to_numpy(),
        judged["pos_b"].to_numpy(), hard.to_numpy(), len(ids), n,
    )  # fmt: skip
    beta = fit_bradley_terry(rows, C=build.rating.c)
    np.testing.assert_allclose(pools["rating"].to_numpy(), rescale_ratings(beta).ravel(), atol=1e-6)
    own = store.read_table("bt_ratings")
    per_query = store.read_table("recipe_queries").sort("query_id")
    compared = 0
    for row in per_query.iter_rows(named=True):
        a = own.filter(pl.col("query_id") == row["query_id"])
        b = pools.filter(pl.col("query_id") == row["query_id"])
        assert row["pool_overlap"] == pytest.approx(
            len(set(a["doc_id"]) & set(b["doc_id"])) / len(set(a["doc_id"]) | set(b["doc_id"]))
        )
        shared = a.join(b, on="doc_id", suffix="_b")
        assert row["n_shared"] == shared.height
        if shared.height >= 3 and shared["rating"].n_unique() > 1:
            x, y = shared["rating"].to_numpy(), shared["rating_b"].to_numpy()
            assert row["spearman"] == pytest.approx(spearmanr(x, y).statistic, abs=1e-9)
            assert row["kendall_tau"] == pytest.approx(kendalltau(x, y).statistic, abs=1e-9)
            compared += 1
    assert compared >= 2
    meta = figures(result, "recipe_sensitivity")
    assert meta["other_summaries"].value == "llm"
    assert meta["mean_pool_overlap"].value == pytest.approx(per_query["pool_overlap"].mean())
    report = figures(result, "validity_report")
    assert report["recipe_pool_overlap"].value == pytest.approx(meta["mean_pool_overlap"].value)


def test_own_variant_ndcg_equals_the_evaluation_of_the_export(tiny_build):
    """The human-summary (own) variant is the exported benchmark: BM25 nDCG@10 per query in
    ``recipe_ndcg`` equals what ``saber_eval`` measures on the export folder."""
    build, store, _ = tiny_build
    ndcg = store.read_table("recipe_ndcg")
    assert set(ndcg["retriever"]) == {"bm25", "st:minilm"}
    assert set(ndcg["summary_origin"]) == {"human", "llm"}
    benchmark = load_benchmark(build.export_dir)
    spec = "bm25"
    measured = run_retriever(
        benchmark, retriever_factory(None)(spec), MAIN_SETTING, load_registry().get(spec)
    )
    own = dict(
        ndcg.filter((pl.col("retriever") == spec) & (pl.col("summary_origin") == "human"))
        .select("query_id", "ndcg@10")
        .rows()
    )
    for query_id, value in zip(measured.query_ids, measured.ndcg.tolist(), strict=True):
        assert own[query_id] == pytest.approx(value, abs=1e-9)


def test_alternative_summaries_choice(tmp_path):
    corpus = pl.DataFrame({"doc_id": ["a", "b"], "summary": ["hint a", None]})
    frame, origin, _ = alternative_summaries("auto", "my.jsonl", "llm", corpus)
    assert origin == "human" and frame["doc_id"].to_list() == ["a"]  # nulls are not summaries
    frame, origin, text = alternative_summaries("auto", "champ", "human", corpus)
    assert origin == "llm" and frame.height == 270 and "GPT-4" in text
    frame, origin, reason = alternative_summaries("auto", "my.jsonl", "human", corpus)
    assert frame is None and "recipe_summaries" in reason
    assert alternative_summaries("none", "champ", "human", corpus)[0] is None
    path = tmp_path / "alt.jsonl"
    path.write_text(json.dumps({"doc_id": "a", "summary": "x y"}) + "\n")
    frame, origin, _ = alternative_summaries(str(path), "champ", "human", corpus)
    assert origin == "llm" and frame.rows() == [("a", "x y")]
    path.write_text(json.dumps({"doc_id": "a", "text": "x"}) + "\n")
    with pytest.raises(ValueError, match=r"alt.jsonl.*'summary'"):
        alternative_summaries(str(path), "champ", "human", corpus)
