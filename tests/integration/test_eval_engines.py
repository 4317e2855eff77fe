"""Retriever engines in this process with real models (no vLLM): a sequence-classification
reranker against logits computed by hand from its weights, bad registry entries (one line, exit
code, nothing written), and ``device: auto``.

``write_seqcls_model`` and ``hand_logits`` are shared with ``test_eval_vllm_engines``.
"""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest
from test_eval_data import write_tiny_benchmark

from saber_cli.main import main as saber_main
from saber_eval.benchmark import SETTINGS
from saber_eval.cli import run_evaluation
from saber_eval.engines import base
from saber_eval.engines.base import EngineError, resolve_device
from saber_eval.loading import load_benchmark
from saber_eval.registry import load_registry
from saber_eval.retrievers import retriever_factory
from saber_llm.embeddings.embedder import default_embedder_path

HEAD_SEED = 0


def write_seqcls_model(folder: Path) -> Path:
    """A one-label ``BertForSequenceClassification`` from the packaged MiniLM whose head
    (pooler from the checkpoint, classifier random) is seeded, saved with its tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    torch.manual_seed(HEAD_SEED)
    model = BertForSequenceClassification.from_pretrained(default_embedder_path(), num_labels=1)
    with torch.no_grad():  # a head whose logits spread over a few units
        model.classifier.weight.normal_(0.0, 0.5)
        model.classifier.bias.fill_(0.25)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(default_embedder_path()).save_pretrained(folder)
    return folder


def hand_logits(folder: Path, query: str, documents: list[str]) -> np.ndarray:
    """logit = W · tanh(P · h_CLS + p) + b from the saved weights: the encoder's [CLS] state
    from ``BertModel``, the pooler and classifier applied here with numpy."""
    import torch
    from safetensors.numpy import load_file
    from transformers import AutoTokenizer, BertModel

    weights = load_file(str(folder / "model.safetensors"))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    encoder = BertModel.from_pretrained(folder, add_pooling_layer=False).eval()
    out = []
    for document in documents:
        encoded = tokenizer(query, document, truncation=True, return_tensors="pt")
        with torch.inference_mode():
            cls = encoder(**encoded).last_hidden_state[0, 0].double().numpy()
        pooled = np.tanh(
            weights["bert.pooler.dense.weight"].astype(np.float64) @ cls
            + weights["bert.pooler.dense.bias"]
        )
        w, b = weights["classifier.weight"].astype(np.float64), weights["classifier.bias"]
        out.append(float((w @ pooled + b)[0]))
    return np.asarray(out)


@pytest.fixture(scope="module")
def seqcls_folder(tmp_path_factory) -> Path:
    return write_seqcls_model(tmp_path_factory.mktemp("seqcls") / "model")


@pytest.fixture
def bench(tmp_path):
    return load_benchmark(write_tiny_benchmark(tmp_path / "tinybench"))


def evaluate(bench, tmp_path: Path, specs: list[str], registry_yaml: str = "", settings=SETTINGS):
    """``run_evaluation`` into ``tmp_path/out`` with a registry file (when given)."""
    path = tmp_path / "retrievers.yaml"
    path.write_text(registry_yaml or "retrievers: {}\n")
    registry = load_registry(path)
    make = retriever_factory(tmp_path / "cache.duckdb", registry=registry)
    return run_evaluation(
        bench, specs, list(settings), tmp_path / "out", registry=registry, make=make,
        log=lambda _: None,
    )  # fmt: skip


# --- seq-cls: raw logits, end to end ------------------------------------------------------


def test_seqcls_scores_are_the_raw_logits_computed_by_hand(bench, tmp_path, seqcls_folder):
    spec = f"seqcls:{seqcls_folder}"
    results, board = evaluate(bench, tmp_path, [spec], settings=["statement-full"])
    (result,) = results
    queries, docs = bench.texts("statement-full")
    for i in (0, 3):  # two queries, every candidate
        want = hand_logits(seqcls_folder, queries[i], list(docs[i]))
        np.testing.assert_allclose(result.scores[i], want, atol=1e-5, rtol=0)
    assert np.ptp(result.scores[0]) > 0.1  # the head separates candidates: not a constant
    assert result.scores[0].min() < 0 or result.scores[0].max() > 1  # raw, not σ(logit)
    assert board.files["markdown"].exists()
    run = tmp_path / "out" / bench.label / "runs"
    assert len(list(run.glob("*/statement-full.trec"))) == 1


# --- bad input: one line naming the fix, exit code, nothing written -------------------------


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed once the probe is


BAD_ENTRIES = {
    "unknown engine": (
        "retrievers:\n  mine:\n    engine: fancy-embed\n    model: x\n",
        "mine",
        "unknown engine 'fancy-embed'; known engines:",
    ),
    "missing model folder": ("", "st:/nonexistent", "model folder /nonexistent does not exist"),
    "cuda without cuda": (
        "retrievers:\n  st:minilm:\n    options: {device: cuda}\n",
        "st:minilm",
        "torch sees no CUDA device on this machine: use device: auto",
    ),
    "unreachable server": (
        "retrievers:\n  remote:\n    engine: openai-embed\n    model: m\n"
        "    options: {base_url: 'http://127.0.0.1:PORT/v1'}\n",
        "remote",
        "is unreachable",
    ),
    "unknown option": (
        "retrievers:\n  st:minilm:\n    options: {devise: cpu}\n",
        "st:minilm",
        "unknown option(s) ['devise']; known: ['device', 'dtype'",
    ),
}


@pytest.mark.parametrize("case", list(BAD_ENTRIES))
def test_bad_entry_is_one_line_and_writes_nothing(case, tmp_path, monkeypatch):
    registry, spec, message = BAD_ENTRIES[case]
    bench_dir = write_tiny_benchmark(tmp_path / "tinybench")
    (tmp_path / "retrievers.yaml").write_text(
        registry.replace("PORT", str(closed_port())) or "retrievers: {}\n"
    )
    monkeypatch.setattr(base, "cuda_available", lambda: False)  # also on a machine with CUDA
    out = tmp_path / "out"
    argv = ["eval", "--benchmark", str(bench_dir), "--retriever", "bm25", "--retriever", spec,
            "--registry", str(tmp_path / "retrievers.yaml"), "--out", str(out), "--cache",
            str(tmp_path / "cache.duckdb"), "--no-mlflow", "--setting", "all"]  # fmt: skip
    with pytest.raises(SystemExit) as exited:  # Python prints the message and exits with 1
        saber_main(argv)
    err = exited.value.code
    assert isinstance(err, str) and len(err.splitlines()) == 1, err
    assert err.startswith("saber eval: ") and message in err, err
    label = load_benchmark(bench_dir).label
    assert not (out / label / "runs").exists()  # bm25 runs first in order: it was not run either
    assert not list(out.rglob("leaderboard*")) and not list(out.rglob("*.trec"))


def test_engine_error_from_eval_main_is_not_swallowed(tmp_path):
    bench_dir = write_tiny_benchmark(tmp_path / "tinybench")
    with pytest.raises(EngineError, match="does not exist"):  # the library raises; the CLI prints
        from saber_eval.cli import eval_main

        eval_main(["--benchmark", str(bench_dir), "--retriever", "st:/nonexistent",
                   "--out", str(tmp_path / "out"), "--no-mlflow"])  # fmt: skip


# --- device: auto -----------------------------------------------------------------------------


@pytest.mark.parametrize(("available", "want"), [(True, "cuda"), (False, "cpu")])
def test_auto_device_picks_cuda_where_there_is_one(available, want, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    assert resolve_device("auto", "st:minilm") == want
    assert resolve_device("cpu", "st:minilm") == "cpu"
    if available:
        assert resolve_device("cuda", "st:minilm") == "cuda"
    else:
        with pytest.raises(EngineError, match="no CUDA device"):
            resolve_device("cuda", "st:minilm")


def test_unknown_device_names_the_choices():
    with pytest.raises(EngineError, match=r"device must be one of \('auto', 'cpu', 'cuda'\)"):
        resolve_device("tpu", "st:minilm")


def test_a_bad_second_retriever_stops_the_first_before_it_runs(tmp_path):
    bench = load_benchmark(write_tiny_benchmark(tmp_path / "tinybench"))
    registry = "retrievers:\n  st:minilm:\n    options: {device: tpu}\n"
    with pytest.raises(EngineError, match="device must be one of"):
        evaluate(bench, tmp_path, ["bm25", "st:minilm"], registry)
    assert not (tmp_path / "out").exists()
