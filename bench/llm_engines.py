"""Side by side: the embedded engine, vLLM offline (the local LLM server) and vLLM's OpenAI server
on the same model (the packaged Gemma 3 270M) and the same judge prompts (`make bench-llm`).

The prompts are what a tournament round sends: ``prompts/judge.md`` in choice mode over CHAMP's
full texts, ``--queries`` queries × ``--pairs`` seeded random pairs × both orders, as one batch.
Per engine: model load time, judge calls/s and tokens/s (prompt + completion), the prefix-cache
hit rate (vLLM's token counters) and the share of identical verdicts (the likelier choice).
``--builds`` also times ``saber build`` of the ``local-llm`` profile on each engine (fresh SABER
homes, model conversion cached) and reads the judge stage's prefix-cache hit rate from the vLLM
build's round shards. Last, a projection (not a measurement) of the paper-scale judge on one
A100 from the measured batch shape and stated throughput assumptions.

Writes ``bench/llm-engines.json`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from saber_compute.llm.embedded import EmbeddedEngine
from saber_compute.llm.interface import LLMRequest, LLMResult
from saber_compute.llm.model_folder import chat_template_text
from saber_config import load_build_config
from saber_core.inputs.corpus import full_text
from saber_llm.embedded import EmbeddedBackend
from saber_llm.engine_server import shutdown_servers
from saber_llm.factory import make_backend
from saber_llm.judges import LLMJudge
from saber_llm.openai_compat import OpenAICompatibleBackend
from saber_llm.vllm_openai_server import server_counters, start_openai_server
from saber_store.sources import champ_corpus

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "llm-engines.json"
# Paper scale (docs/sabermath.md): 1,000 queries, pools of 150, 20 Swiss rounds: 75 pairs per
# query and round, one order.
PAPER_CALLS = 1000 * 75 * 20


def judge_requests(n_queries: int, n_pairs: int, seed: int = 0) -> list[LLMRequest]:
    """A round's judge requests: per query ``n_pairs`` disjoint random pairs, both orders."""
    corpus = champ_corpus()
    texts = [full_text(p, s) for p, s in zip(corpus["problem"], corpus["solution"], strict=True)]
    rng = random.Random(seed)
    triples = []
    for q in rng.sample(range(len(texts)), n_queries):
        pool = rng.sample([i for i in range(len(texts)) if i != q], 2 * n_pairs)
        for a, b in zip(pool[0::2], pool[1::2], strict=True):
            triples += [(texts[q], texts[a], texts[b]), (texts[q], texts[b], texts[a])]
    judge = LLMJudge(backend=EmbeddedBackend(), mode="choice")  # renders the requests only
    return judge._requests(triples, seed=0, temperature=0.0)


def _throughput(results: list[LLMResult], seconds: float) -> dict:
    tokens = sum((r.prompt_tokens or 0) + (r.completion_tokens or 0) for r in results)
    return {
        "calls": len(results),
        "seconds": round(seconds, 2),
        "calls_per_s": round(len(results) / seconds, 2),
        "tokens_per_s": round(tokens / seconds, 1),
        "mean_prompt_tokens": round(sum(r.prompt_tokens or 0 for r in results) / len(results), 1),
        "errors": sum(r.error is not None for r in results),
    }


def verdicts(results: list[LLMResult]) -> list[str | None]:
    """The likelier choice per answer (from the choice log-probs, else the text)."""
    out = []
    for r in results:
        lp = r.choice_logprobs or {}
        out.append(max(lp, key=lp.get) if lp else (r.text.strip() or None))
    return out


def p_first(results: list[LLMResult]) -> list[float | None]:
    """p("1") from the two choices' log-probs."""
    import math

    out = []
    for r in results:
        lp = r.choice_logprobs or {}
        if "1" in lp and "2" in lp:
            out.append(1 / (1 + math.exp(lp["2"] - lp["1"])))
        else:
            out.append(None)
    return out


def debiased(p: list[float | None]) -> list[float | None]:
    """Both orders of a pair (consecutive requests) combined: ``(p(a|a,b) + 1 − p(b|b,a)) / 2``
    — the position bias cancels (the build's ``judge_both_orders``)."""
    out = []
    for forward, reverse in zip(p[0::2], p[1::2], strict=True):
        out.append(None if forward is None or reverse is None else (forward + 1 - reverse) / 2)
    return out


