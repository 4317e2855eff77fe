"""The two private dagster-slurm calls the dispatcher relies on, in one place.

dagster-slurm 1.22 has no public way to ask where a step's jobs write their Pipes stream and
logs. The dispatcher needs that folder to read a failed job's log tail and to clear the folder
before the next job of the same step (otherwise the next job's Pipes reader replays the old
stream). ``PipesClient._get_remote_base`` and ``_get_remote_run_dir`` compute it; they are
private, so the pin is checked by a test (``tests/integration/test_slurm_units.py``): a new
dagster-slurm release must pass it before the pin moves.
"""

from __future__ import annotations

from importlib.metadata import version

import dagster as dg
from dagster_slurm import ComputeResource
from dagster_slurm.helpers.ssh_pool import SSHConnectionPool

PINNED_VERSION = "1.22.0"
PRIVATE_CALLS = ("_get_remote_base", "_get_remote_run_dir")


def installed_version() -> str:
    """The installed dagster-slurm version."""
    return version("dagster-slurm")


def step_run_dir(
    compute: ComputeResource, context: dg.AssetExecutionContext, pool: SSHConnectionPool
) -> str | None:
    """dagster-slurm's run folder of this step on the cluster (the same for every job of the
    step), or None when it cannot be determined."""
    try:
        client = compute.get_pipes_client(context)
        base = client._get_remote_base(context.run.run_id, pool)
        return client._get_remote_run_dir(base, context.run.run_id, context.op_execution_context)
    except Exception:
        return None
