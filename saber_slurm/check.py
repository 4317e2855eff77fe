"""``saber slurm check``: is this cluster profile usable, before a build waits in a queue?

Each check is one line with what was found and, when it fails, the setting that fixes it:
the SSH key and login (over the same multiplexed connection a build uses), SLURM's commands and
accounting (``sacct``: without it failures look like successes), the partition, the GPU type
(``--gres=gpu:<type>:<n>`` must match a node's GRES), the payload environment (``env_path``:
``activate.sh`` and ``env/bin/python`` importing the project's compute programs), the work
folder, and a one-minute test job on the partition with the profile's GPUs, whose accounting must
say COMPLETED.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from saber_slurm.settings import SlurmDispatch

TEST_JOB_SECONDS = 60


@dataclass(frozen=True)
class Check:
    """One check: its name, whether it passed, what was found, and the fix when it failed."""

    name: str
    ok: bool
    found: str
    fix: str = ""

    def line(self) -> str:
        """``OK  name: found`` or ``FAIL name: found — fix``."""
        mark = "OK  " if self.ok else "FAIL"
        return f"{mark} {self.name}: {self.found}" + ("" if self.ok else f" — {self.fix}")


Run = Callable[[str], tuple[int, str]]  # a shell command on the login node → (status, output)


def _gres_types(sinfo_gres: str) -> set[str]:
    """GPU types named in ``sinfo -h -o %G`` lines (``gpu:a100:4(S:0-1)`` → ``a100``)."""
    types = set()
    for field in sinfo_gres.replace(",", " ").split():
        parts = field.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) == 3:
            types.add(parts[1])
    return types


def cluster_checks(s: SlurmDispatch, run: Run, wait_s: float = 180.0) -> list[Check]:
    """Every check after the SSH login (module docstring), in order; stops at the first one
    that makes the later ones meaningless."""
    checks = []
    code, out = run("sinfo --version && sacct --version && squeue --version")
    checks.append(
        Check(
            "SLURM commands",
            code == 0,
            out.splitlines()[0] if out else "",
            "install SLURM's client commands on the login node",
        )
    )
    if code != 0:
        return checks
    code, out = run(f"sinfo -h -p {shlex.quote(s.partition)} -o '%P %a %D %G'")
    lines = [line for line in out.splitlines() if line.strip()]
    checks.append(
        Check(
            "partition",
            code == 0 and bool(lines),
            lines[0] if lines else "none",
            f"no partition {s.partition!r}: set slurm_partition (sinfo lists them)",
        )
    )
    if s.gpus_per_node and s.gpu_type:
        types = _gres_types(" ".join(line.split(maxsplit=3)[-1] for line in lines))
        checks.append(
            Check(
                "GPU type",
                s.gpu_type in types,
                f"GRES types {sorted(types)}",
                f"no gpu:{s.gpu_type} on {s.partition}: set gpu_type",
            )
        )
    env = shlex.quote(s.env_path)
    code, out = run(
        f"test -f {env}/activate.sh && {env}/env/bin/python -c "
        "'import saber_compute.llm_server, sys; print(sys.version.split()[0])'"
    )
    checks.append(
        Check(
            "payload environment",
            code == 0,
            out.strip() or s.env_path,
            "build the environment at env_path (docs/cluster.md: payload environment)",
        )
    )
    code, out = run(
        f"mkdir -p {shlex.quote(s.remote_base)} && test -w {shlex.quote(s.remote_base)}"
    )
    checks.append(
        Check("work folder", code == 0, s.remote_base, "set remote_base to a writable folder")
    )
    if all(c.ok for c in checks):
        checks.append(test_job(s, run, wait_s))
    return checks


def test_job(s: SlurmDispatch, run: Run, wait_s: float) -> Check:
    """A one-minute job on the profile's partition with its GPUs; accounting must say
    COMPLETED (a cluster without ``sacct`` data would hide every failure)."""
    options = [
        f"--partition={s.partition}",
        f"--time=00:0{TEST_JOB_SECONDS // 60}:00",
        "--job-name=saber-check",
        f"--output={s.remote_base}/saber-check-%j.out",
    ]
    if s.account:
        options.append(f"--account={s.account}")
    if s.gpus_per_node:
        gres = f"gpu:{s.gpu_type}:{s.gpus_per_node}" if s.gpu_type else f"gpu:{s.gpus_per_node}"
        options.append(f"--gres={gres}")
    script = "echo saber-check $(hostname) gpus=${CUDA_VISIBLE_DEVICES:-none}"
    code, out = run(f"sbatch --parsable {' '.join(options)} --wrap {shlex.quote(script)}")
    job = out.strip().split(";")[0]
    if code != 0 or not job.isdigit():
        return Check("test job", False, out.strip()[-200:], "sbatch refused the job: see above")
    started, state = time.monotonic(), ""
    while time.monotonic() - started < wait_s:
        _, state = run(f"sacct -n -X -P -j {job} -o State")
        state = state.strip().split("\n")[0]
        if state and state not in ("PENDING", "RUNNING", "REQUEUED", "CONFIGURING"):
            break
        time.sleep(2)
    found = f"job {job}: {state or 'no accounting record'} in {time.monotonic() - started:.0f}s"
    fix = (
        "still queued: the partition is busy, try later"
        if state in ("PENDING", "")
        else "read the job's output in remote_base/saber-check-<job>.out"
    )
    return Check("test job", state == "COMPLETED", found, fix)


def check_profile(s: SlurmDispatch, wait_s: float = 180.0) -> list[Check]:
    """The SSH checks, then :func:`cluster_checks` over the one shared connection."""
    key = Path(s.ssh_key_path)
    if not key.is_file():
        return [
            Check(
                "SSH key",
                False,
                f"{key} is missing",
                "set ssh_key_path in the cluster profile (slurm/profiles/)",
            )
        ]
    from dagster_slurm.helpers.ssh_pool import SSHConnectionPool

    try:
        with SSHConnectionPool(s.ssh_resource()) as pool:

            def run(command: str) -> tuple[int, str]:
                try:
                    return 0, pool.run(command)
                except Exception as exc:
                    return 1, str(exc)

            code, out = run("hostname")
            login = Check(
                "SSH login",
                code == 0,
                f"{s.ssh_user}@{s.ssh_host}:{s.ssh_port} → {out.strip()}",
                "check ssh_host, ssh_port, ssh_user and the key",
            )
            return [login, *(cluster_checks(s, run, wait_s) if login.ok else [])]
    except Exception as exc:
        return [
            Check(
                "SSH login",
                False,
                f"{s.ssh_user}@{s.ssh_host}:{s.ssh_port}: {exc}",
                "check ssh_host, ssh_port, ssh_user, the key and known_hosts_file",
            )
        ]
