"""Evaluation core: nDCG through the runner, run files, per-domain means, frontier, significance,
registry envelopes, leaderboard files, MLflow logging."""

import itertools
import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from test_eval_data import QUERIES, write_tiny_benchmark

from saber_core.evaluation.metrics import ndcg_at_k
from saber_eval.engines.base import Retriever, Task
from saber_eval.leaderboard import leaderboard_frame, load_summaries, refresh_leaderboard
from saber_eval.loading import load_benchmark
from saber_eval.plots import pareto_frontier
from saber_eval.registry import INSTRUCTION_TEMPLATE, load_registry, parse_date
from saber_eval.retrievers import make_retriever
from saber_eval.runfile import format_run, read_run, run_scores
from saber_eval.runner import retriever_slug, run_retriever, write_outputs
from saber_eval.significance import bootstrap_ci, compare, randomization_test

LOG2_3, LOG2_5 = math.log2(3), math.log2(5)


class FixedScores(Retriever):
    """Returns given scores per query id (a stand-in for a model)."""

    def __init__(self, scores: dict[str, list[float]], spec: str = "fixed") -> None:
        self.spec, self.kind, self.scores = spec, "single-pass", scores

    def score(self, task: Task) -> tuple[np.ndarray, float]:
        return np.asarray(self.scores[task.query_id], dtype=np.float64), 0.0


def write_one_query(folder: Path, ratings: list[float], ids: list[str] | None = None) -> Path:
    """A one-query benchmark with candidates ``ids`` (default c0..c{n-1})."""
    folder.mkdir(parents=True, exist_ok=True)
    ids = ids or [f"c{i}" for i in range(len(ratings))]
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"doc_id": d, "problem": d, "solution": "s"}) + "\n" for d in ids)
    )
    row = {"query_id": "q1", "problem": "p", "solution": "s", "domain": "Algebra"}
    row |= {"candidates": ids, "relevance_scores": ratings, "jaccard_scores": [0.0] * len(ids)}
    (folder / "queries.jsonl").write_text(json.dumps(row) + "\n")
    return folder


@pytest.fixture
def tiny(tmp_path):
    return load_benchmark(write_tiny_benchmark(tmp_path / "tinybench"))


# --- nDCG through the runner, hand-worked (float ratings, tied scores) ---------------------


def test_hand_worked_ndcg_with_float_ratings_and_tied_scores(tmp_path):
    bench = load_benchmark(write_one_query(tmp_path / "b", [4.2, 0.0, 2.5, 1.0]))
    # c0 and c2 tie at 0.5: trec_eval's rule ranks the larger doc id (c2) first -> c1, c2, c0, c3
    result = run_retriever(
        bench,
        FixedScores({"q1": [0.5, 0.9, 0.5, 0.1]}),
        "statement-full",
        load_registry().get("fixed"),
    )
    dcg = 0.0 + (2**2.5 - 1) / LOG2_3 + (2**4.2 - 1) / 2 + (2**1.0 - 1) / LOG2_5
    idcg = (2**4.2 - 1) + (2**2.5 - 1) / LOG2_3 + (2**1.0 - 1) / 2 + 0.0
    assert result.ndcg == pytest.approx([dcg / idcg])
    assert result.ndcg[0] == pytest.approx(0.5792, abs=1e-4)  # 12.058 / 20.817
    assert result.tied_top10.tolist() == [0.5]  # 2 of the 4 positions hold a tied score
    files = write_outputs(result, tmp_path / "out")
    run = read_run(files["run_file"])
    assert [d for d, _, _ in run["q1"]] == ["c1", "c2", "c0", "c3"]


def test_tie_order_follows_doc_id_not_pool_position(tmp_path):
    bench = load_benchmark(write_one_query(tmp_path / "b", [0.0, 5.0], ids=["a", "z"]))
    # equal scores: "z" (pool position 1) ranks first, as trec_eval ranks it (doc id descending)
    result = run_retriever(
        bench, FixedScores({"q1": [1.0, 1.0]}), "statement-full", load_registry().get("fixed")
    )
    assert result.ndcg == pytest.approx([1.0])
    assert result.summary()["tie_rule"].startswith("score descending, ties by doc id descending")
    run = read_run(write_outputs(result, tmp_path / "out")["run_file"])
    assert run["q1"] == [("z", 1, 1.0), ("a", 2, 1.0)]


