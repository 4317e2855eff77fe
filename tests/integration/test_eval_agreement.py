"""Numbers that agree with the tools users already have: ``ndcg@10_trec`` against pytrec_eval
and ir_measures on our run files and BEIR-convention qrels; the real ``mteb`` package on our
MTEB task against ours under its 0–100 label convention (through the shared embedding cache);
the leaderboard's intervals and rank stability, ``saber export --format mteb``,
``saber eval --via mteb`` and ``--mteb-scores`` end to end."""

import csv
import itertools
import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from test_eval import FixedScores
from test_eval_data import QUERIES, write_tiny_benchmark

from saber_core.evaluation.metrics import integer_labels, ndcg_at_k
from saber_eval.cli import eval_main
from saber_eval.loading import load_benchmark
from saber_eval.mteb_task import load_mteb_task, ndcg_mteb_convention, run_mteb, write_mteb_task
from saber_eval.registry import load_registry
from saber_eval.retrievers import make_retriever
from saber_eval.runfile import read_run, run_scores
from saber_eval.runner import retriever_slug, run_retriever, write_outputs
from saber_llm.embeddings.cache import EmbeddingCache


@pytest.fixture
def tiny(tmp_path):
    return load_benchmark(write_tiny_benchmark(tmp_path / "tinybench"))


def write_beir_qrels(bench, path: Path, scale: float = 1.0) -> Path:
    """Qrels in the exported convention, written here independently: floor(scale·r + ½)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        handle.write("query-id\tcorpus-id\tscore\n")
        for q in bench.queries:
            for doc, rating in zip(q.candidates, q.relevance.tolist(), strict=True):
                handle.write(f"{q.query_id}\t{doc}\t{math.floor(scale * rating + 0.5)}\n")
    return path


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    with path.open() as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
    return qrels


def read_run_scores(path: Path) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        qid, _, doc, _, score, _ = line.split()
        run.setdefault(qid, {})[doc] = float(score)
    return run


def tied_scores(bench) -> dict[str, list[float]]:
    """Scores with many ties (0, 0.5 or 1): trec_eval orders ties by descending doc id."""
    rng = np.random.default_rng(4)
    return {q.query_id: (rng.integers(0, 3, len(q.candidates)) / 2).tolist() for q in bench.queries}


# --- ndcg@10_trec = trec_eval (pytrec_eval, ir_measures) on the same run file and qrels -------


def test_ndcg_trec_equals_pytrec_eval_and_ir_measures_on_our_run_files(tiny, tmp_path):
    import ir_measures
    import pytrec_eval
    from ir_measures import nDCG

    qrels_path = write_beir_qrels(tiny, tmp_path / "beir" / "qrels" / "test.tsv")
    qrels = read_qrels(qrels_path)
    registry = load_registry()
    retrievers = [make_retriever(s) for s in ("bm25", "jaccard", "random")]
    retrievers.append(FixedScores(tied_scores(tiny), spec="tied"))
    for retriever in retrievers:
        result = run_retriever(tiny, retriever, "statement-full", registry.get(retriever.spec))
        run_file = write_outputs(result, tmp_path / "eval")["run_file"]
        run = read_run_scores(run_file)
        expected = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
        by_ir = {
            m.query_id: m.value
            for m in ir_measures.iter_calc(
                [nDCG @ 10],
                ir_measures.read_trec_qrels(str(write_trec_qrels(qrels, tmp_path / "q.txt"))),
                ir_measures.read_trec_run(str(run_file)),
            )
        }
        for qid, ours in zip(result.query_ids, result.ndcg_trec.tolist(), strict=True):
            assert ours == pytest.approx(expected[qid]["ndcg_cut_10"], abs=1e-12), retriever.spec
            assert ours == pytest.approx(by_ir[qid], abs=1e-12), retriever.spec
        summary = json.loads(result.files["summary"].read_text())
        assert summary["ndcg@10_trec"] == pytest.approx(
            np.mean([expected[q]["ndcg_cut_10"] for q in result.query_ids])
        )
        if retriever.spec == "tied":  # trec_eval ignores the rank column; ours is its order
            by_rank = ndcg_at_k(
                run_scores(read_run(run_file), result.query_ids, result.candidates),
                integer_labels(tiny.ratings()),
                10,
                gain="linear",
            )
            np.testing.assert_allclose(by_rank, result.ndcg_trec, atol=1e-12)


def write_trec_qrels(qrels: dict[str, dict[str, int]], path: Path) -> Path:
    """The same qrels in TREC format (``qid 0 doc rel``) for ir_measures' reader."""
    path.write_text(
        "".join(f"{q} 0 {d} {r}\n" for q, docs in qrels.items() for d, r in docs.items())
    )
    return path


