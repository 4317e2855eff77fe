"""The shard payload: answer one shard of LLM requests on a compute node (no Dagster).

dagster-slurm uploads this file and runs it in the payload environment (``P/env/bin/python``)
inside an ``sbatch`` job. It reads ``requests.parquet`` from the shard folder named in the Pipes
extras, builds the engine from its spec (``module:Class`` plus a JSON config,
:func:`saber_compute.llm.interface.build_engine`), answers every
request in progress batches, writes ``results.parquet`` and ``stats.json`` atomically (a shard
with results is done and is never run again) and reports progress, throughput and provenance
(SLURM job id, node, GPU) through dagster-pipes. The dispatcher (``saber_slurm``) uses
the (de)serializers below, so a round trip is the same code on both sides.

The LLM server of the allocation mode (``saber_compute/llm_server.py``) answers shards with
:func:`answer_shard` and an already loaded backend.

Failure injection for tests: ``SABER_PAYLOAD_FAIL=always`` fails every attempt;
``SABER_PAYLOAD_FAIL=once`` fails the first attempt of a shard (marker file ``.failed_once``);
``SABER_PAYLOAD_FAIL=hang`` sleeps until SLURM's time limit ends the job (TIMEOUT);
``SABER_PAYLOAD_DELAY_S=<s>`` adds that many seconds of simulated compute to every shard.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from saber_compute.llm.interface import ChatMessage, LLMEngine, LLMRequest, LLMResult, build_engine

REQUESTS = "requests.parquet"
RESULTS = "results.parquet"
STATS = "stats.json"
FAIL_ENV = "SABER_PAYLOAD_FAIL"
DELAY_ENV = "SABER_PAYLOAD_DELAY_S"
PROTOCOL_FILES = ("llm_shard.py", "llm_server.py")

REQUEST_SCHEMA = pa.schema(
    [
        ("index", pa.int64()),
        ("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("prompt_id", pa.string()),
        ("prompt_hash", pa.string()),
        ("input_hash", pa.string()),
        ("max_tokens", pa.int64()),
        ("temperature", pa.float64()),
        ("top_p", pa.float64()),
        ("seed", pa.int64()),
        ("choices", pa.list_(pa.string())),
        ("logprobs", pa.bool_()),
    ]
)
RESULT_SCHEMA = pa.schema(
    [
        ("index", pa.int64()),
        ("text", pa.string()),
        ("response_id", pa.string()),
        ("choice_logprobs", pa.string()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("error", pa.string()),
        ("extra", pa.string()),
    ]
)


def requests_to_table(requests: Sequence[LLMRequest]) -> pa.Table:
    """Requests as an Arrow table (messages, sampling parameters and choices included)."""
    rows = [
        {
            "index": i,
            "messages": [{"role": m.role, "content": m.content} for m in r.messages],
            "prompt_id": r.prompt_id,
            "prompt_hash": r.prompt_hash,
            "input_hash": r.input_hash,
            "max_tokens": r.max_tokens,
            "temperature": r.temperature,
            "top_p": r.top_p,
            "seed": r.seed,
            "choices": list(r.choices) if r.choices is not None else None,
            "logprobs": r.logprobs,
        }
        for i, r in enumerate(requests)
    ]
    return pa.Table.from_pylist(rows, schema=REQUEST_SCHEMA)


def table_to_requests(table: pa.Table) -> list[LLMRequest]:
    """The requests of a table written by ``requests_to_table``, in ``index`` order."""
    rows = sorted(table.to_pylist(), key=lambda row: row["index"])
    return [
        LLMRequest(
            messages=tuple(ChatMessage(m["role"], m["content"]) for m in row["messages"]),
            prompt_id=row["prompt_id"],
            prompt_hash=row["prompt_hash"],
            input_hash=row["input_hash"],
            max_tokens=row["max_tokens"],
            temperature=row["temperature"],
            top_p=row["top_p"],
            seed=row["seed"],
            choices=tuple(row["choices"]) if row["choices"] is not None else None,
            logprobs=row["logprobs"],
        )
        for row in rows
    ]


def results_to_table(results: Sequence[LLMResult]) -> pa.Table:
    """Results as an Arrow table (log-probs and extras as JSON; floats round-trip exactly)."""
    rows = [
        {
            "index": i,
            "text": r.text,
            "response_id": r.response_id,
            "choice_logprobs": json.dumps(r.choice_logprobs)
            if r.choice_logprobs is not None
            else None,
            "prompt_tokens": r.prompt_tokens,
            "completion_tokens": r.completion_tokens,
            "error": r.error,
            "extra": json.dumps(r.extra, sort_keys=True, default=str),
        }
        for i, r in enumerate(results)
    ]
    return pa.Table.from_pylist(rows, schema=RESULT_SCHEMA)


def table_to_results(table: pa.Table) -> list[LLMResult]:
    """The results of a table written by ``results_to_table``, in ``index`` order."""
    rows = sorted(table.to_pylist(), key=lambda row: row["index"])
    return [
        LLMResult(
            text=row["text"],
            response_id=row["response_id"] or "",
            choice_logprobs=json.loads(row["choice_logprobs"]) if row["choice_logprobs"] else None,
            prompt_tokens=row["prompt_tokens"],
            completion_tokens=row["completion_tokens"],
            error=row["error"],
            extra=json.loads(row["extra"]) if row["extra"] else {},
        )
        for row in rows
    ]


def _run(cmd: list[str]) -> str:
    if not shutil.which(cmd[0]):
        return ""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def node_provenance() -> dict[str, str]:
    """Where this runs: SLURM job id, node, visible GPUs, their model (nvidia-smi) and GRES."""
    job = os.environ.get("SLURM_JOB_ID", "")
    names = _run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]).splitlines()
    gres = _run(["scontrol", "show", "job", "-d", job]) if job else ""
    match = re.search(r"GRES=gpu:([^:(\s]+):", gres)
    gpu = ",".join(sorted({n.strip() for n in names if n.strip()}))
    return {
        "slurm_job_id": job,
        "slurm_node": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
        "slurm_partition": os.environ.get("SLURM_JOB_PARTITION", ""),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        "gres_gpu_type": match.group(1) if match else "",
        "gpu": gpu or (f"gres:{match.group(1)}" if match else "none"),
    }


def _maybe_fail(shard_dir: Path) -> None:
    mode = os.environ.get(FAIL_ENV, "")
    if mode == "always":
        raise RuntimeError(f"injected failure ({FAIL_ENV}=always)")
    if mode == "hang":
        while True:
            time.sleep(60)
    if mode == "once":
        marker = shard_dir / ".failed_once"
        if not marker.exists():
            marker.write_text(os.environ.get("SLURM_JOB_ID", ""))
            raise RuntimeError(f"injected failure ({FAIL_ENV}=once)")


def _maybe_delay() -> float:
    """``SABER_PAYLOAD_DELAY_S`` seconds of simulated compute per shard (tests: a slow model)."""
    delay = float(os.environ.get(DELAY_ENV) or 0)
    if delay > 0:
        time.sleep(delay)
    return delay


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temporary file and rename: readers see the whole file or none."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write(tmp)
    os.replace(tmp, path)


def payload_version() -> str:
    """Hash of the code both sides of a shard run (this module and the LLM server): the
    dispatcher and the cluster must agree on it."""
    digest = hashlib.sha256()
    for name in PROTOCOL_FILES:
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()[:16]


def answer_shard(
    shard_dir: Path,
    backend: LLMEngine,
    progress_every: int = 2048,
    log: Callable[[str], None] = print,
    where: dict[str, str] | None = None,
    warmup_s: float = 0.0,
    started: float | None = None,
    inject: bool = True,
) -> dict[str, Any]:
    """Answer ``shard_dir/requests.parquet`` with a ready backend into ``results.parquet`` and
    ``stats.json`` (both written atomically, results first); return the shard's stats.

    Requests go to the backend in batches of ``progress_every`` (a progress line each).
    ``inject`` applies the test hooks ``SABER_PAYLOAD_FAIL`` and ``SABER_PAYLOAD_DELAY_S``.
    """
    started = time.perf_counter() if started is None else started
    if inject:
        _maybe_fail(shard_dir)
    requests = table_to_requests(pq.read_table(shard_dir / REQUESTS))
    where = where or node_provenance()
    delay_s = _maybe_delay() if inject else 0.0
    results: list[LLMResult] = []
    step = max(progress_every, 1)
    generate_s = 0.0
    before = engine_counters(backend)
    for start in range(0, len(requests), step):
        batch = requests[start : start + step]
        t0 = time.perf_counter()
        results += backend.generate(batch)
        generate_s += time.perf_counter() - t0
        log(f"shard {shard_dir.name}: {len(results)}/{len(requests)} answered")
    elapsed = time.perf_counter() - started
    prompt = sum(r.prompt_tokens or 0 for r in results)
    completion = sum(r.completion_tokens or 0 for r in results)
    busy = generate_s + delay_s
    stats = {
        **where,
        "shard": shard_dir.name,
        "identity": backend.identity(),
        "n_requests": len(requests),
        "n_errors": sum(r.error is not None for r in results),
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "elapsed_s": round(elapsed, 3),
        "warmup_s": round(warmup_s, 3),
        "generate_s": round(busy, 3),
        "requests_per_s": round(len(requests) / busy, 3) if busy else 0.0,
        "tokens_per_s": round((prompt + completion) / busy, 1) if busy else 0.0,
        **prefix_cache_stats(before, engine_counters(backend)),
    }
    keys = ("slurm_job_id", "slurm_node", "gpu", "cuda_visible_devices")
    extra = {k: stats[k] for k in keys}
    extra.update(shard=shard_dir.name, shard_elapsed_s=stats["elapsed_s"])
    stamped = [replace(r, extra={**r.extra, **extra}) for r in results]
    write_atomic(shard_dir / RESULTS, lambda p: pq.write_table(results_to_table(stamped), p))
    write_atomic(shard_dir / STATS, lambda p: p.write_text(json.dumps(stats, indent=1)))
    log(
        f"shard {shard_dir.name}: done in {elapsed:.1f}s, {stats['requests_per_s']} req/s, "
        f"{stats['tokens_per_s']} tok/s"
    )
    return stats


def engine_counters(engine: Any) -> dict[str, float]:
    """An engine's cumulative token counters (``counters()``: vLLM), else ``{}``."""
    counters = getattr(engine, "counters", None)
    return counters() if callable(counters) else {}


