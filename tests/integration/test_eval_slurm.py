"""A retriever evaluated as one SLURM job on the dev cluster (`make slurm-up`): the packaged
MiniLM on vLLM (``vllm:minilm``, the pooling worker from the profile's ``vllm_env_path``) on a
tiny export, through the ``retriever_runs`` asset under ``execution: slurm``; the leaderboard
then lists it, and its nDCG@10 equals sentence-transformers' in this process.

Marked ``slurm`` and ``vllm`` (skipped with the reason when the cluster or the vLLM environment
is missing; ``SABER_REQUIRE_SLURM=1`` / ``SABER_REQUIRE_VLLM=1`` fail instead)."""

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import dagster as dg
import pytest
from test_eval_data import write_tiny_benchmark
from test_slurm import usable_dev_profile

from saber_assets.evaluation import RETRIEVERS, leaderboard, partition_tables, retriever_runs
from saber_assets.resources import BuildResource, StoreResource
from saber_config import load_build_config
from saber_eval.loading import load_benchmark
from saber_eval.registry import load_registry
from saber_eval.retrievers import make_retriever
from saber_eval.runner import run_retriever
from saber_slurm import SlurmDispatch
from saber_store.database import DuckDBStore

pytestmark = [pytest.mark.slurm, pytest.mark.vllm, pytest.mark.e2e]
SPEC = "vllm:minilm"


def _sacct_jobs(remote_base: str) -> list[str]:
    """Job ids whose working directory lies under ``remote_base`` (sacct)."""
    conf = Path(os.environ.get("SABER_SLURM_DIR", "/var/tmp/saber-slurm")) / "etc/slurm.conf"
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-o", "JobID,WorkDir,State", "-S", "now-1hour"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "SLURM_CONF": str(conf)},
    ).stdout
    return [line.split("|")[0] for line in out.splitlines() if remote_base in line]


def test_a_vllm_embedder_is_evaluated_as_one_slurm_job_and_listed(tmp_path):
    profile = usable_dev_profile()
    vllm_python = Path(profile["vllm_env_path"]) / "env" / "bin" / "python"
    if not vllm_python.exists():
        reason = f"{vllm_python} is missing: run `make vllm-env`, then `make slurm-up`"
        if os.environ.get("SABER_REQUIRE_VLLM"):
            pytest.fail(reason)
        pytest.skip(reason)
    remote_base = f"{profile['remote_base']}/test-eval-{uuid.uuid4().hex[:8]}"
    slurm = SlurmDispatch(**{**profile, "remote_base": remote_base, "poll_timeout": 900})
    build = load_build_config("tiny", home=str(tmp_path / "home"), execution="slurm")
    write_tiny_benchmark(build.export_dir)
    store = DuckDBStore(database=str(build.database_path))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(RETRIEVERS.name, [SPEC])
    resources = {"build": BuildResource.of(build), "store": StoreResource.of(store), "slurm": slurm}

    def materialize(asset, spec=None, config=None):
        return dg.materialize(
            [retriever_runs, leaderboard],
            resources=resources,
            instance=instance,
            partition_key=spec,
            selection=[asset],
            run_config=config,
        )

    try:
        result = materialize(
            retriever_runs, SPEC, {"ops": {"retriever_runs": {"config": {"mlflow": False}}}}
        )
        assert result.success
        assert materialize(
            leaderboard, config={"ops": {"leaderboard": {"config": {"mlflow": False}}}}
        ).success
        jobs = _sacct_jobs(remote_base)
        assert len(jobs) == 1, jobs  # one job: one model load for the retriever
        meta = result.asset_materializations_for_node("retriever_runs")[-1].metadata
        assert str(meta["slurm_job_id"].value) == jobs[0]
        board = store.read_table("leaderboard")
        assert SPEC in set(board["spec"])
        ours = board.filter(board["spec"] == SPEC)["ndcg@10"].item()
        bench = load_benchmark(build.export_dir)
        local = run_retriever(
            bench, make_retriever("st:minilm"), "statement-full", load_registry().get("st:minilm")
        )
        assert ours == pytest.approx(local.mean, abs=1e-4)
        runs = store.read_table(partition_tables(SPEC)[1])
        run_file = Path(runs["run_file"].item())
        assert run_file.exists() and run_file.is_relative_to(tmp_path)  # fetched back here
    finally:
        shutil.rmtree(remote_base, ignore_errors=True)