# --- the mteb package on our task = ours under its 0–100 convention ----------------------------


def test_mteb_task_files_follow_the_stated_conventions(tiny, tmp_path):
    folder = tmp_path / "mteb"
    counts = write_mteb_task(tiny, folder)
    assert counts["queries.jsonl"] == len(QUERIES) and counts["corpus.jsonl"] == 12
    assert read_qrels(folder / "qrels" / "test.tsv") == read_qrels(
        write_beir_qrels(tiny, tmp_path / "q100.tsv", scale=20)
    )
    top = [json.loads(line) for line in (folder / "top_ranked" / "test.jsonl").open()]
    assert [t["corpus-ids"] for t in top] == [list(q.candidates) for q in tiny.queries]
    meta = json.loads((folder / "metadata.json").read_text())
    assert meta["task"]["dataset"]["revision"] == tiny.hash
    assert meta["task"]["type"] == "Reranking" and meta["saber"]["label_scale"] == 20
    stats = json.loads((folder / "descriptive_stats.json").read_text())["test"]
    assert (stats["num_queries"], stats["num_documents"]) == (len(QUERIES), 12)
    assert stats["top_ranked_statistics"]["max_top_ranked_per_query"] == 12
    task = load_mteb_task(folder)
    assert task.metadata.name == "SaberMathReranking"
    assert task.metadata.dataset["revision"] == tiny.hash


def test_mteb_run_equals_ours_under_its_label_convention_and_reuses_the_cache(tiny, tmp_path):
    import pytrec_eval

    registry = load_registry()
    cache = EmbeddingCache(tmp_path / "cache.duckdb")
    ours = run_retriever(
        tiny, make_retriever("st:minilm", cache=cache), "statement-full", registry.get("st:minilm")
    )
    folder = tmp_path / "mteb"
    write_mteb_task(tiny, folder)
    fresh = EmbeddingCache(tmp_path / "cache.duckdb")  # another process: vectors from the file
    scores, model = run_mteb(folder, "st:minilm", fresh, registry.get("st:minilm"))
    assert fresh.encoded == 0 and fresh.hits == len(QUERIES) + 12  # nothing encoded twice
    assert model.texts == {"query": len(QUERIES), "document": 12}
    convention = ndcg_mteb_convention(tiny, ours.scores)
    # mteb rounds its means to 5 decimals
    assert scores["ndcg_at_10"] == pytest.approx(float(np.mean(convention)), abs=5e-6)
    assert scores["main_score"] == scores["ndcg_at_10"]
    # and the convention itself is pytrec_eval on the 0–100 qrels and our scores
    qrels = read_qrels(folder / "qrels" / "test.tsv")
    run = {
        q.query_id: dict(zip(q.candidates, s.tolist(), strict=True))
        for q, s in zip(tiny.queries, ours.scores, strict=True)
    }
    expected = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    assert convention.tolist() == pytest.approx(
        [expected[q]["ndcg_cut_10"] for q in ours.query_ids], abs=1e-12
    )


# --- leaderboard confidence, CLI end to end ----------------------------------------------------