def agreement_table(embedded: list[LLMResult], offline: list[LLMResult], served: list) -> dict:
    """Identical verdicts (as asked, and with both orders combined), the correlation of the
    combined p(candidate 1) between engines, and each engine's share of "1" answers."""
    p_e, p_o, p_s = p_first(embedded), p_first(offline), p_first(served)
    d_e, d_o = debiased(p_e), debiased(p_o)
    side = [(x > 0.5, y > 0.5) for x, y in zip(d_e, d_o, strict=True) if None not in (x, y)]
    pairs = [(x, y) for x, y in zip(d_e, d_o, strict=True) if None not in (x, y)]
    return {
        "embedded_vs_vllm": agreement(verdicts(embedded), verdicts(offline)),
        "offline_vs_server": agreement(verdicts(offline), verdicts(served)),
        "embedded_vs_vllm_both_orders": round(sum(a == b for a, b in side) / len(side), 3),
        "both_orders_p_correlation": round(
            statistics.correlation([x for x, _ in pairs], [y for _, y in pairs]), 3
        ),
        "share_first_embedded": round(sum(v == "1" for v in verdicts(embedded)) / len(p_e), 3),
        "share_first_vllm": round(sum(v == "1" for v in verdicts(offline)) / len(p_o), 3),
        "max_abs_p_offline_vs_server": round(
            max(abs(x - y) for x, y in zip(p_o, p_s, strict=True) if None not in (x, y)), 4
        ),
        "embedded_p_first": p_e,
        "vllm_p_first": p_o,
    }


def agreement(a: list, b: list) -> float:
    """Share of positions where both verdicts exist and are equal."""
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if x is not None and y is not None]
    return round(sum(x == y for x, y in pairs) / len(pairs), 3) if pairs else float("nan")


def run_embedded(requests: list[LLMRequest]) -> tuple[dict, list[LLMResult]]:
    engine = EmbeddedEngine()
    started = time.perf_counter()
    engine.load()
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    results = engine.generate(requests)
    seconds = time.perf_counter() - started
    return {"load_s": round(load_s, 1), **_throughput(results, seconds)}, results


def run_vllm_offline(requests: list[LLMRequest], home: Path) -> tuple[dict, list[LLMResult]]:
    backend = make_backend(
        load_build_config("local-llm", llm_backend="vllm", home=str(home)).plan()
    )
    server = backend.local_server(log=lambda m: print(f"  {m}", file=sys.stderr))
    started = time.perf_counter()
    status = server.wait_loaded(server.ensure_running())
    ready_s = time.perf_counter() - started
    results: list[LLMResult] = []
    for _, part in server.stream(requests):
        results += part
    stats = server.batches[-1]
    shutdown_servers(home)
    row = {
        "load_s": status["load_s"],
        "ready_s": round(ready_s, 1),
        **_throughput(results, stats["generate_s"]),
        "prefix_cache_hit_rate": stats.get("prefix_cache_hit_rate"),
    }
    return row, results


def run_vllm_server(requests: list[LLMRequest], home: Path) -> tuple[dict, list]:
    backend = make_backend(
        load_build_config("local-llm", llm_backend="vllm", home=str(home)).plan()
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    template = home / "chat_template.jinja"  # the same prompts as the local engine's
    template.write_text(chat_template_text(backend.chat_template))
    log = home / "api_server.log"
    server = start_openai_server(backend.python(), backend.model, port, log, chat_template=template)
    try:
        before = server_counters(server.base_url)
        client = OpenAICompatibleBackend(
            base_url=server.base_url, model="gemma3-270m", max_concurrency=16
        )
        started = time.perf_counter()
        results = client.generate(requests)
        seconds = time.perf_counter() - started
        after = server_counters(server.base_url)
    finally:
        server.stop()
    queries = after["prefix_cache_queries"] - before["prefix_cache_queries"]
    hits = after["prefix_cache_hits"] - before["prefix_cache_hits"]
    row = {
        "ready_s": server.ready_s,
        **_throughput(results, seconds),
        "prefix_cache_hit_rate": round(hits / queries, 4) if queries else None,
    }
    return row, results


def time_build(backend: str, home: Path) -> dict:
    """``saber build`` of ``local-llm`` on one engine in a fresh SABER home: wall seconds."""
    env = {**os.environ, "SABER_HOME": str(home), "DAGSTER_HOME": str(home / "dagster_home"),
           "SABER_PROFILE": "local-llm", "SABER_LLM_BACKEND": backend}  # fmt: skip
    (home / "dagster_home").mkdir(parents=True, exist_ok=True)
    (home / "dagster_home" / "dagster.yaml").write_text((ROOT / "dagster.yaml").read_text())
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "saber_cli.main", "build"], env=env, cwd=ROOT,
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    row = {"seconds": round(time.perf_counter() - started, 1), "exit_code": done.returncode}
    if done.returncode:
        row["stderr_tail"] = done.stderr.strip().splitlines()[-3:]
    return row


def judge_stage_prefix_cache(home: Path) -> dict:
    """The judge shards' prefix-cache counters in a vLLM build (tournament rounds, recipe and
    round-robin judging): summed hits over summed lookups."""
    queries = hits = shards = 0
    for stats_file in home.glob("llm-servers/shards/*/stats.json"):
        prompts = pq.read_table(stats_file.parent / "requests.parquet", columns=["prompt_id"])
        if not str(prompts["prompt_id"][0]).startswith("judge"):
            continue
        stats = json.loads(stats_file.read_text())
        queries += stats.get("prefix_cache_queries", 0)
        hits += stats.get("prefix_cache_hits", 0)
        shards += 1
    rate = round(hits / queries, 4) if queries else None
    return {"judge_shards": shards, "prompt_tokens_looked_up": queries, "hit_rate": rate}


