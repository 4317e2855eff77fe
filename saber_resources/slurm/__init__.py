"""SLURM execution of LLM calls through dagster-slurm: settings and cluster profiles
(:mod:`.settings`), the shard dispatcher (:mod:`.dispatcher`), the private dagster-slurm calls
it relies on (:mod:`.adapter`). The job payload is ``saber_resources/slurm_payload.py``."""

from saber_resources.slurm.dispatcher import (
    PAYLOAD,
    Attempt,
    ShardRecord,
    SlurmDispatcher,
    SlurmShardError,
    maybe_dispatcher,
    plan_shards,
)
from saber_resources.slurm.settings import (
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
    "Attempt",
    "SbatchLauncher",
    "ShardRecord",
    "SlurmDispatch",
    "SlurmDispatcher",
    "SlurmShardError",
    "expand_env",
    "load_cluster_profile",
    "maybe_dispatcher",
    "plan_shards",
    "slurm_dispatch_from_build",
]
