"""Real retrievers on a benchmark this project did not build: BM25, MiniLM (+ the embedding
cache), a CrossEncoder, the pointwise LLM scorer (fake backend), and ``saber eval`` itself."""

import json
from collections.abc import Sequence

import numpy as np
import polars as pl
import pytest
from test_eval_data import QUERIES, write_tiny_benchmark

from saber_compute.llm.interface import LLMRequest, LLMResult
from saber_eval.benchmark import SETTINGS
from saber_eval.cli import eval_main
from saber_eval.engines.llm import parse_pointwise
from saber_eval.loading import load_benchmark
from saber_eval.registry import load_registry
from saber_eval.retrievers import make_retriever
from saber_eval.runfile import read_run
from saber_eval.runner import build_tasks, run_retriever, write_outputs
from saber_llm.base import LLMBackend
from saber_llm.embeddings.cache import EmbeddingCache
from saber_llm.embeddings.embedder import default_embedder_path
from saber_store.database import DuckDBStore


@pytest.fixture
def tiny(tmp_path):
    return load_benchmark(write_tiny_benchmark(tmp_path / "tinybench"))


def run(bench, spec, setting="statement-full", **kwargs):
    return run_retriever(bench, make_retriever(spec, **kwargs), setting, load_registry().get(spec))


def test_bm25_ranks_lexically_related_documents_first(tiny, tmp_path):
    bm25, rand = run(tiny, "bm25"), run(tiny, "random")
    assert bm25.mean > 0.8 and bm25.mean > rand.mean + 0.2
    # the top document of the first query shares "quadratic … real roots" with it
    top = tiny.queries[0].candidates[int(np.argmax(bm25.scores[0]))]
    assert top in ("alg-quad-1", "alg-quad-2")
    files = write_outputs(bm25, tmp_path / "out")
    parsed = read_run(files["run_file"])
    assert set(parsed) == set(QUERIES) and len(parsed["q-nt-2"]) == 10
    assert bm25.latency_s.shape == (len(QUERIES),) and np.all(bm25.latency_s > 0)


def test_bm25_is_fitted_per_query():
    # idf depends on the candidate set: the same document scores differently in another pool
    from saber_eval.engines.base import Task
    from saber_eval.engines.lexical import BM25Retriever

    docs = ("prime numbers modulo", "triangle area", "circle area")
    retriever = BM25Retriever()
    alone, _ = retriever.score(Task("q", "prime area", docs))
    more, _ = retriever.score(Task("q", "prime area", (*docs, "prime factor", "prime sieve")))
    assert alone[0] != pytest.approx(more[0])
    none, _ = retriever.score(Task("q", "the of and", docs))  # only stop words
    assert none.tolist() == [0.0, 0.0, 0.0]


def test_minilm_beats_random_on_the_tiny_benchmark(tiny, tmp_path):
    cache = EmbeddingCache(tmp_path / "cache.duckdb")
    st = run(tiny, "st:minilm", cache=cache)
    assert st.mean > 0.8 and st.mean > run(tiny, "random").mean + 0.2
    assert set(st.per_domain) == {"Algebra", "Geometry", "Number Theory"}
    assert st.notes["model"].startswith("sentence-transformers/all-MiniLM-L6-v2@")


def test_embedding_cache_reuse_counter(tiny, tmp_path):
    """Re-running or adding a setting encodes only texts never embedded before."""
    path = tmp_path / "cache.duckdb"
    registry = load_registry()
    queries = {q.problem for q in tiny.queries}
    full_queries = {f"Problem: {q.problem}\n\nSolution: {q.solution}" for q in tiny.queries}
    docs = set(tiny.corpus)

    cache = EmbeddingCache(path)
    retriever = make_retriever("st:minilm", cache=cache)
    run_retriever(tiny, retriever, "statement-full", registry.get("st:minilm"))
    assert cache.encoded == len(queries) + len(docs)  # 6 statements + 12 full documents
    assert cache.stored_count() == cache.encoded

    fresh = EmbeddingCache(path)  # a new process: everything comes from the DuckDB file
    retriever = make_retriever("st:minilm", cache=fresh)
    run_retriever(tiny, retriever, "statement-full", registry.get("st:minilm"))
    assert fresh.encoded == 0 and fresh.hits > 0
    run_retriever(tiny, retriever, "statement-statement", registry.get("st:minilm"))
    assert fresh.encoded == len(docs)  # only the document statements are new
    run_retriever(tiny, retriever, "full-full", registry.get("st:minilm"))
    assert fresh.encoded == len(docs) + len(full_queries)  # then only the full queries
    for setting in SETTINGS:
        run_retriever(tiny, retriever, setting, registry.get("st:minilm"))
    assert fresh.encoded == len(docs) + len(full_queries)
    assert fresh.stored_count() == 2 * len(queries) + 2 * len(docs)


