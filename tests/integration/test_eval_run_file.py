"""The ``run`` engine: a run exported by the runner scores back to the same nDCG; MTEB's own
predictions file works too; foreign ids fail before anything is scored or written; candidates a
run leaves out get min − 1 and are counted."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_eval_data import write_tiny_benchmark

from saber_eval.benchmark import MAIN_SETTING
from saber_eval.engines.base import EngineError
from saber_eval.loading import load_benchmark
from saber_eval.mteb_task import run_mteb, write_mteb_task
from saber_eval.registry import Registry, load_registry
from saber_eval.retrievers import make_retriever
from saber_eval.runner import evaluate_specs, run_retriever, write_outputs
from saber_llm.embeddings.cache import EmbeddingCache

REGISTRY = Registry(entries={}, hash="")


@pytest.fixture
def tiny(tmp_path):
    return load_benchmark(write_tiny_benchmark(tmp_path / "tinybench"))


def score_run(bench, path, setting=MAIN_SETTING):
    spec = f"run:{path}"
    retriever = make_retriever(spec)
    retriever.preflight()
    return run_retriever(bench, retriever, setting, REGISTRY.get(spec))


@pytest.fixture
def bm25_run(tiny, tmp_path):
    """bm25 on the tiny benchmark, written by the runner: (result, ``<setting>.trec``)."""
    result = run_retriever(tiny, make_retriever("bm25"), MAIN_SETTING, REGISTRY.get("bm25"))
    return result, write_outputs(result, tmp_path / "out")["run_file"]


def test_exported_run_scores_back_to_the_same_ndcg(tiny, bm25_run):
    original, path = bm25_run
    assert path.name == f"{MAIN_SETTING}.trec"
    again = score_run(tiny, path)
    assert again.mean == pytest.approx(original.mean, abs=1e-12)
    np.testing.assert_allclose(again.ndcg, original.ndcg, atol=1e-12, rtol=0)
    np.testing.assert_allclose(again.ndcg_trec, original.ndcg_trec, atol=1e-12, rtol=0)
    for ours, theirs in zip(again.scores, original.scores, strict=True):
        assert ours.tolist() == theirs.tolist()  # repr floats round-trip exactly
    assert again.notes["unscored"] == 0


def test_foreign_query_and_document_ids_fail_before_anything_is_written(tiny, bm25_run, tmp_path):
    _, path = bm25_run
    lines = path.read_text().splitlines()
    foreign_query = tmp_path / "foreign_query.trec"
    foreign_query.write_text("\n".join([*lines, "q-nowhere Q0 alg-quad-1 1 1.0 x"]) + "\n")
    qid, q0, _, *rest = lines[0].split()
    foreign_doc = tmp_path / "foreign_doc.trec"
    foreign_doc.write_text("\n".join([" ".join([qid, q0, "doc-nowhere", *rest]), *lines[1:]]))
    for bad, name, kind in ((foreign_query, "q-nowhere", "query"),
                            (foreign_doc, "doc-nowhere", "document")):  # fmt: skip
        out = tmp_path / f"eval-{kind}"
        with pytest.raises(
            EngineError, match=rf"1 {kind} id\(s\) the benchmark does not have: {name}$"
        ):
            evaluate_specs(tiny, ["bm25", f"run:{bad}"], [MAIN_SETTING], out, registry=REGISTRY,
                           make=make_retriever)  # fmt: skip
        assert not out.exists()  # not even the first spec's runs: ids are checked before any


def test_preflight_checks_the_file_exists_and_parses(tmp_path):
    with pytest.raises(EngineError, match="does not exist"):
        make_retriever(f"run:{tmp_path / 'missing.trec'}").preflight()
    bad = tmp_path / "bad.trec"
    bad.write_text("q1 Q0 d1 2 1.0 x\n")
    with pytest.raises(EngineError, match=r"ranks are not 1\.\.1"):
        make_retriever(f"run:{bad}").preflight()


def test_many_foreign_ids_are_counted_and_the_first_named(tiny, bm25_run, tmp_path):
    _, path = bm25_run
    extra = [f"q-x{i} Q0 alg-quad-1 1 1.0 x" for i in range(5)]
    bad = tmp_path / "many.trec"
    bad.write_text(path.read_text() + "\n".join(extra) + "\n")
    with pytest.raises(EngineError, match=r"5 query id\(s\) .*: q-x0, q-x1, q-x2, …$"):
        score_run(tiny, bad)


def test_mteb_predictions_file_and_folder(tiny, tmp_path):
    registry = load_registry()
    cache = EmbeddingCache(tmp_path / "cache.duckdb")
    ours = run_retriever(
        tiny, make_retriever("st:minilm", cache=cache), MAIN_SETTING, registry.get("st:minilm")
    )
    task = tmp_path / "mteb-task"
    write_mteb_task(tiny, task)
    predictions = tmp_path / "predictions"
    run_mteb(task, "st:minilm", cache, registry.get("st:minilm"), prediction_folder=predictions)
    (written,) = predictions.glob("*_predictions.json")
    assert "mteb_model_meta" in json.loads(written.read_text())
    for path in (written, predictions):
        result = score_run(tiny, path)
        # mteb's float32 cosine of the same vectors
        for theirs, mine in zip(result.scores, ours.scores, strict=True):
            np.testing.assert_allclose(theirs, mine, atol=1e-5, rtol=0)
        np.testing.assert_allclose(result.ndcg, ours.ndcg, atol=1e-12, rtol=0)
        assert result.notes["unscored"] == 0


def test_plain_predictions_json_with_unscored_candidates(tiny, tmp_path):
    query = tiny.queries[0]
    given = {doc: float(i) for i, doc in enumerate(query.candidates[:3])}
    path = tmp_path / "plain.json"
    path.write_text(json.dumps({query.query_id: given}))
    result = score_run(tiny, path)
    assert result.scores[0].tolist() == [0.0, 1.0, 2.0] + [-1.0] * (len(query.candidates) - 3)
    assert all(s.tolist() == [0.0] * len(s) for s in result.scores[1:])  # queries not in the run
    assert result.notes["unscored"] == sum(len(q.candidates) for q in tiny.queries) - 3