def prefix_cache_stats(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """The prefix cache over one shard, from the engine's counters before and after:
    ``prefix_cache_queries`` and ``prefix_cache_hits`` (prompt tokens looked up, found) and
    their ratio ``prefix_cache_hit_rate``; ``{}`` for engines without counters."""
    if "prefix_cache_queries" not in after:
        return {}
    queries = after["prefix_cache_queries"] - before.get("prefix_cache_queries", 0.0)
    hits = after.get("prefix_cache_hits", 0.0) - before.get("prefix_cache_hits", 0.0)
    return {
        "prefix_cache_queries": int(queries),
        "prefix_cache_hits": int(hits),
        "prefix_cache_hit_rate": round(hits / queries, 4) if queries else 0.0,
    }


def run_shard(
    shard_dir: Path,
    spec: str,
    config: dict[str, Any],
    progress_every: int = 2048,
    log: Callable[[str], None] = print,
    warmup: bool = True,
) -> dict[str, Any]:
    """One job, one shard: build the backend, answer ``shard_dir`` (:func:`answer_shard`).

    ``warmup`` answers the first request once on its own (discarded) so that model loading is
    timed as ``warmup_s`` and not counted in the shard's throughput.
    """
    _maybe_fail(shard_dir)
    requests = table_to_requests(pq.read_table(shard_dir / REQUESTS))
    where = node_provenance()
    log(f"shard {shard_dir.name}: {len(requests)} requests on {where['slurm_node']} ({spec})")
    started = time.perf_counter()
    backend = build_engine(spec, config)
    warmup_s = 0.0
    if warmup and requests:
        backend.generate(requests[:1])
        warmup_s = time.perf_counter() - started
        log(f"shard {shard_dir.name}: backend ready in {warmup_s:.1f}s")
    return answer_shard(
        shard_dir, backend, progress_every, log, where, warmup_s, started, inject=False
    )


def main() -> None:
    """Entry point inside the SLURM job: shard folder and backend come from the Pipes extras."""
    from dagster_pipes import open_dagster_pipes

    with open_dagster_pipes() as pipes:

        def log(message: str) -> None:
            print(message, flush=True)
            pipes.log.info(message)

        extras = pipes.extras
        stats = run_shard(
            Path(extras["shard_dir"]),
            extras["backend_spec"],
            extras.get("backend_config") or {},
            int(extras.get("progress_every") or 2048),
            log=log,
            warmup=bool(extras.get("warmup", True)),
        )
        pipes.report_custom_message({"saber_shard_stats": stats})
    sys.stdout.flush()


if __name__ == "__main__":
    main()
