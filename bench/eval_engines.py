"""Side by side: one bi-encoder (the packaged MiniLM) through sentence-transformers, vLLM offline
(the pooling worker) and vLLM's OpenAI server on a benchmark export (`make bench-eval`).

Per engine and setting, every reranking task of the export is scored once, from a fresh
in-memory embedding cache, in batches of ``--batch-size`` texts: load time (model load; for the
server, start until ``/health``), texts/s and tokens/s (texts the engine encoded and their
tokens, cut to the model's 256, over the scoring seconds), the median latency per task, nDCG@10
(equal across engines: the acceptance line of the engines' tests) and tokens/s as a share of the
limit = this machine's float32 matmul FLOP/s (timed with numpy) / (2 × the model's non-embedding
parameters). Last, a projection (not a measurement) of paper-scale embedding and reranking on
one A100 from the measured tokens per text and stated assumptions.

Writes ``bench/eval-engines.json`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from saber_eval.benchmark import SETTINGS
from saber_eval.loading import load_benchmark
from saber_eval.registry import RetrieverEntry
from saber_eval.retrievers import make_retriever
from saber_eval.runner import build_tasks, run_retriever
from saber_llm.embeddings.cache import EmbeddingCache
from saber_llm.embeddings.embedder import default_embedder_path
from saber_llm.vllm_backend import default_env_path
from saber_llm.vllm_openai_server import start_openai_server
from saber_store.paths import SaberPaths

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "eval-engines.json"
MAX_TOKENS = 256  # the MiniLM's max_seq_length (sentence_bert_config.json)
SERVED = "minilm-served"
# Paper scale (docs/sabermath.md): 1,000 queries × pools of 150 = 150,000 query–candidate pairs
PAPER_QUERIES, PAPER_POOL = 1000, 150
A100_BF16_FLOPS = 312e12  # dense bf16 tensor-core peak
ASSUMED_UTILISATION = 0.4  # of that peak, sustained by a batched pooling/prefill pass
PROJECTED = {"embedder 8B": 8e9, "reranker 32B": 32e9}


def matmul_flops(n: int = 2048, repeats: int = 5) -> float:
    """This machine's float32 matmul FLOP/s: the best of ``repeats`` n×n products (2n³ each)."""
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), dtype=np.float32), rng.random((n, n), dtype=np.float32)
    a @ b  # warm-up
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2.0 * n**3 / best


def _timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def non_embedding_parameters(folder: str) -> int:
    """Parameters of the checkpoint outside its embedding tables."""
    from safetensors import safe_open

    total = 0
    with safe_open(str(Path(folder) / "model.safetensors"), "np") as weights:
        for name in weights.keys():
            if "embeddings." not in name:
                total += int(np.prod(weights.get_slice(name).get_shape()))
    return total


def token_counts(texts: list[str], cut: bool = True) -> list[int]:
    """Tokens per text with the MiniLM's tokenizer (special tokens included; ``cut``: at 256, as
    the model reads them)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(default_embedder_path())
    encoded = tokenizer(texts, truncation=cut, max_length=MAX_TOKENS if cut else None)
    return [len(ids) for ids in encoded["input_ids"]]


def candidate_texts(benchmark: Any, side: str) -> list[str]:
    """Every distinct candidate text of one side (``statement`` or ``full``)."""
    _, docs = benchmark.texts(f"{side}-{side}")
    return list(dict.fromkeys(d for pool in docs for d in pool))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def entry_of(engine: str, base_url: str, batch_size: int) -> RetrieverEntry:
    """The registry entry of one engine on the MiniLM."""
    spec = {"sentence-transformers": "st:minilm", "vllm-embed": "vllm:minilm"}.get(
        engine, "openai:minilm"
    )
    options: dict[str, Any] = {}
    model = ""
    if engine == "sentence-transformers":
        options = {"device": "cpu"}
    if engine == "openai-embed":
        model, options = SERVED, {"base_url": base_url, "truncate_prompt_tokens": -1}
    return RetrieverEntry(spec=spec, display_name=spec, kind="single-pass", engine=engine,
                          model=model, options=options, batch_size=batch_size)  # fmt: skip


def bench_engine(
    benchmark: Any,
    engine: str,
    settings: list[str],
    batch_size: int,
    base_url: str = "",
    load_s: float | None = None,
) -> list[dict[str, Any]]:
    """Every setting's tasks through one engine (one model load), from a fresh cache."""
    entry = entry_of(engine, base_url, batch_size)
    cache = EmbeddingCache(None)
    retriever = make_retriever(entry.spec, entry=entry, cache=cache)
    retriever.preflight()
    rows = []
    try:
        for setting in settings:
            tasks = build_tasks(benchmark, setting, entry)
            texts = list(dict.fromkeys(t for task in tasks for t in (task.query, *task.documents)))
            if load_s is None:  # the model loads in the first prepare (untimed by the runner)
                load_s = _timed(lambda tasks=tasks: retriever.prepare(tasks))
            before = cache.encoded
            start = time.perf_counter()
            result = run_retriever(benchmark, retriever, setting, entry)
            seconds = time.perf_counter() - start
            encoded = cache.encoded - before
            tokens = sum(token_counts(texts)) if encoded == len(texts) else None
            rows.append({
                "engine": engine, "setting": setting, "ndcg@10": round(result.mean, 6),
                "tasks": len(tasks), "texts": encoded, "tokens": tokens,
                "seconds": round(seconds, 3), "texts_per_s": round(encoded / seconds, 1),
                "tokens_per_s": round(tokens / seconds, 1) if tokens else None,
                "median_task_latency_s": round(float(np.median(result.latency_s)), 4),
                "load_s": round(load_s, 1), "batch_size": batch_size,
            })  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
            cache = retriever.cache = EmbeddingCache(None)  # the next setting starts cold too
    finally:
        retriever.close()
    return rows


