"""The ``colbert`` engine end to end: a pylate ColBERT built from the packaged MiniLM (seeded
projection layer), saved, then evaluated through ``colbert:<folder>``; every score checked
against MaxSim computed here with numpy from pylate's token embeddings."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_eval_data import write_tiny_benchmark

from saber_eval.benchmark import MAIN_SETTING
from saber_eval.engines.base import EngineError
from saber_eval.engines.late_interaction import load_colbert
from saber_eval.loading import load_benchmark
from saber_eval.registry import Registry, RetrieverEntry
from saber_eval.retrievers import make_retriever
from saber_eval.runner import build_tasks, run_retriever
from saber_llm.embeddings.embedder import default_embedder_path

pytest.importorskip("pylate")


@pytest.fixture(scope="module")
def colbert_folder(tmp_path_factory):
    """A ColBERT from the packaged MiniLM with a seeded 384 → 128 projection, saved."""
    torch.manual_seed(0)
    model = load_colbert(str(default_embedder_path()), device="cpu")
    folder = tmp_path_factory.mktemp("colbert-minilm")
    model.save(str(folder))
    return folder


def maxsim(query: np.ndarray, document: np.ndarray) -> float:
    """Σ_i max_j q_i · d_j."""
    return float((query.astype(np.float64) @ document.astype(np.float64).T).max(axis=1).sum())


def test_colbert_scores_are_maxsim_of_pylate_token_embeddings(colbert_folder, tmp_path):
    bench = load_benchmark(write_tiny_benchmark(tmp_path / "tinybench"))
    spec = f"colbert:{colbert_folder}"
    entry = Registry(entries={}, hash="").get(spec)
    retriever = make_retriever(spec, entry=entry)
    retriever.preflight()
    result = run_retriever(bench, retriever, MAIN_SETTING, entry)

    reference = load_colbert(str(colbert_folder), device="cpu")
    assert reference[-1].out_features == 128  # the saved projection, not a fresh one
    tasks = build_tasks(bench, MAIN_SETTING, entry)
    for task, scores in zip(tasks, result.scores, strict=True):
        (query,) = reference.encode([task.query], is_query=True)
        documents = reference.encode(list(task.documents), is_query=False)
        expected = [maxsim(query, d) for d in documents]
        np.testing.assert_allclose(scores, expected, atol=1e-5, rtol=0)
    assert len({round(float(s), 4) for s in result.scores[0]}) > 1  # not constant
    assert 0.0 <= result.mean <= 1.0
    texts = {t.query for t in tasks} | {d for t in tasks for d in t.documents}
    assert result.notes["texts_encoded"] == len(texts)  # each distinct text encoded once
    assert result.notes["query_length"] == 32 and result.notes["document_length"] == 180


def test_colbert_options_reach_pylate(colbert_folder, tmp_path):
    bench = load_benchmark(write_tiny_benchmark(tmp_path / "tinybench"))
    spec = f"colbert:{colbert_folder}"
    entry = RetrieverEntry(
        spec=spec,
        display_name="c",
        kind="single-pass",
        options={"query_length": 8, "document_length": 6, "device": "cpu"},
    )
    result = run_retriever(bench, make_retriever(spec, entry=entry), MAIN_SETTING, entry)
    assert result.notes["query_length"] == 8 and result.notes["document_length"] == 6
    reference = load_colbert(str(colbert_folder), device="cpu", query_length=8, document_length=6)
    task = build_tasks(bench, MAIN_SETTING, entry)[0]
    (query,) = reference.encode([task.query], is_query=True)
    documents = reference.encode(list(task.documents), is_query=False)
    assert query.shape[0] == 8 and max(d.shape[0] for d in documents) <= 6
    expected = [maxsim(query, d) for d in documents]
    np.testing.assert_allclose(result.scores[0], expected, atol=1e-5, rtol=0)


def test_colbert_rejects_unknown_options_and_missing_folders(tmp_path):
    bad = RetrieverEntry(spec="colbert:x", display_name="x", kind="single-pass",
                         options={"doc_len": 3})  # fmt: skip
    with pytest.raises(EngineError, match="doc_len"):
        make_retriever("colbert:x", entry=bad)
    with pytest.raises(EngineError, match="does not exist"):
        make_retriever(f"colbert:{tmp_path / 'missing'}")
