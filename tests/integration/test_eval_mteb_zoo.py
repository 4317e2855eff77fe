"""The ``mteb`` engine offline: mteb's own loader finds the packaged MiniLM in a temporary
Hugging Face cache laid out at the revision mteb's model meta names (``loader_kwargs:
{cache_folder: …}``). Scores are checked against cosines of sentence-transformers encodings
made here, with the prompts mteb's meta lists (``intfloat/e5-small-v2``: ``query: `` /
``passage: ``, its weights stood in for by the MiniLM); the release date comes from the meta;
vectors go through the embedding cache; missing weights are one clear error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer
from test_eval_data import write_tiny_benchmark

from saber_eval.benchmark import MAIN_SETTING
from saber_eval.engines.base import EngineError
from saber_eval.loading import load_benchmark
from saber_eval.registry import RetrieverEntry
from saber_eval.retrievers import make_retriever
from saber_eval.runner import build_tasks, run_retriever
from saber_llm.embeddings.cache import EmbeddingCache
from saber_llm.embeddings.embedder import default_embedder_path

mteb = pytest.importorskip("mteb")
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
E5 = "intfloat/e5-small-v2"


def hub_cache(root, name: str):
    """A Hugging Face hub cache holding the packaged MiniLM as ``name`` at mteb's revision."""
    revision = mteb.get_model_meta(name).revision
    repo = root / f"models--{name.replace('/', '--')}"
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    for item in Path(default_embedder_path()).iterdir():
        (snapshot / item.name).symlink_to(item)
    return root


def entry(name: str, **options) -> RetrieverEntry:
    return RetrieverEntry(spec=f"mteb:{name}", display_name=name, kind="single-pass",
                          options={"device": "cpu", **options})  # fmt: skip


def expected_cosines(model, task, query_prompt: str, document_prompt: str) -> np.ndarray:
    query = model.encode([query_prompt + task.query])[0].astype(np.float64)
    docs = model.encode([document_prompt + d for d in task.documents]).astype(np.float64)
    return docs @ query / (np.linalg.norm(docs, axis=1) * np.linalg.norm(query))


@pytest.mark.parametrize(
    ("name", "query_prompt", "document_prompt"), [(MINILM, "", ""), (E5, "query: ", "passage: ")]
)
def test_mteb_model_scores_with_its_prompts_and_release_date(
    tmp_path, name, query_prompt, document_prompt
):
    bench = load_benchmark(write_tiny_benchmark(tmp_path / "tinybench"))
    folder = hub_cache(tmp_path / "hub", name)
    item = entry(name, loader_kwargs={"cache_folder": str(folder)})
    cache = EmbeddingCache(tmp_path / "cache.duckdb")
    retriever = make_retriever(item.spec, entry=item, cache=cache)
    retriever.preflight()
    result = run_retriever(bench, retriever, MAIN_SETTING, item)

    reference = SentenceTransformer(str(default_embedder_path()), device="cpu")
    tasks = build_tasks(bench, MAIN_SETTING, item)
    for task, scores in zip(tasks, result.scores, strict=True):
        expected = expected_cosines(reference, task, query_prompt, document_prompt)
        np.testing.assert_allclose(scores, expected, atol=1e-5, rtol=0)
    release = mteb.get_model_meta(name).release_date
    assert result.notes["release_date"] == release == retriever.metadata()["release_date"]
    assert str(release) == {MINILM: "2021-08-30", E5: "2024-02-08"}[name]
    revision = mteb.get_model_meta(name).revision
    assert result.notes["model"] == f"mteb:{name}:{revision}"
    texts = len(tasks) + len({d for t in tasks for d in t.documents})
    assert result.notes["cache_written"] == texts

    # another process: every vector from the cache file, the model never loaded (no weights)
    fresh = EmbeddingCache(tmp_path / "cache.duckdb")
    offline = entry(name, loader_kwargs={"cache_folder": str(tmp_path / "empty")})
    again = run_retriever(bench, make_retriever(offline.spec, entry=offline, cache=fresh),
                          MAIN_SETTING, offline)  # fmt: skip
    assert fresh.encoded == 0 and again.notes["cache_written"] == 0
    for a, b in zip(again.scores, result.scores, strict=True):
        assert a.tolist() == b.tolist()


def test_missing_weights_offline_is_one_line_naming_the_model(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    bench = load_benchmark(write_tiny_benchmark(tmp_path / "tinybench"))
    item = entry(MINILM, loader_kwargs={"cache_folder": str(tmp_path / "empty")})
    retriever = make_retriever(item.spec, entry=item)
    retriever.preflight()  # the meta is known; the weights are not checked before loading
    with pytest.raises(EngineError) as error:
        run_retriever(bench, retriever, MAIN_SETTING, item)
    message = str(error.value)
    assert "\n" not in message and MINILM in message and "HF_HUB_OFFLINE" in message


def test_unknown_zoo_model_fails_preflight():
    with pytest.raises(EngineError, match="mteb knows no model 'nobody/no-such-model'"):
        make_retriever("mteb:nobody/no-such-model").preflight()