def projection(tokens_per_text: dict[str, float]) -> dict[str, Any]:
    """Paper-scale seconds on one A100 (FLOPs = 2 × parameters × tokens): the embedder encodes
    each of the 150,000 candidates and 1,000 queries once per setting; the reranker reads each
    pair (query + candidate tokens). Not a measurement."""
    out: dict[str, Any] = {"assumptions": {
        "a100_bf16_peak_flops": A100_BF16_FLOPS, "utilisation": ASSUMED_UTILISATION,
        "pairs_per_setting": PAPER_QUERIES * PAPER_POOL,
        "tokens_per_text_measured": tokens_per_text,
    }}  # fmt: skip
    rate = A100_BF16_FLOPS * ASSUMED_UTILISATION
    for name, params in PROJECTED.items():
        per_setting = {}
        for setting, (q_side, d_side) in SETTINGS.items():
            q, d = tokens_per_text[q_side], tokens_per_text[d_side]
            pairs = PAPER_QUERIES * PAPER_POOL
            tokens = PAPER_QUERIES * q + pairs * d if "embedder" in name else pairs * (q + d)
            per_setting[setting] = round(2 * params * tokens / rate, 1)
        out[name] = {"seconds_per_setting": per_setting,
                     "seconds_total": round(sum(per_setting.values()), 1)}  # fmt: skip
    return out


def markdown(rows: list[dict[str, Any]]) -> str:
    """The results table."""
    lines = ["| engine | setting | nDCG@10 | texts | texts/s | tokens/s | share of limit | "
             "median task latency | load |", "|" + "---|" * 9]  # fmt: skip
    for r in rows:
        share = f"{100 * r['limit_share']:.1f} %" if r.get("limit_share") else "–"
        lines.append(
            f"| {r['engine']} | {r['setting']} | {r['ndcg@10']:.4f} | {r['texts']:,} | "
            f"{r['texts_per_s']:.0f} | {r['tokens_per_s'] or 0:,.0f} | {share} | "
            f"{1000 * r['median_task_latency_s']:.0f} ms | {r['load_s']:.1f} s |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the engines on the export, write the JSON, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", type=Path, help="export folder (default $SABER_HOME/export)")
    parser.add_argument("--engines", default="sentence-transformers,vllm-embed,openai-embed")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    folder = args.benchmark or SaberPaths.for_profile().export_dir
    if not (folder / "queries.jsonl").exists():
        sys.exit(f"bench-eval: no export at {folder}: run `make run` or give --benchmark DIR")
    benchmark = load_benchmark(folder)
    settings = args.settings.split(",")
    flops = matmul_flops()
    params = non_embedding_parameters(default_embedder_path())
    limit = flops / (2 * params)
    rows: list[dict[str, Any]] = []
    load_before = os.getloadavg()[0]
    for engine in args.engines.split(","):
        if engine != "openai-embed":
            rows += bench_engine(benchmark, engine, settings, args.batch_size)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            server = start_openai_server(
                default_env_path() / "bin" / "python", default_embedder_path(), free_port(),
                Path(tmp) / "server.log", name=SERVED, max_model_len=MAX_TOKENS, kv_cache_gib=1,
                extra_args=["--runner", "pooling", "--dtype", "float32",
                            "--gpu-memory-utilization", "0.3"],
            )  # fmt: skip
            try:
                rows += bench_engine(benchmark, engine, settings, args.batch_size,
                                     server.base_url, load_s=server.ready_s)  # fmt: skip
            finally:
                server.stop()
    for row in rows:
        row["limit_share"] = round(row["tokens_per_s"] / limit, 4) if row["tokens_per_s"] else None
    tokens_per_text = {  # uncut: a long-context model reads the whole text
        side: float(statistics.mean(token_counts(candidate_texts(benchmark, side), cut=False)))
        for side in ("statement", "full")
    }
    report = {
        "benchmark": str(folder), "benchmark_hash": benchmark.hash,
        "queries": len(benchmark.queries), "cpus": os.cpu_count(),
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "matmul_float32_flops": round(flops), "non_embedding_parameters": params,
        "limit_tokens_per_s": round(limit), "rows": rows, "projection": projection(tokens_per_text),
    }  # fmt: skip
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(markdown(rows))
    print(json.dumps(report["projection"], indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