def test_all_zero_ratings_give_zero_ndcg(tmp_path):
    bench = load_benchmark(write_one_query(tmp_path / "b", [0.0, 0.0, 0.0]))
    result = run_retriever(
        bench, FixedScores({"q1": [3.0, 2.0, 1.0]}), "full-full", load_registry().get("fixed")
    )
    assert result.ndcg.tolist() == [0.0]


def test_nonfinite_scores_are_rejected(tmp_path):
    bench = load_benchmark(write_one_query(tmp_path / "b", [1.0, 2.0]))
    with pytest.raises(ValueError, match="finite"):
        run_retriever(
            bench,
            FixedScores({"q1": [1.0, float("nan")]}),
            "full-full",
            load_registry().get("fixed"),
        )


# --- run files ------------------------------------------------------------------------------


def test_run_file_format_and_roundtrip(tiny, tmp_path):
    rng = np.random.default_rng(3)
    scores = {q.query_id: np.round(rng.random(len(q.candidates)), 1) for q in tiny.queries}
    result = run_retriever(
        tiny,
        FixedScores(scores, spec="my model"),
        "statement-full",
        load_registry().get("my model"),
    )
    path = write_outputs(result, tmp_path / "out")["run_file"]
    lines = path.read_text().splitlines()
    assert len(lines) == sum(len(q.candidates) for q in tiny.queries)
    score_of = {
        (q.query_id, doc): scores[q.query_id][j]
        for q in tiny.queries
        for j, doc in enumerate(q.candidates)
    }
    for line in lines:
        qid, q0, doc, rank, score, tag = line.split(" ")
        assert q0 == "Q0" and tag == "my_model" and int(rank) >= 1
        assert float(score) == score_of[(qid, doc)]
    run = read_run(path)
    for q in tiny.queries:
        entries = run[q.query_id]
        assert [r for _, r, _ in entries] == list(range(1, len(q.candidates) + 1))
        values = [s for _, _, s in entries]
        assert values == sorted(values, reverse=True)
        # ties (rounded scores) by doc id descending (trec_eval's order)
        for (d1, _, s1), (d2, _, s2) in itertools.pairwise(entries):
            if s1 == s2:
                assert d1.encode() > d2.encode()
    # nDCG from the parsed run (ranks only) equals nDCG from the scores
    matrix = run_scores(
        run, [q.query_id for q in tiny.queries], [q.candidates for q in tiny.queries]
    )
    assert ndcg_at_k(matrix, tiny.ratings(), 10) == pytest.approx(result.ndcg)


def test_run_file_rejects_bad_files(tmp_path):
    bad = tmp_path / "bad.trec"
    bad.write_text("q1 Q0 d1 2 0.5 t\nq1 Q0 d2 1 0.4 t\n")
    with pytest.raises(ValueError, match="ranks"):
        read_run(bad)
    bad.write_text("q1 Q0 d1 1 0.4 t\nq1 Q0 d2 2 0.5 t\n")
    with pytest.raises(ValueError, match="increase"):
        read_run(bad)
    bad.write_text("q1 d1 1 0.4 t\n")
    with pytest.raises(ValueError, match="expected"):
        read_run(bad)
    with pytest.raises(ValueError, match="finite"):
        format_run(["q"], [["a"]], [np.array([np.inf])], "t")


def test_scores_roundtrip_exactly(tmp_path):
    values = np.array([0.1 + 0.2, 1e-17, -3.5, 123456.789012345])
    path = tmp_path / "r.trec"
    path.write_text(format_run(["q"], [["a", "b", "c", "d"]], [values], "t"))
    parsed = {d: s for d, _, s in read_run(path)["q"]}
    assert [parsed[d] for d in "abcd"] == values.tolist()


# --- per-domain aggregation and leaderboard --------------------------------------------------


