"""A retriever's evaluation as one SLURM job through dagster-slurm (one model load per job).

The benchmark folder goes up once per content hash (``<remote_base>/eval/<label>/benchmark/``,
a tarball unpacked there), with the registry file; one ``ComputeResource.run`` runs the
evaluation payload (``saber_eval/node_job.py``) sized from the registry entry's ``resources``
(``gpus`` → ``--gpus-per-node``, ``cpus`` → ``--cpus-per-task``, ``mem``, ``time``; unset: the
SLURM profile's values); the job's run folder ``runs/<slug>/`` comes back into the local
evaluation folder, its summaries' paths rewritten to the local ones. A vLLM engine's worker in
the job starts from the profile's ``vllm_env_path`` (``SABER_VLLM_ENV``).
"""

from __future__ import annotations

import json
import shlex
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
from dagster_slurm.helpers.ssh_pool import SSHConnectionPool

from saber_slurm.settings import SlurmDispatch
from saber_slurm.transfer import get_file, put_file

q = shlex.quote


class EvalJobError(RuntimeError):
    """The evaluation job failed (message: spec, job id, the error)."""


@dataclass(frozen=True)
class EvalJob:
    """One retriever's job: what it evaluates and where its results go."""

    spec: str
    slug: str
    label: str  # the benchmark's folder label (name-hash)
    benchmark_dir: Path
    registry: Path
    settings: tuple[str, ...]
    seed: int
    local_folder: Path  # the local evaluation folder of this benchmark
    resources: dict[str, Any]
    payload: Path


def slurm_options(settings: SlurmDispatch, resources: dict[str, Any]) -> dict[str, Any]:
    """sbatch overrides of one job: the profile's GPU request, then the entry's resources."""
    opts = settings.extra_slurm_opts()
    if "gpus" in resources:
        gpus = int(resources["gpus"])
        if gpus:
            opts["gpus_per_node"] = f"{settings.gpu_type}:{gpus}" if settings.gpu_type else gpus
        else:
            opts.pop("gpus_per_node", None)
    for name, key in (("cpus", "cpus_per_task"), ("mem", "mem"), ("time", "time_limit")):
        if name in resources:
            opts[key] = resources[name]
    return opts


def _tar(folder: Path, target: Path) -> Path:
    with tarfile.open(target, "w:gz") as tar:
        tar.add(folder, arcname=".")
    return target


def _localize(folder: Path, remote_folder: str) -> None:
    """Rewrite the cluster paths in the fetched summaries to the local folder's."""
    for summary in folder.glob("*.json"):
        data = json.loads(summary.read_text())
        for name, path in data.get("files", {}).items():
            data["files"][name] = str(folder / Path(path).name)
        data["eval_dir_remote"] = remote_folder
        summary.write_text(json.dumps(data, indent=2, default=str))


def run_eval_job(
    settings: SlurmDispatch, context: dg.AssetExecutionContext, job: EvalJob
) -> dict[str, Any]:
    """Run the job, fetch its results; returns the job's report (job id, node, nDCG@10)."""
    remote = f"{settings.remote_base}/eval/{job.label}"
    env = dict(settings.payload_env)
    if settings.vllm_env_path:
        env["SABER_VLLM_ENV"] = f"{settings.vllm_env_path}/env"
    compute = settings.compute_resource()
    with (
        tempfile.TemporaryDirectory(prefix="saber-eval-job-") as tmp,
        SSHConnectionPool(settings.ssh_resource()) as pool,
    ):
        staging = Path(tmp)
        pool.run(f"mkdir -p {q(remote)}/benchmark {q(remote)}/out")
        if (
            pool.run(f"test -f {q(remote)}/benchmark/.complete && echo yes || true").strip()
            != "yes"
        ):
            put_file(settings, pool, _tar(job.benchmark_dir, staging / "b.tgz"), f"{remote}/b.tgz")
            pool.run(
                f"tar -xzf {q(remote)}/b.tgz -C {q(remote)}/benchmark && "
                f"touch {q(remote)}/benchmark/.complete && rm -f {q(remote)}/b.tgz"
            )
        put_file(settings, pool, job.registry, f"{remote}/retrievers-{job.slug}.yaml")
        extras = {
            "benchmark_dir": f"{remote}/benchmark",
            "spec": job.spec,
            "settings": list(job.settings),
            "registry": f"{remote}/retrievers-{job.slug}.yaml",
            "out_dir": f"{remote}/out",
            "cache_path": f"{remote}/eval_cache.duckdb",
            "seed": job.seed,
        }
        context.log.info(
            f"SLURM: evaluating {job.spec} as one job ({slurm_options(settings, job.resources)})"
        )
        try:
            invocation = compute.run(
                context=context,
                payload_path=str(job.payload),
                extras=extras,
                extra_slurm_opts=slurm_options(settings, job.resources) or None,
                extra_env=env or None,
                poll_timeout=settings.poll_timeout,
            )
        except Exception as exc:
            raise EvalJobError(f"SLURM evaluation of {job.spec!r} failed: {exc}") from exc
        stats: dict[str, Any] = {}
        for message in invocation.get_custom_messages():
            if isinstance(message, dict) and "saber_eval_stats" in message:
                stats = message["saber_eval_stats"]
        if not stats:
            raise EvalJobError(f"SLURM evaluation of {job.spec!r}: the job reported no results")
        runs = f"{stats['eval_dir']}/runs/{job.slug}"
        pool.run(f"tar -czf {q(remote)}/{job.slug}.tgz -C {q(runs)} .")
        get_file(settings, pool, f"{remote}/{job.slug}.tgz", staging / "runs.tgz")
        target = job.local_folder / "runs" / job.slug
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(staging / "runs.tgz") as tar:
            tar.extractall(target, filter="data")
        _localize(target, runs)
    context.log.info(
        f"SLURM job {stats.get('slurm_job_id')} on {stats.get('slurm_node')} "
        f"(CUDA_VISIBLE_DEVICES={stats.get('cuda_visible_devices')!r}): {job.spec} "
        f"nDCG@10 {stats.get('ndcg@10')} in {stats.get('elapsed_s')} s"
    )
    return stats
