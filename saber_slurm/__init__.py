"""SLURM execution of LLM calls through dagster-slurm: settings and cluster profiles
(:mod:`.settings`), the run's LLM-server allocation (:mod:`.allocation`, the default mode), the
per-shard dispatcher (:mod:`.dispatcher`), the choice between them (:mod:`.dispatch`), cost
records (:mod:`.costs`) and the private dagster-slurm calls the per-shard mode relies on
(:mod:`.adapter`). The job payloads are
``saber_compute/llm_shard.py`` (one shard) and ``saber_compute/llm_server.py`` (the
allocation's LLM server)."""

from saber_slurm.allocation import (
    AllocationDispatcher,
    allocation_dir,
    allocation_jobs,
    finished_allocation_runs,
    model_key,
    release_run,
    run_costs,
    sbatch_script,
    stop_run,
)
from saber_slurm.costs import (
    cost_lines,
    finish_run,
    producing_runs,
    report_items,
    run_jobs,
    stage_costs,
    summarize_jobs,
)
from saber_slurm.dispatch import maybe_dispatcher, open_dispatch
from saber_slurm.dispatcher import (
    PAYLOAD,
    Attempt,
    ShardDispatch,
    ShardRecord,
    SlurmDispatcher,
    SlurmShardError,
    plan_shards,
)
from saber_slurm.settings import (
    BUILD_OVERRIDES,
    CLUSTER_PROFILES,
    DEV_DIR,
    SbatchLauncher,
    SlurmDispatch,
    expand_env,
    load_cluster_profile,
    slurm_dispatch_from_build,
)

__all__ = [
    "BUILD_OVERRIDES",
    "CLUSTER_PROFILES",
    "DEV_DIR",
    "PAYLOAD",
    "AllocationDispatcher",
    "Attempt",
    "SbatchLauncher",
    "ShardDispatch",
    "ShardRecord",
    "SlurmDispatch",
    "SlurmDispatcher",
    "SlurmShardError",
    "allocation_dir",
    "allocation_jobs",
    "cost_lines",
    "expand_env",
    "finish_run",
    "finished_allocation_runs",
    "load_cluster_profile",
    "maybe_dispatcher",
    "model_key",
    "open_dispatch",
    "plan_shards",
    "producing_runs",
    "release_run",
    "report_items",
    "run_costs",
    "run_jobs",
    "sbatch_script",
    "slurm_dispatch_from_build",
    "stage_costs",
    "stop_run",
    "summarize_jobs",
]