def test_per_domain_means_and_leaderboard_columns(tiny, tmp_path):
    registry = load_registry()
    out = tmp_path / "eval"
    for spec in ("random", "jaccard"):
        for setting in ("statement-full", "full-full"):
            result = run_retriever(tiny, make_retriever(spec), setting, registry.get(spec))
            write_outputs(result, out)
            frame = result.per_query()
            manual = {
                d: float(np.mean(frame.filter(pl.col("domain") == d)["ndcg@10"].to_numpy()))
                for d in {"Algebra", "Geometry", "Number Theory"}
            }
            assert result.per_domain == pytest.approx(manual)
            assert result.mean == pytest.approx(frame["ndcg@10"].mean())
            assert sorted(frame["domain"].unique()) == ["Algebra", "Geometry", "Number Theory"]
    board = refresh_leaderboard(out, registry)
    expected = [
        "retriever",
        "setting",
        "ndcg@10",
        "ndcg@10_ci_low",
        "ndcg@10_ci_high",
        "ndcg@10_trec",
        "ndcg@10_trec_ci_low",
        "ndcg@10_trec_ci_high",
        "ndcg@10_mteb",
        "Algebra",
        "Geometry",
        "Number Theory",
        "median_latency_s",
        "n_queries",
        "tied_top10_share",
    ]
    csv = pl.read_csv(board.files["csv"])
    assert csv.columns == expected
    assert csv.height == 4 and set(csv["n_queries"]) == {len(QUERIES)}
    assert csv["setting"].to_list() == ["statement-full"] * 2 + ["full-full"] * 2
    for setting in ("statement-full", "full-full"):  # sorted by nDCG within a setting
        part = csv.filter(pl.col("setting") == setting)["ndcg@10"].to_list()
        assert part == sorted(part, reverse=True)
    md = board.files["markdown"].read_text().splitlines()
    shown = ["ndcg@10 [95% CI]", "ndcg@10_trec [95% CI]", "ndcg@10_mteb"]
    assert md[0] == "| " + " | ".join(expected[:2] + shown + expected[9:]) + " |"
    assert any(line.startswith("| Random (seeded) | statement-full |") for line in md)
    assert md[-1].startswith("Ties in retriever scores: score descending, ties by doc id")
    import duckdb

    con = duckdb.connect(str(board.files["duckdb"]), read_only=True)
    table = con.sql("SELECT spec, setting, kind FROM leaderboard ORDER BY spec, setting").fetchall()
    con.close()
    assert ("jaccard", "full-full", "single-pass") in table and len(table) == 4
    assert set(board.plots) == {"quality_latency", "per_domain", "confidence"}  # no release date
    for path in board.plots.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_release_date_plot_when_dates_are_known(tiny, tmp_path):
    registry = load_registry()
    result = run_retriever(
        tiny,
        FixedScores(
            {q.query_id: list(range(len(q.candidates))) for q in tiny.queries}, spec="st:minilm"
        ),
        "statement-full",
        registry.get("st:minilm"),
    )
    write_outputs(result, tmp_path / "eval")
    board = refresh_leaderboard(tmp_path / "eval", registry)
    assert "release_date" in board.plots
    assert board.frame["release_date"].to_list()[0].isoformat() == "2021-08-01"


def test_leaderboard_frame_fills_missing_domains_with_null():
    summaries = [
        {
            "spec": "a",
            "setting": "statement-full",
            "ndcg@10": 0.5,
            "per_domain": {"X": 0.5},
            "median_latency_s": 0.1,
            "n_queries": 2,
            "benchmark_hash": "h",
        },
        {
            "spec": "b",
            "setting": "statement-full",
            "ndcg@10": 0.7,
            "per_domain": {"Y": 0.7},
            "median_latency_s": 0.2,
            "n_queries": 2,
            "benchmark_hash": "h",
        },
    ]
    frame = leaderboard_frame(summaries, load_registry())
    assert frame["retriever"].to_list() == ["b", "a"]
    assert frame["X"].to_list() == [None, 0.5] and frame["kind"].to_list() == ["single-pass"] * 2


# --- Pareto frontier -------------------------------------------------------------------------


