"""Files to and from the cluster: a copy when the cluster folder is mounted here
(``transfer: shared``), else over the process's SSH connection (upload through dagster-slurm's
pool, download with ``scp`` over the same multiplexed connection)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from dagster_slurm.helpers.ssh_pool import SSHConnectionPool

from saber_slurm.settings import SlurmDispatch


def put_file(settings: SlurmDispatch, pool: SSHConnectionPool, local: Path, remote: str) -> None:
    """Copy ``local`` to the cluster path ``remote``."""
    if settings.transfer == "shared":
        Path(remote).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, remote)
    else:
        pool.upload_file(str(local), remote)


def get_file(settings: SlurmDispatch, pool: SSHConnectionPool, remote: str, local: Path) -> None:
    """Copy the cluster path ``remote`` to ``local``; raises RuntimeError when scp fails."""
    if settings.transfer == "shared":
        shutil.copyfile(remote, local)
        return
    ssh = settings.ssh_resource()
    mux = (
        ssh.get_multiplexing_opts(create=False, control_path=pool.control_path)
        if pool.multiplexing_active
        else []
    )
    cmd = [
        "scp",
        *ssh.get_common_ssh_opts(),
        "-P",
        str(ssh.port),
        *mux,
        *ssh.get_key_auth_opts(),
        *ssh.get_proxy_command_opts(),
        f"{ssh.user}@{ssh.host}:{remote}",
        str(local),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"scp {remote} failed: {done.stderr.strip()}")
