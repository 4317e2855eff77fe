"""All-pairs passes as SLURM CPU jobs: one job array per pass, one task per shard.

The units of a pass still to do are cut into ``shards`` contiguous runs
(:func:`~saber_compute.allpairs_shard.plan_shards`). The pass's cluster folder
``<remote_base>/allpairs/<pass folder name>/shards-<plan hash>/`` gets the kernel arrays
(``arrays.npz``) and the plan (``plan.json``); one ``sbatch --array`` submits a task per shard
that is not finished there (``shard-K/complete.npz``), each running
``python -m saber_compute.allpairs_shard`` with ``cpus`` threads (no GPU). One command over
the process's one SSH connection polls the tasks and their progress every
``status_poll_seconds``. Tasks that end without their result (failed, preempted, timed out)
are submitted again — resuming from the partials they saved — at most ``max_retries`` times;
then the pass fails with the job ids, states and the tail of a failed task's log. At the end
each shard's totals are copied into the local pass folder as ``partial-slurm-K.npz``: the local
pass adds them up exactly as its own partials (and runs nothing more).

The same plan gives the same cluster folder, so a killed build resumes: finished shards are
never run again, unfinished ones resume from their partials. The job's working directory
(``…/jobs/<run_id>``) names the run, so stopping a run (``stop_run``) cancels its tasks too.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagster_slurm.helpers.ssh_pool import SSHConnectionPool

from saber_compute.allpairs_shard import ARRAYS, PLAN, kernel_digest, plan_shards
from saber_compute.pass_checkpoint import save_arrays
from saber_core.discovery.pair_kernel import PairArrays
from saber_core.discovery.pass_totals import Band
from saber_slurm.settings import SlurmDispatch, payload_lines
from saber_slurm.transfer import get_file, put_file

PAYLOAD_MODULE = "saber_compute.allpairs_shard"
ACTIVE = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED")
PROGRESS_EVERY_S = 30.0
LOG_TAIL_LINES = 30
q = shlex.quote


class AllPairsShardError(RuntimeError):
    """Shards whose tasks kept failing (message: job ids, states, a log's tail)."""


@dataclass(frozen=True)
class ShardJobSettings:
    """Resources of each shard task (empty: the SLURM profile's value)."""

    cpus: int
    partition: str = ""
    mem: str = ""
    time_limit: str = ""


@dataclass
class ShardedPass:
    """A pass's shards on the cluster: plan, folder, submitted arrays, per-shard stats."""

    units: list[tuple[int, int]]
    band: Band
    shards: list[list[int]]
    remote: str
    job_ids: list[str] = field(default_factory=list)
    stats: dict[int, dict] = field(default_factory=dict)
    prefix: int = 0  # a pass over the rows appended after the first ``prefix``

    @property
    def plan(self) -> dict[str, Any]:
        """The ``plan.json`` the tasks read."""
        return {
            "units": [list(u) for u in self.units],
            "band": list(self.band.as_tuple()),
            "shards": self.shards,
            "kernel": kernel_digest(),
            "prefix": self.prefix,
        }


def sharded_pass(
    settings: SlurmDispatch,
    units: Sequence[tuple[int, int]],
    band: Band,
    todo: Sequence[int],
    n_shards: int,
    name: str,
    prefix: int = 0,
) -> ShardedPass:
    """The shards of the units ``todo`` (over the rows after ``prefix``) and their cluster
    folder (named by the plan)."""
    shards = [[todo[k] for k in shard] for shard in plan_shards(len(todo), n_shards)]
    planned = [list(map(list, units)), band.as_tuple(), shards] + ([prefix] if prefix else [])
    digest = hashlib.blake2b(json.dumps(planned).encode(), digest_size=8).hexdigest()
    remote = f"{settings.remote_base}/allpairs/{name}/shards-{digest}"
    return ShardedPass(list(units), band, shards, remote, prefix=prefix)


def shard_script(
    settings: SlurmDispatch, job: ShardJobSettings, work: ShardedPass, run_id: str
) -> str:
    """The batch script of the pass's job array (task id = shard)."""
    jobs = f"{work.remote}/jobs/{run_id}"
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name=saber-allpairs-{Path(work.remote).name[-8:]}",
        f"#SBATCH --chdir={jobs}",
        f"#SBATCH --output={jobs}/slurm-%A_%a.out",
        f"#SBATCH --cpus-per-task={max(job.cpus, 1)}",
    ]
    time_limit = job.time_limit or settings.time_limit
    partition = job.partition or settings.partition
    mem = job.mem or settings.mem
    lines += [f"#SBATCH --time={time_limit}"] if time_limit else []
    lines += [f"#SBATCH --partition={partition}"] if partition else []
    lines += [f"#SBATCH --mem={mem}"] if mem else []
    lines += [
        f"#SBATCH --{k}={getattr(settings, k)}" for k in ("account", "qos") if getattr(settings, k)
    ]
    args = f'--folder {q(work.remote)} --shard "$SLURM_ARRAY_TASK_ID" --workers {max(job.cpus, 1)}'
    lines += payload_lines(settings, PAYLOAD_MODULE, args)
    return "\n".join(lines) + "\n"


