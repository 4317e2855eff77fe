"""SLURM settings: the ``SlurmDispatch`` resource (cluster, queue, shard, allocation and retry
settings), the cluster profiles in ``slurm/profiles/`` and a build's overrides of them."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any, Literal

import dagster as dg
import yaml
from dagster_slurm import (
    BashLauncher,
    ComputeResource,
    SlurmQueueConfig,
    SlurmResource,
    SSHConnectionResource,
)
from pydantic import Field, field_validator

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CLUSTER_PROFILES = PROJECT_ROOT / "slurm" / "profiles"
DEV_DIR = "/var/tmp/saber-slurm"
VLLM_ENGINE = "saber_compute.llm.vllm_offline:VLLMEngine"


class SbatchLauncher(BashLauncher):
    """``BashLauncher`` plus extra ``#SBATCH`` lines (e.g. ``--constraint=a100``) in the script."""

    sbatch_directives: list[str] = Field(default_factory=list)

    def prepare_execution(self, *args: Any, **kwargs: Any):
        """The bash plan, with the directives right after the shebang."""
        plan = super().prepare_execution(*args, **kwargs)
        if self.sbatch_directives:
            lines = [f"#SBATCH {d}" for d in self.sbatch_directives]
            plan.payload = [plan.payload[0], *lines, *plan.payload[1:]]
        return plan