def test_saber_export_mteb_and_eval_via_mteb_end_to_end(tiny, tmp_path):
    from mlflow import MlflowClient

    from saber_cli.main import main
    from saber_eval.tracking import tracking_uri

    out = tmp_path / "mteb-export"
    assert (
        main(["export", "--format", "mteb", "--benchmark", str(tiny.path), "--out", str(out)]) == 0
    )
    assert (out / "qrels" / "test.tsv").exists() is True
    evals, store = tmp_path / "eval", tmp_path / "mlruns"
    args = ["--benchmark", str(tiny.path), "--out", str(evals), "--cache", str(tmp_path / "c.db")]
    args += ["--mlflow", str(store), "--bootstrap", "2000", "--seed", "3", "--via", "mteb"]
    for spec in ("st:minilm", "bm25", "jaccard", "random"):
        args += ["--retriever", spec]
    assert eval_main(args) == 0
    folder = evals / tiny.label
    board = pl.read_csv(folder / "leaderboard.csv")
    recorded = json.loads(
        (folder / "mteb" / retriever_slug("st:minilm") / "statement-full.json").read_text()
    )
    assert abs(recorded["difference"]) <= 5e-6 and recorded["encoded"] == 0  # ours ran first
    minilm = board.filter(pl.col("retriever") == "all-MiniLM-L6-v2").row(0, named=True)
    assert minilm["ndcg@10_mteb"] == pytest.approx(recorded["ndcg@10_mteb"])
    assert board.filter(pl.col("ndcg@10_mteb").is_not_null()).height == 1  # st: only
    # intervals = an independent percentile bootstrap of the per-query CSVs, same seed
    per_query = {
        spec: pl.read_csv(folder / "runs" / slug / "statement-full.per_query.csv")
        .sort("query_id")["ndcg@10"]
        .to_numpy()
        for spec, slug in (("BM25 (bm25s, per query)", "bm25"),)
    }
    idx = np.random.default_rng(3).integers(0, len(QUERIES), size=(2000, len(QUERIES)))
    bm25 = per_query["BM25 (bm25s, per query)"]
    low, high = np.percentile([bm25[i].mean() for i in idx], [2.5, 97.5])
    row = board.filter(pl.col("retriever") == "BM25 (bm25s, per query)").row(0, named=True)
    assert (row["ndcg@10_ci_low"], row["ndcg@10_ci_high"]) == pytest.approx((low, high))
    stability = pl.read_csv(folder / "rank_stability.csv")
    assert stability.height == 2 * 3  # two metrics × three adjacent pairs
    first = stability.filter((pl.col("metric") == "ndcg@10") & (pl.col("rank") == 1)).row(
        0, named=True
    )
    ordered = board.sort("ndcg@10", descending=True)
    assert first["mean"] == pytest.approx(ordered["ndcg@10"][0])
    summary = json.loads((folder / "leaderboard.json").read_text())
    assert summary["bootstrap"]["seed"] == 3 and summary["bootstrap"]["n_resamples"] == 2000
    assert {t["metric"] for t in summary["top_stays"]} == {"ndcg@10", "ndcg@10_trec"}
    assert "[" in (folder / "leaderboard.md").read_text()  # value [low, high]
    assert (folder / "confidence.png").read_bytes()[:4] == b"\x89PNG"
    client = MlflowClient(tracking_uri(store))
    runs = client.search_runs(client.get_experiment_by_name("saber-eval").experiment_id)
    bm25_run = next(r for r in runs if r.data.params["retriever"] == "bm25")
    assert bm25_run.data.metrics["ndcg_at_10_ci_low"] == pytest.approx(low)
    assert bm25_run.data.params["bootstrap_seed"] == "3"
    assert "ndcg_at_10_trec" in bm25_run.data.metrics


def test_mteb_scores_correlation_by_hand(tiny, tmp_path):
    evals = tmp_path / "eval"
    args = ["--benchmark", str(tiny.path), "--out", str(evals), "--no-mlflow"]
    for spec in ("bm25", "jaccard", "random"):
        args += ["--retriever", spec]
    scores = {"bm25": 0.2, "Jaccard (benchmark signal)": 0.9, "random": 0.5, "unknown": 1.0}
    path = tmp_path / "mteb.csv"
    path.write_text("retriever,mteb_score\n" + "".join(f"{k},{v}\n" for k, v in scores.items()))
    assert eval_main([*args, "--mteb-scores", str(path), "--bootstrap", "200"]) == 0
    folder = evals / tiny.label
    result = json.loads((folder / "mteb_correlation.json").read_text())
    rows = {r["spec"]: r for r in result["rows"]}
    assert set(rows) == {"bm25", "jaccard", "random"}  # "unknown" is on no leaderboard
    saber = np.array([rows[s]["ndcg@10"] for s in ("bm25", "jaccard", "random")])
    mteb = np.array([0.2, 0.9, 0.5])
    (everything,) = result["subsets"]  # no --since: one subset
    assert everything["n"] == 3
    # Spearman without ties: 1 − 6 Σ d² / (n (n² − 1)); Kendall: (concordant − discordant) / 3
    rank = lambda v: np.argsort(np.argsort(v))  # noqa: E731
    d = rank(saber) - rank(mteb)
    assert everything["spearman"] == pytest.approx(1 - 6 * np.sum(d**2) / (3 * 8))
    sign = [
        np.sign(saber[i] - saber[j]) * np.sign(mteb[i] - mteb[j])
        for i, j in itertools.combinations(range(3), 2)
    ]
    assert everything["kendall_tau_b"] == pytest.approx(sum(sign) / 3)
    # Pearson: Σ (x − x̄)(y − ȳ) / √(Σ (x − x̄)² Σ (y − ȳ)²)
    x, y = mteb - mteb.mean(), saber - saber.mean()
    assert everything["pearson_r"] == pytest.approx(x @ y / np.sqrt((x @ x) * (y @ y)))
    assert (folder / "mteb_correlation.png").read_bytes()[:4] == b"\x89PNG"