def _status_script(work: ShardedPass, job_ids: Sequence[str]) -> str:
    """Bash printing ``done K <stats>``, ``progress K <json>`` per shard and ``task <id> <state>``
    per queued or running task of ``job_ids``."""
    r = q(work.remote)
    lines = [
        f"cd {r} || exit 0",
        f"for k in {' '.join(str(k) for k in range(len(work.shards)))}; do",
    ]
    lines += [
        '  if [ -s "shard-$k/complete.npz" ]; then printf "done %s " "$k"; '
        'cat "shard-$k/stats.json" 2>/dev/null | tr -d "\\n"; echo',
        '  elif [ -s "shard-$k/progress.json" ]; then printf "progress %s " "$k"; '
        'tr -d "\\n" < "shard-$k/progress.json"; echo; fi',
        "done",
    ]
    if job_ids:
        ids = ",".join(job_ids)
        lines.append(f"squeue -h -r -j {ids} -o 'task %i %T' 2>/dev/null || true")
    return "\n".join(lines)


class AllPairsJobs:
    """Runs a :class:`ShardedPass` on the cluster and copies its totals into the local pass
    folder (module docstring)."""

    def __init__(
        self,
        settings: SlurmDispatch,
        job: ShardJobSettings,
        run_id: str,
        log: Callable[[str], None],
    ) -> None:
        self.settings = settings
        self.job = job
        self.run_id = run_id
        self.log = log

    def run(self, arrays: PairArrays, work: ShardedPass, local: Path) -> dict[str, Any]:
        """Every shard of ``work`` done on the cluster, its totals in ``local``; the figures."""
        started = time.monotonic()
        with SSHConnectionPool(self.settings.ssh_resource()) as pool:
            self._upload(pool, arrays, work)
            try:
                self._until_done(pool, work)
            except BaseException:
                if work.job_ids:
                    pool.run(f"scancel {' '.join(work.job_ids)} 2>/dev/null || true")
                raise
            local.mkdir(parents=True, exist_ok=True)
            for k in range(len(work.shards)):
                get_file(
                    self.settings,
                    pool,
                    f"{work.remote}/shard-{k}/complete.npz",
                    local / f"partial-slurm-{k}.npz",
                )
        return {
            "shards": len(work.shards),
            "job_ids": work.job_ids,
            "cluster_folder": work.remote,
            "shard_seconds": [work.stats[k].get("seconds") for k in sorted(work.stats)],
            "seconds": round(time.monotonic() - started, 1),
        }

    def _upload(self, pool: SSHConnectionPool, arrays: PairArrays, work: ShardedPass) -> None:
        jobs = f"{work.remote}/jobs/{self.run_id}"
        present = pool.run(f"mkdir -p {q(jobs)} && ls {q(work.remote)}").split()
        with tempfile.TemporaryDirectory(prefix="saber-allpairs-") as tmp:
            if ARRAYS not in present:
                save_arrays(arrays, Path(tmp) / ARRAYS)
                put_file(self.settings, pool, Path(tmp) / ARRAYS, f"{work.remote}/{ARRAYS}")
            (Path(tmp) / PLAN).write_text(json.dumps(work.plan))
            put_file(self.settings, pool, Path(tmp) / PLAN, f"{work.remote}/{PLAN}")
            script = shard_script(self.settings, self.job, work, self.run_id)
            (Path(tmp) / "shard.sbatch").write_text(script)
            put_file(self.settings, pool, Path(tmp) / "shard.sbatch", f"{jobs}/shard.sbatch")

    def _until_done(self, pool: SSHConnectionPool, work: ShardedPass) -> None:
        deadline = time.monotonic() + self.settings.poll_timeout
        submissions, last_log = 0, 0.0
        while True:
            done, progress, active = self._poll(pool, work)
            missing = [k for k in range(len(work.shards)) if k not in done]
            if not missing:
                return
            if time.monotonic() - last_log >= PROGRESS_EVERY_S:
                last_log = time.monotonic()
                self._log_progress(work, done, progress, active)
            if not active:
                if submissions > max(self.settings.max_retries, 0):
                    raise AllPairsShardError(self._failure(pool, work, missing))
                if submissions:
                    left = self.settings.max_retries - submissions + 1
                    self.log(
                        f"all-pairs shards {missing} ended without a result: again ({left} left)"
                    )
                self._submit(pool, work, missing)
                submissions += 1
            if time.monotonic() > deadline:
                raise AllPairsShardError(
                    f"all-pairs shards {missing} not done after poll_timeout="
                    f"{self.settings.poll_timeout}s (jobs {work.job_ids})"
                )
            time.sleep(max(self.settings.status_poll_seconds, 0.5))

    def _poll(
        self, pool: SSHConnectionPool, work: ShardedPass
    ) -> tuple[set[int], dict[int, dict], dict[str, str]]:
        done: set[int] = set()
        progress: dict[int, dict] = {}
        active: dict[str, str] = {}
        for line in pool.run(_status_script(work, work.job_ids)).splitlines():
            kind, _, rest = line.strip().partition(" ")
            key, _, text = rest.partition(" ")
            if kind == "done":
                done.add(int(key))
                work.stats[int(key)] = _json(text)
            elif kind == "progress":
                progress[int(key)] = _json(text)
            elif kind == "task" and text in ACTIVE:
                active[key] = text
        return done, progress, active

    def _submit(self, pool: SSHConnectionPool, work: ShardedPass, shards: list[int]) -> None:
        jobs = f"{work.remote}/jobs/{self.run_id}"
        array = ",".join(str(k) for k in shards)
        out = pool.run(f"cd {q(jobs)} && sbatch --parsable --array={array} shard.sbatch")
        job = out.strip().split(";")[0]
        work.job_ids.append(job)
        self.log(
            f"all-pairs: SLURM job array {job} for shards {shards} ({self.job.cpus} CPUs each)"
        )

    def _log_progress(
        self, work: ShardedPass, done: set[int], progress: dict[int, dict], active: dict[str, str]
    ) -> None:
        pairs = sum(p.get("pairs_done", 0) for p in progress.values())
        total = sum(p.get("pairs_total", 0) for p in progress.values())
        states = ", ".join(f"{t} {s}" for t, s in sorted(active.items())) or "none queued"
        self.log(
            f"all-pairs on SLURM: {len(done)}/{len(work.shards)} shards done; running shards "
            f"{pairs:,}/{total:,} pairs; tasks: {states}"
        )

    def _failure(self, pool: SSHConnectionPool, work: ShardedPass, missing: list[int]) -> str:
        ids = ",".join(work.job_ids)
        states = pool.run(f"sacct -X -n -P -j {ids} -o JobID,State,ExitCode 2>/dev/null || true")
        jobs = f"{work.remote}/jobs/{self.run_id}"
        tail = pool.run(
            f"f=$(ls -t {q(jobs)}/slurm-*.out 2>/dev/null | head -n 1); "
            f'[ -n "$f" ] && echo "$f" && tail -n {LOG_TAIL_LINES} "$f" || true'
        )
        return (
            f"all-pairs shards {missing} failed {self.settings.max_retries + 1} times "
            f"(jobs {work.job_ids}).\nsacct:\n{states.strip()}\nlast log:\n{tail.strip()}"
        )


def _json(text: str) -> dict:
    try:
        value = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