def test_cache_is_keyed_by_the_enveloped_text(tiny, tmp_path):
    calls: list[str] = []

    def encoder(texts: list[str]) -> np.ndarray:
        calls.extend(texts)
        return np.array([[len(t), 1.0 + t.count("a")] for t in texts], dtype=np.float32)

    registry = load_registry()
    cache = EmbeddingCache(tmp_path / "c.duckdb")
    plain = make_retriever("st:minilm", cache=cache, encoder=encoder)
    run_retriever(tiny, plain, "statement-statement", registry.get("st:minilm"))
    n_plain = len(calls)
    assert n_plain == len(set(calls)) == len(tiny.queries) + len(tiny.corpus)
    # the same model with an e5-style envelope sends different texts: all encoded again
    run_retriever(tiny, plain, "statement-statement", registry.get("st:intfloat/e5-base-v2"))
    assert len(calls) == 2 * n_plain
    assert all(t.startswith(("query: ", "passage: ")) for t in calls[n_plain:])


def test_cache_charges_hits_with_their_recorded_cost(tmp_path):
    cache = EmbeddingCache(tmp_path / "c.duckdb")

    def encoder(texts):
        return np.ones((len(texts), 3), dtype=np.float32)

    _, charged = cache.embed("m", ["a", "b"], encoder)
    assert charged == 0.0 and cache.encoded == 2
    costs = {k: c for (m, k), (_, c) in cache._memory.items()}
    _, charged = cache.embed("m", ["a", "b", "a", "c"], encoder)
    assert charged == pytest.approx(sum(costs.values()))  # a and b once each
    assert cache.encoded == 3


def test_cross_encoder_from_the_packaged_minilm_folder(tiny, tmp_path):
    """A CrossEncoder loads offline from the MiniLM folder (its head is untrained: random
    scores, but the real ce: code path)."""
    spec = f"ce:{default_embedder_path()}"
    result = run(tiny, spec, setting="full-full")
    assert result.entry.kind == "reranker"
    assert all(
        s.shape == (len(q.candidates),) for s, q in zip(result.scores, tiny.queries, strict=True)
    )
    assert np.all(np.isfinite(np.concatenate(result.scores)))
    assert 0.0 <= result.mean <= 1.0
    files = write_outputs(result, tmp_path / "out")
    assert len(read_run(files["run_file"])) == len(QUERIES)


LLM_CALLS: list[str] = []


def _candidate(prompt: str) -> str:
    return prompt.split("Candidate:")[1].split("How useful")[0]


def _overlap(prompt: str) -> int:
    query = set(prompt.split("Query problem:")[1].split("Candidate:")[0].lower().split())
    return min(10, len(query & set(_candidate(prompt).lower().split())))


class OverlapBackend(LLMBackend):
    """Answers ``\\boxed{n}`` with n = shared words of query and candidate (max 10); garbage
    for candidates mentioning "circle"; records its calls in ``LLM_CALLS``."""

    def identity(self) -> dict[str, str]:
        return {"backend": "overlap", "model": "test"}

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResult]:
        out = []
        for r in requests:
            text = r.messages[-1].content
            LLM_CALLS.append(text)
            if "circle" in _candidate(text):
                out.append(LLMResult(text="I think it is quite useful."))
            else:
                out.append(LLMResult(text=f"\\boxed{{{_overlap(text)}}}"))
        return out


def test_llm_pointwise_scores_through_the_call_cache(tiny, tmp_path):
    store = DuckDBStore(database=str(tmp_path / "llm.duckdb"))
    backend = OverlapBackend()
    LLM_CALLS.clear()
    first = run(tiny, "llm:fake", llm_store=store, backend=backend)
    n_pairs = sum(len(q.candidates) for q in tiny.queries)
    assert len(LLM_CALLS) == n_pairs
    assert first.notes["llm_calls"] == n_pairs and first.notes["llm_hits"] == 0
    circles = sum("circle" in tiny.corpus[c][0] for q in tiny.queries for c in q.candidates)
    assert first.notes["drops"] == circles > 0
    assert first.notes["prompt"] == "pointwise@v1"
    flat = np.concatenate(first.scores)
    expected = [-1.0 if "circle" in _candidate(t) else float(_overlap(t)) for t in LLM_CALLS]
    np.testing.assert_array_equal(flat, expected)  # each answer parsed to the score it gave
    assert first.mean > 0.5
    again = run(tiny, "llm:fake", llm_store=store, backend=backend)
    assert len(LLM_CALLS) == n_pairs  # every answer came from the DuckDB call cache
    assert again.notes["llm_hits"] == n_pairs  # unparsable answers are cached too (no error)
    assert again.notes["drops"] == circles
    assert [s.tolist() for s in again.scores] == [s.tolist() for s in first.scores]