def brute_force_frontier(lat, qual):
    """O(n²): p is on the frontier iff no q is at least as good on both and better on one."""
    n = len(lat)
    return np.array(
        [
            not any(
                lat[j] <= lat[i] and qual[j] >= qual[i] and (lat[j] < lat[i] or qual[j] > qual[i])
                for j in range(n)
            )
            for i in range(n)
        ]
    )


def test_pareto_frontier_matches_brute_force_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 16))
        lat = rng.integers(0, 5, n).astype(float)  # few values: many ties
        qual = rng.integers(0, 5, n).astype(float)
        assert pareto_frontier(lat, qual).tolist() == brute_force_frontier(lat, qual).tolist()


def test_pareto_frontier_hand_example():
    lat = [0.01, 0.02, 1.0, 5.0, 0.5, 0.01]
    qual = [0.40, 0.41, 0.60, 0.55, 0.30, 0.40]  # 5.0 s is dominated by 1.0 s; 0.5 s by 0.01 s
    assert pareto_frontier(lat, qual).tolist() == [True, True, True, False, False, True]
    assert pareto_frontier([1.0, float("nan")], [0.5, 0.9]).tolist() == [True, False]


# --- significance -----------------------------------------------------------------------------


def test_randomization_test_identical_systems():
    a = np.random.default_rng(1).random(40)
    assert randomization_test(a, a.copy(), 2000) == 1.0
    assert bootstrap_ci(a, a.copy(), 500) == (0.0, 0.0)


def test_randomization_test_clearly_better_system():
    rng = np.random.default_rng(2)
    b = rng.random(30)
    a = b + 0.1 + rng.normal(0, 0.02, 30)
    p = randomization_test(a, b, 10_000, seed=0)
    assert p == 1 / 10_001  # no sign flip reaches the observed mean difference
    low, high = bootstrap_ci(a, b, 2000)
    assert 0 < low < 0.1 < high


def test_randomization_test_is_seeded_and_symmetric():
    rng = np.random.default_rng(4)
    a, b = rng.random(25), rng.random(25)
    p = randomization_test(a, b, 3000, seed=11)
    assert p == randomization_test(a, b, 3000, seed=11)
    assert p == randomization_test(b, a, 3000, seed=11)  # two-sided
    assert 0.0 < p <= 1.0
    result = compare("a", "b", "statement-full", a, b, 3000, seed=11)
    assert result.p_value == p and result.difference == pytest.approx(np.mean(a - b))
    assert result.ci_low <= result.difference <= result.ci_high
    with pytest.raises(ValueError):
        randomization_test(a, b[:-1])


def test_randomization_matches_exact_enumeration_for_small_n():
    d = np.array([0.3, -0.1, 0.2, 0.05, 0.15])
    exact = np.mean(
        [
            abs(np.dot(s, d)) / 5 >= abs(d.mean()) - 1e-12
            for s in itertools.product([-1, 1], repeat=5)
        ]
    )
    p = randomization_test(d, np.zeros(5), 20_000, seed=0)
    assert p == pytest.approx(exact, abs=0.015)


# --- registry and envelopes -------------------------------------------------------------------


def test_registry_envelopes_and_defaults(tmp_path):
    registry = load_registry()
    e5 = registry.get("st:intfloat/e5-base-v2")
    assert e5.envelope_query("x") == "query: x" and e5.envelope_document("y") == "passage: y"
    qwen = registry.get("st:Qwen/Qwen3-Embedding-0.6B")
    assert qwen.envelope_query("Find x.").startswith("Instruct: Given a math problem")
    assert qwen.envelope_query("Find x.").endswith("\nQuery:Find x.")
    unknown = registry.get("ce:some/model")
    assert (unknown.kind, unknown.display_name, unknown.envelope_query("q")) == (
        "reranker",
        "ce:some/model",
        "q",
    )
    path = tmp_path / "r.yaml"
    path.write_text(
        "retrievers:\n  st:m:\n    instruction: Find similar\n    query_prefix: '>> '\n"
        "    release_date: 2024\n"
    )
    entry = load_registry(path).get("st:m")
    assert INSTRUCTION_TEMPLATE == "Instruct: {instruction}\nQuery: {query}"
    assert entry.envelope_query("{x}") == ">> Instruct: Find similar\nQuery: {x}"
    assert entry.release_date.isoformat() == "2024-01-01"
    assert parse_date("2023-09").isoformat() == "2023-09-01"
    path.write_text("retrievers:\n  bm25:\n    colour: red\n")
    with pytest.raises(ValueError, match="unknown field"):
        load_registry(path)