def projection(offline: dict, prefill_tps: float, decode_tps: float, reasoning: int) -> dict:
    """Paper-scale judge time on one A100 — a projection from the measured batch shape (mean
    prompt tokens, prefix-cache hit rate) and ASSUMED aggregate throughputs of the judge model
    on that GPU (prefill and decode tokens/s; not measured here)."""
    prompt = offline["mean_prompt_tokens"]
    hit = offline.get("prefix_cache_hit_rate") or 0.0
    prefill_h = PAPER_CALLS * prompt * (1 - hit) / prefill_tps / 3600
    rows = {}
    modes = (("choice (1 token)", 1), (f"reasoning ({reasoning} tokens)", reasoning))
    for mode, completion in modes:
        decode_h = PAPER_CALLS * completion / decode_tps / 3600
        rows[mode] = round(prefill_h + decode_h, 1)
    return {
        "calls": PAPER_CALLS,
        "mean_prompt_tokens": prompt,
        "prefix_cache_hit_rate": hit,
        "assumed_prefill_tokens_per_s": prefill_tps,
        "assumed_decode_tokens_per_s": decode_tps,
        "hours": rows,
    }


def render(results: dict) -> str:
    lines = ["| engine | load s | judge calls/s | tokens/s | prefix-cache hit | errors |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for name in ("embedded", "vllm_offline", "vllm_server"):
        row = results[name]
        load = row.get("load_s", row.get("ready_s"))
        hit = row.get("prefix_cache_hit_rate")
        lines.append(
            f"| {name} | {load} | {row['calls_per_s']} | {row['tokens_per_s']} | "
            f"{'—' if hit is None else f'{hit:.1%}'} | {row['errors']} |"
        )
    agree = results["agreement"]
    lines.append("")
    lines.append(
        f"identical verdicts: embedded vs vLLM offline {agree['embedded_vs_vllm']:.1%} (answers "
        f"'1': {agree['share_first_embedded']:.0%} / {agree['share_first_vllm']:.0%}), both "
        f"orders combined {agree['embedded_vs_vllm_both_orders']:.1%} (p correlation "
        f"{agree['both_orders_p_correlation']}); vLLM offline vs server "
        f"{agree['offline_vs_server']:.1%} (max |Δp| {agree['max_abs_p_offline_vs_server']}), "
        f"{results['calls']} prompts"
    )
    if "builds" in results:
        for engine, row in results["builds"].items():
            lines.append(
                f"local-llm build on {engine}: {row['seconds']} s (exit {row['exit_code']})"
            )
        judge = results["judge_stage_prefix_cache"]
        lines.append(f"judge stage prefix cache (vLLM build): {judge}")
    proj = results["projection"]
    lines.append(
        f"PROJECTION (not measured): paper-scale judge, {proj['calls']:,} calls on one A100: "
        + ", ".join(f"{mode} ≈ {h} h" for mode, h in proj["hours"].items())
        + f" (assumed {proj['assumed_prefill_tokens_per_s']:,.0f} prefill and "
        f"{proj['assumed_decode_tokens_per_s']:,.0f} decode tokens/s)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=8, help="pairs per query (both orders)")
    parser.add_argument("--builds", action="store_true", help="also time local-llm builds")
    parser.add_argument(
        "--prefill-tps",
        type=float,
        default=20_000.0,
        help="ASSUMED prefill tokens/s of the judge model on one A100",
    )
    parser.add_argument(
        "--decode-tps",
        type=float,
        default=2_000.0,
        help="ASSUMED aggregate decode tokens/s on one A100",
    )
    parser.add_argument("--reasoning-tokens", type=int, default=1_000)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)  # fmt: skip
    requests = judge_requests(args.queries, args.pairs)
    results: dict = {"calls": len(requests), "model": "packaged Gemma 3 270M"}
    with tempfile.TemporaryDirectory(prefix="saber-bench-llm-") as tmp:
        tmp_path = Path(tmp)
        print(f"embedded: {len(requests)} judge prompts", file=sys.stderr)
        results["embedded"], embedded = run_embedded(requests)
        print("vLLM offline (local LLM server)", file=sys.stderr)
        results["vllm_offline"], offline = run_vllm_offline(requests, tmp_path / "home")
        print("vLLM OpenAI server", file=sys.stderr)
        results["vllm_server"], served = run_vllm_server(requests, tmp_path / "home")
        results["agreement"] = agreement_table(embedded, offline, served)
        if args.builds:
            results["builds"] = {}
            for engine in ("embedded", "vllm"):
                print(f"local-llm build on {engine}", file=sys.stderr)
                results["builds"][engine] = time_build(engine, tmp_path / f"build-{engine}")
            vllm_home = tmp_path / "build-vllm"
            results["judge_stage_prefix_cache"] = judge_stage_prefix_cache(vllm_home)
    results["projection"] = projection(
        results["vllm_offline"], args.prefill_tps, args.decode_tps, args.reasoning_tokens
    )
    args.out.write_text(json.dumps(results, indent=1))
    print(render(results))


if __name__ == "__main__":
    main()