def test_parse_pointwise_is_strict():
    assert parse_pointwise("\\boxed{7}") == 7
    assert parse_pointwise("Reasoning… so \\boxed{ 10 }") == 10
    assert parse_pointwise("3") == 3
    for bad in ("", None, "\\boxed{11}", "\\boxed{3} or \\boxed{4}", "\\boxed{3.5}", "seven", "-1"):
        assert parse_pointwise(bad) is None


def test_tasks_carry_setting_texts(tiny):
    tasks = build_tasks(tiny, "full-full", load_registry().get("bm25"))
    assert tasks[0].query.startswith("Problem: ") and "\n\nSolution: " in tasks[0].query
    assert all(d.startswith("Problem: ") for d in tasks[0].documents)


def test_saber_eval_cli_end_to_end(tmp_path, monkeypatch, capsys):
    bench = write_tiny_benchmark(tmp_path / "elsewhere" / "mybench")
    monkeypatch.setenv("SABER_HOME", str(tmp_path / "home"))
    args = "--retriever bm25 --retriever random --setting all".split()
    code = eval_main(["--benchmark", str(bench), *args, "--mlflow", str(tmp_path / "mlruns")])
    assert code == 0
    folder = next((tmp_path / "home" / "eval").glob("mybench-*"))
    for spec in ("bm25", "random"):
        for setting in SETTINGS:
            assert (folder / "runs" / spec / f"{setting}.trec").exists()
            summary = json.loads((folder / "runs" / spec / f"{setting}.json").read_text())
            assert summary["n_queries"] == len(QUERIES) and summary["setting"] == setting
    board = pl.read_csv(folder / "leaderboard.csv")
    assert board.height == 6
    assert (folder / "quality_latency.png").exists() and (folder / "per_domain.png").exists()
    out = capsys.readouterr().out
    assert "bm25 · statement-full: nDCG@10" in out and "leaderboard:" in out

    from mlflow import MlflowClient

    from saber_eval.tracking import tracking_uri

    client = MlflowClient(tracking_uri(tmp_path / "mlruns"))
    experiment = client.get_experiment_by_name("saber-eval")
    runs = client.search_runs([experiment.experiment_id])
    assert {(r.data.params["retriever"], r.data.params["setting"]) for r in runs} == {
        (s, st) for s in ("bm25", "random") for st in SETTINGS
    }

    args = "--compare bm25 random --no-mlflow --permutations 2000".split()
    code = eval_main(["--benchmark", str(bench), *args])
    assert code == 0
    out = capsys.readouterr().out
    assert "statement-full: bm25" in out and "randomization p =" in out
    saved = json.loads(
        (folder / "comparisons" / "bm25__vs__random.statement-full.json").read_text()
    )
    assert saved["n_queries"] == len(QUERIES) and saved["difference"] > 0
    assert saved["p_value"] < 0.1

    # --compare evaluates a retriever that has no stored run yet
    code = eval_main(["--benchmark", str(bench), "--compare", "jaccard", "bm25", "--no-mlflow"])
    assert code == 0 and (folder / "runs" / "jaccard" / "statement-full.trec").exists()
    assert pl.read_csv(folder / "leaderboard.csv").height == 7


REQUESTS: list[LLMRequest] = []


class ChoiceBackend(LLMBackend):
    """Records requests; answers the constrained choice "7"."""

    def identity(self) -> dict[str, str]:
        return {"backend": "choice", "model": "test"}

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResult]:
        REQUESTS.extend(requests)
        return [LLMResult(text="\\boxed{7}", choice_logprobs={"7": -0.1}) for _ in requests]


def test_llm_profile_options_choose_constrained_choice(tiny, tmp_path):
    from saber_eval.engines.llm import SCORE_CHOICES

    REQUESTS.clear()
    store = DuckDBStore(database=str(tmp_path / "llm.duckdb"))
    retriever = make_retriever(
        "llm:small",
        llm_store=store,
        backend_factory=lambda name, kind="": (ChoiceBackend(), {"choice": True, "max_tokens": 99}),
    )
    result = run_retriever(tiny, retriever, "statement-full", load_registry().get("llm:small"))
    assert result.notes["mode"] == "choice" and result.entry.kind == "reranker"
    assert {r.choices for r in REQUESTS} == {SCORE_CHOICES} and {
        r.max_tokens for r in REQUESTS
    } == {1}
    assert SCORE_CHOICES == tuple(str(i) for i in range(11))
    assert all(np.all(s == 7.0) for s in result.scores)
