"""One retriever evaluated inside a SLURM job: the program a GPU node runs (no Dagster).

The job's Pipes extras name the benchmark folder on the cluster, the spec, the settings, the
registry file (the entry's engine, model, options), the output folder, the embedding-cache file
and the seed. The job loads the model once, evaluates every setting with the same code as
``saber eval`` (:func:`saber_eval.runner.evaluate_specs`), writes the run files, per-query CSVs
and summaries under ``<out>/runs/<slug>/`` and reports where it ran (job id, node,
``CUDA_VISIBLE_DEVICES``) and each setting's nDCG@10 through dagster-pipes. A vLLM engine's
pooling worker starts from ``$SABER_VLLM_ENV`` (the SLURM profile's ``vllm_env_path``).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from saber_eval.loading import load_benchmark
from saber_eval.registry import load_registry
from saber_eval.retrievers import retriever_factory
from saber_eval.runner import eval_dir, evaluate_specs, retriever_slug

STATS_KEY = "saber_eval_stats"


def run_job(extras: dict[str, Any], log=print) -> dict[str, Any]:
    """Evaluate ``extras["spec"]`` on every setting; returns what the job reports."""
    started = time.monotonic()
    benchmark = load_benchmark(Path(extras["benchmark_dir"]))
    registry = load_registry(extras.get("registry") or None)
    cache = Path(extras["cache_path"]) if extras.get("cache_path") else None
    make = retriever_factory(cache, seed=int(extras.get("seed", 0)), registry=registry)
    folder = eval_dir(Path(extras["out_dir"]), benchmark)
    results = evaluate_specs(
        benchmark,
        [extras["spec"]],
        list(extras["settings"]),
        folder,
        registry=registry,
        make=make,
        log=log,
    )
    return {
        "spec": extras["spec"],
        "slug": retriever_slug(extras["spec"]),
        "eval_dir": str(folder),
        "benchmark_hash": benchmark.hash,
        "ndcg@10": {r.setting: r.mean for r in results},
        "slurm_job_id": os.environ.get("SLURM_JOB_ID", ""),
        "slurm_node": socket.gethostname(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        "elapsed_s": round(time.monotonic() - started, 3),
    }


def main() -> None:
    """Entry point inside the SLURM job: everything comes from the Pipes extras."""
    from dagster_pipes import open_dagster_pipes

    with open_dagster_pipes() as pipes:
        stats = run_job(pipes.extras, log=lambda m: print(m, flush=True))
        pipes.report_custom_message({STATS_KEY: stats})
    sys.stdout.flush()


if __name__ == "__main__":
    main()