class SlurmDispatch(dg.ConfigurableResource):
    """Where and how LLM shards run on SLURM (defaults: the dev cluster of ``make slurm-up``).

    ``mode="allocation"`` (default): one LLM-server job per model and run holds the model loaded
    and answers the shards every stage writes into its inbox (``time_limit`` is the allocation's
    walltime; ``signal_lead_seconds`` before it, the job stops taking shards and a successor
    takes over). ``mode="per_shard"``: one dagster-slurm job per shard (``time_limit`` per job).
    """

    mode: Literal["allocation", "per_shard"] = Field(
        default="allocation", description="allocation: one model load per run; per_shard: job each"
    )
    ssh_host: str = Field(default="127.0.0.1", description="Login node (SSH host)")
    ssh_port: int = Field(default=2222, description="SSH port")
    ssh_user: str = Field(default="root", description="SSH user")
    ssh_key_path: str = Field(default=f"{DEV_DIR}/ssh/id_ed25519", description="Private key")
    known_hosts_file: str = Field(default=f"{DEV_DIR}/ssh/known_hosts", description="known_hosts")
    host_key_checking: Literal["strict", "accept-new", "off", "inherit"] = "strict"
    remote_base: str = Field(
        default=f"{DEV_DIR}/work",
        description="Work folder on the cluster (shards/ and dagster-slurm's runs/); shared FS",
    )
    env_path: str = Field(
        default=f"{DEV_DIR}/payload-env",
        description="Pre-deployed payload env: P/activate.sh and P/env/bin/python (+ saber)",
    )
    vllm_env_path: str = Field(
        default="",
        description="Pre-deployed environment of the vLLM engine (its pins conflict with the "
        "project's), used instead of env_path by the LLM jobs of a vllm build; '': env_path",
    )
    transfer: Literal["ssh", "shared"] = Field(
        default="ssh",
        description="ssh: scp shards up and results down; shared: same filesystem, same paths",
    )
    partition: str = ""
    account: str = ""
    qos: str = ""
    time_limit: str = "01:00:00"
    cpus: int = 2
    mem: str = Field(default="8G", description="--mem ('' = partition default)")
    gpus_per_node: int = 1
    gpu_type: str = Field(default="", description="GRES type: --gres=gpu:<type>:<n>")
    sbatch_directives: list[str] = Field(
        default_factory=list, description="Extra #SBATCH options, e.g. --constraint=a100_80gb"
    )
    shard_size: int = Field(default=4096, description="Requests per SLURM job")
    max_retries: int = Field(default=2, description="Resubmissions of a failed shard")
    poll_timeout: int = Field(default=86400, description="Max seconds per job (queue + run)")
    status_poll_seconds: float = 2.0
    progress_every: int = Field(default=2048, description="Requests per backend call (progress)")
    payload_env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment of the payload (HF_HOME, ...)"
    )
    backend_spec: str = Field(default="", description="Override the payload's module:Class")
    backend_config_json: str = Field(default="", description="Override its config (JSON)")
    sort_by_prompt: bool = Field(
        default=False,
        description="Group requests by prompt text across a call (vLLM prefix locality); off "
        "keeps CachedLLM's order, so batches (and the embedded model's answers) match in-process",
    )
    warmup: bool = Field(default=True, description="Time model loading apart from throughput")
    idle_timeout: int = Field(
        default=900,
        description="allocation mode: seconds an LLM server waits without work before it exits "
        "(a safety net: the run's end releases it at once)",
    )
    signal_lead_seconds: int = Field(
        default=300,
        description="allocation mode: stop taking shards this long before the walltime "
        "(and --signal=B:USR1@lead); a successor allocation takes the rest",
    )

    @field_validator("remote_base", "env_path", "vllm_env_path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if value and not value.startswith("/"):
            raise ValueError(f"{value!r}: cluster paths must be absolute (no ~ or $HOME)")
        return value.rstrip("/")

    def ssh_resource(self) -> SSHConnectionResource:
        """dagster-slurm's SSH connection (key-only, host key checked)."""
        return SSHConnectionResource(
            host=self.ssh_host,
            port=self.ssh_port,
            user=self.ssh_user,
            key_path=self.ssh_key_path,
            host_key_checking=self.host_key_checking,
            known_hosts_file=self.known_hosts_file or None,
        )

    def slurm_resource(self) -> SlurmResource:
        """dagster-slurm's cluster config (queue defaults; GPUs are set per job)."""
        return SlurmResource(
            ssh=self.ssh_resource(),
            queue=SlurmQueueConfig(
                partition=self.partition,
                time_limit=self.time_limit,
                cpus=self.cpus,
                mem=self.mem or None,
                account=self.account or None,
                qos=self.qos or None,
            ),
            remote_base=f"{self.remote_base}/dagster",
            status_poll_interval_seconds=self.status_poll_seconds,
            status_poll_max_interval_seconds=max(5.0, self.status_poll_seconds),
        )

    def compute_resource(self) -> ComputeResource:
        """``ComputeResource(mode='slurm')`` with the pre-deployed payload environment."""
        return ComputeResource(
            mode="slurm",
            slurm=self.slurm_resource(),
            default_launcher=SbatchLauncher(sbatch_directives=list(self.sbatch_directives)),
            pre_deployed_env_path=self.env_path,
        )

    def extra_slurm_opts(self) -> dict[str, Any]:
        """Per-job sbatch overrides: GPUs (typed as ``gpu:<type>:<n>`` when set) and memory."""
        opts: dict[str, Any] = {}
        if self.gpus_per_node:
            gpus = self.gpus_per_node
            opts["gpus_per_node"] = f"{self.gpu_type}:{gpus}" if self.gpu_type else gpus
            if self.mem:
                opts["mem"] = self.mem  # dagster-slurm drops --mem for GPU jobs unless given
        return opts

    def shard_dir(self, key: str) -> str:
        """The cluster folder of one shard."""
        return f"{self.remote_base}/shards/{key}"


def expand_env(text: str) -> str:
    """``${VAR}`` and ``${VAR:-default}`` replaced from the environment; ``${SABER_PROJECT}`` is
    the checkout this code runs from (the dev cluster's jobs import the same code)."""

    def value(match: re.Match) -> str:
        known = {"SABER_PROJECT": str(PROJECT_ROOT)}
        name = match.group(1)
        return os.environ.get(name) or known.get(name) or (match.group(3) or "")

    return re.sub(r"\$\{(\w+)(:-([^}]*))?\}", value, text)


def load_cluster_profile(name: str) -> dict[str, Any]:
    """``SlurmDispatch`` settings from ``slurm/profiles/<name>.yaml`` (or a YAML path)."""
    path = Path(name) if name.endswith((".yaml", ".yml")) else CLUSTER_PROFILES / f"{name}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in CLUSTER_PROFILES.glob("*.yaml"))
        raise ValueError(f"unknown SLURM cluster profile {name!r}: no {path} (known: {known})")
    values = yaml.safe_load(expand_env(path.read_text())) or {}
    values.pop("tensor_parallel_size", None)  # documentation of the intended vLLM TP size
    unknown = set(values) - set(SlurmDispatch.model_fields)
    if unknown:
        raise ValueError(f"cluster profile {path}: unknown setting(s) {sorted(unknown)}")
    return values


# BuildConfig.slurm field -> SlurmDispatch field
BUILD_OVERRIDES = {
    "mode": "mode",
    "shard_size": "shard_size",
    "max_retries": "max_retries",
    "partition": "partition",
    "account": "account",
    "time_limit": "time_limit",
    "gpus_per_node": "gpus_per_node",
}


def slurm_dispatch_from_build(build: Any) -> SlurmDispatch:
    """The dispatcher resource for a build (its plan, or anything with its ``slurm`` and ``llm``
    sections): its cluster profile plus the build's overrides.

    Reads ``build.slurm.profile`` (default ``dev``) and the overrides of ``BUILD_OVERRIDES``
    ("" or a negative number, or shard size 0, keeps the profile's value); checks that a vLLM
    build gets at least its tensor-parallel GPUs.
    """
    values = load_cluster_profile(build.slurm.profile or "dev")
    for attr, target in BUILD_OVERRIDES.items():
        value = getattr(build.slurm, attr)
        if value == "" or (isinstance(value, int) and value < 0):
            continue
        if target == "shard_size" and value == 0:
            continue
        values[target] = value
    dispatch = SlurmDispatch(**values)
    tp = max(build.llm.tensor_parallel, 1)
    if build.llm.backend == "vllm" and dispatch.gpus_per_node < tp:
        raise ValueError(
            f"llm_tensor_parallel={tp} needs {tp} GPUs per job, but the SLURM profile gives "
            f"gpus_per_node={dispatch.gpus_per_node}"
        )
    return dispatch


def for_engine(settings: SlurmDispatch, spec: str) -> SlurmDispatch:
    """The settings the LLM jobs of engine ``spec`` run with: ``env_path`` is
    ``vllm_env_path`` for the vLLM engine when the profile names one."""
    if settings.vllm_env_path and spec == VLLM_ENGINE:
        return settings.model_copy(update={"env_path": settings.vllm_env_path})
    return settings


def payload_lines(settings: SlurmDispatch, module: str, args: str) -> list[str]:
    """The body of a batch script that runs ``python -m <module> <args>`` in the pre-deployed
    payload environment (``env_path``) with ``payload_env`` exported."""
    for name in settings.payload_env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"payload_env: {name!r} is not an environment variable name")
    env, q = settings.env_path, shlex.quote
    return [
        "",
        "set -e",
        f"source {q(env + '/activate.sh')}",
        *[f"export {k}={q(v)}" for k, v in settings.payload_env.items()],
        f"exec {q(env + '/env/bin/python')} -u -m {module} {args}",
    ]
