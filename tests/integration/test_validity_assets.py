"""The validity stage on a tiny build: report figures, intervals, and the contamination gate."""

import itertools

import dagster as dg
import numpy as np
import polars as pl
import pytest

from saber_cli.build import run_build
from saber_config import load_build_config
from saber_store.database import DuckDBStore

FILLER = " ".join(
    f"remark {i} extends the argument to case {i} of the general setting" for i in range(40)
)


def test_validity_report_figures_on_the_tiny_build(tiny_build):
    build, store, result = tiny_build
    report = next(
        e.event_specific_data.materialization.metadata
        for e in result.get_asset_materialization_events()
        if e.asset_key.to_user_string() == "validity_report"
    )
    rr = store.read_table("validity_round_robin")
    assert rr.height == min(build.validity.rr_queries, build.pools.n_queries)
    n = build.plan().pools.config.pool_size
    assert (rr["round_robin_pairs"] == n * (n - 1) // 2).all()
    # the Swiss games are reused; only the rest of the round robin is judged
    assert (rr["new_judgments"] == n * (n - 1) // 2 - build.tournament.rounds * n // 2).all()
    assert 0 <= report["split_half_reliability"].value <= 1
    triage = store.read_table("validity_triage")
    saved = triage.sort("threshold")["llm_calls_saved"].to_list()
    assert saved == sorted(saved, reverse=True)  # a stricter threshold never saves more
    assert (build.export_dir / "validity.md").exists()


def test_contaminated_query_fails_the_gate_and_names_the_offender(tmp_path):
    from saber_store.sources import champ_corpus

    home = tmp_path / "home"
    first = load_build_config("tiny", home=str(home))
    assert run_build(first, dg.DagsterInstance.ephemeral()).success
    store = DuckDBStore(database=str(first.database_path))
    query_id = store.read_table("queries")["query_id"][0]
    row = champ_corpus().filter(pl.col("doc_id") == query_id)
    # a training set that contains the query's text inside a longer document (reverse overlap)
    external = pl.DataFrame(
        {
            "doc_id": ["train-1", "train-2"],
            "problem": [
                "Unrelated: count lattice paths in a grid.",
                "Exercise 7. " + row["problem"][0],
            ],
            "solution": [
                "Binomial coefficients.",
                row["solution"][0] + " Further remarks: " + FILLER,
            ],
        }
    )
    path = tmp_path / "train.jsonl"
    external.write_ndjson(path)
    build = load_build_config(
        "tiny", home=str(home), contamination_corpus=str(path), recipe_summaries="none"
    )
    from saber_assets.definitions import BUILD_JOB, build_definitions

    job = build_definitions(build).resolve_job_def(BUILD_JOB)
    result = job.execute_in_process(instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    gate = checks["no_contaminated_queries"]
    assert not gate.passed
    assert query_id in gate.metadata["offenders"].value
    flags = store.read_table("contamination_flags")
    hit = flags.filter(pl.col("doc_id") == query_id).row(0, named=True)
    assert hit["external_id"] == "train-2" and hit["is_query"]
    assert hit["bench_in_external"] > 0.9 > hit["external_in_bench"]
    # recipe_summaries: none → the recipe stage reports n/a (and its check has nothing to fail)
    assert checks["recipe_tournament_valid"].passed
    for table in ("recipe_queries", "recipe_pools", "recipe_judgments", "recipe_ndcg"):
        assert store.read_table(table).height == 0, table
    report = (build.export_dir / "validity.md").read_text()
    assert "| recipe | n/a: recipe_summaries: none |" in report


def _sklearn_bt(a, b, y, n):
    from sklearn.linear_model import LogisticRegression

    x = np.zeros((len(a), n))
    x[np.arange(len(a)), a] = 1.0
    x[np.arange(len(a)), b] = -1.0
    model = LogisticRegression(fit_intercept=False, C=1.0, tol=1e-10, max_iter=10_000)
    return model.fit(x, y).coef_[0]


def test_round_robin_tau_equals_an_independent_recomputation(tiny_build):
    """Swiss-BT vs round-robin-BT τ per sampled query, recomputed here from scratch: the whole
    round robin judged again by the embedding judge, both fits by scikit-learn, τ by scipy."""
    from scipy.stats import kendalltau

    from saber_llm.judges import EmbeddingJudge

    _, store, _ = tiny_build
    corpus = store.read_table("corpus")
    texts = {
        d: f"Problem: {p}\n\nSolution: {s}"
        for d, p, s in corpus.select("doc_id", "problem", "solution").rows()
    }
    pools, judgments = store.read_table("candidate_pools"), store.read_table("judgments")
    rr = store.read_table("validity_round_robin")
    assert rr.height > 0
    for row in rr.iter_rows(named=True):
        q = row["query_id"]
        docs = pools.filter(pl.col("query_id") == q).sort("position")["doc_id"].to_list()
        pairs = np.array(list(itertools.combinations(range(len(docs)), 2)))
        verdict = EmbeddingJudge().judge(
            [texts[q]] * len(pairs),
            [texts[docs[i]] for i in pairs[:, 0]],
            [texts[docs[j]] for j in pairs[:, 1]],
            store,
            "test",
        )
        full = _sklearn_bt(
            pairs[:, 0], pairs[:, 1], (verdict.p_first > 0.5).astype(float), len(docs)
        )
        swiss = judgments.filter(pl.col("query_id") == q)
        part = _sklearn_bt(
            swiss["pos_a"].to_numpy(),
            swiss["pos_b"].to_numpy(),
            swiss["outcome"].to_numpy(),
            len(docs),
        )
        assert row["kendall_tau"] == pytest.approx(kendalltau(part, full).statistic, abs=1e-9)