def test_envelopes_reach_the_retriever(tiny):
    seen: list[str] = []

    class Recorder(FixedScores):
        def score(self, task):
            seen.extend([task.query, task.documents[0]])
            return np.zeros(len(task.documents)), 0.0

    entry = load_registry().get("st:intfloat/e5-base-v2")
    run_retriever(tiny, Recorder({}), "statement-statement", entry)
    assert seen[0] == "query: " + tiny.queries[0].problem
    assert seen[1].startswith("passage: ")


def test_retriever_slug_is_safe_and_distinct():
    assert retriever_slug("bm25") == "bm25"
    a, b = retriever_slug("st:a/b"), retriever_slug("st:a_b")
    assert a != b and "/" not in a and ":" not in a


# --- random and jaccard baselines -------------------------------------------------------------


def test_random_is_seeded_per_query_and_jaccard_reads_the_benchmark(tiny):
    registry = load_registry()
    one = run_retriever(
        tiny, make_retriever("random", seed=5), "statement-full", registry.get("random")
    )
    two = run_retriever(tiny, make_retriever("random", seed=5), "full-full", registry.get("random"))
    assert all(np.array_equal(x, y) for x, y in zip(one.scores, two.scores, strict=True))
    other = run_retriever(
        tiny, make_retriever("random", seed=6), "full-full", registry.get("random")
    )
    assert not np.array_equal(one.scores[0], other.scores[0])
    jac = run_retriever(tiny, make_retriever("jaccard"), "statement-full", registry.get("jaccard"))
    assert np.array_equal(jac.scores[0], tiny.queries[0].jaccard)


# --- MLflow -----------------------------------------------------------------------------------


def test_mlflow_run_has_params_metrics_and_artifacts(tiny, tmp_path):
    from mlflow import MlflowClient

    from saber_eval.tracking import log_result, tracking_uri

    registry = load_registry()
    result = run_retriever(
        tiny, make_retriever("jaccard"), "statement-full", registry.get("jaccard")
    )
    write_outputs(result, tmp_path / "eval")
    board = refresh_leaderboard(tmp_path / "eval", registry)
    store = tmp_path / "mlruns"
    run_id = log_result(result, store, plots=board.plots.values())
    client = MlflowClient(tracking_uri(store))
    run = client.get_run(run_id)
    assert tracking_uri(store) == store.resolve().as_uri()
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert (params["retriever"], params["setting"], params["benchmark_hash"]) == (
        "jaccard",
        "statement-full",
        tiny.hash,
    )
    metrics = run.data.metrics
    assert metrics["ndcg_at_10"] == pytest.approx(result.mean)
    assert metrics["ndcg_at_10.Number_Theory"] == pytest.approx(result.per_domain["Number Theory"])
    assert metrics["median_latency_s"] == pytest.approx(result.median_latency_s)
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {
        "statement-full.trec",
        "statement-full.per_query.csv",
        "quality_latency.png",
    } <= artifacts
    assert len(load_summaries(tmp_path / "eval")) == 1


def test_importing_saber_eval_imports_neither_dagster_nor_mlflow():
    import subprocess
    import sys

    code = (
        "import sys, saber_eval, saber_eval.benchmark, saber_llm.embeddings.cache, "
        "saber_eval.cli, "
        "saber_eval.leaderboard, saber_eval.plots, saber_eval.registry, saber_eval.retrievers, "
        "saber_eval.runfile, saber_eval.runner, saber_eval.significance, saber_eval.tracking, "
        "saber_eval.stability, saber_eval.mteb_task, saber_eval.correlation; "
        "print('dagster' in sys.modules, 'mlflow' in sys.modules, 'torch' in sys.modules, "
        "'mteb' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False False False"
