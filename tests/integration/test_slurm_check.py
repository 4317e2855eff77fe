"""``saber slurm check``: every check of a cluster profile, with the setting that fixes a failure
(scripted cluster answers), and the whole check on the dev cluster (marked ``slurm``)."""

from __future__ import annotations

import pytest
from test_slurm import usable_dev_profile

from saber_slurm import SlurmDispatch
from saber_slurm.check import _gres_types, check_profile, cluster_checks


def scripted(answers: dict[str, tuple[int, str]]):
    """A login node answering by the first word of each command (``sinfo`` etc.)."""
    asked = []

    def run(command: str) -> tuple[int, str]:
        asked.append(command)
        for prefix, answer in answers.items():
            if command.startswith(prefix):
                return answer
        return 0, ""

    return run, asked


def test_a_missing_key_fails_first_naming_the_setting(tmp_path):
    (check,) = check_profile(SlurmDispatch(ssh_key_path=str(tmp_path / "nope")))
    assert not check.ok and check.name == "SSH key" and "ssh_key_path" in check.line()


def test_gres_types_of_sinfo():
    assert _gres_types("gpu:a100:4(S:0-1) gpu:h100:8,gpu:fake:1 (null)") == {"a100", "h100", "fake"}


def test_every_check_passes_on_a_good_cluster_and_the_job_must_complete(tmp_path):
    settings = SlurmDispatch(partition="gpu", gpu_type="a100", gpus_per_node=2)
    run, asked = scripted({
        "sinfo --version": (0, "slurm 23.11.4"),
        "sinfo -h": (0, "gpu up 4 gpu:a100:8(S:0-1)"),
        "test -f": (0, "3.11.7"),
        "sbatch": (0, "4242"),
        "sacct": (0, "COMPLETED"),
    })  # fmt: skip
    checks = cluster_checks(settings, run, wait_s=5)
    assert [c.name for c in checks] == [
        "SLURM commands", "partition", "GPU type", "payload environment", "work folder",
        "test job",
    ]  # fmt: skip
    assert all(c.ok for c in checks), [c.line() for c in checks]
    sbatch = next(a for a in asked if a.startswith("sbatch"))
    assert "--partition=gpu" in sbatch and "--gres=gpu:a100:2" in sbatch


@pytest.mark.parametrize(
    ("answers", "failing", "fix"),
    [
        ({"sinfo -h": (0, "")}, "partition", "slurm_partition"),
        ({"sinfo -h": (0, "gpu up 4 gpu:v100:8")}, "GPU type", "gpu_type"),
        ({"test -f": (1, "No module named saber_compute")}, "payload environment", "env_path"),
        ({"sacct": (0, "FAILED")}, "test job", "output"),
    ],
)
def test_a_failing_check_names_what_fixes_it(answers, failing, fix):
    settings = SlurmDispatch(partition="gpu", gpu_type="a100", gpus_per_node=1)
    base = {"sinfo --version": (0, "slurm 23"), "sinfo -h": (0, "gpu up 1 gpu:a100:1"),
            "sbatch": (0, "7"), "sacct": (0, "COMPLETED")}  # fmt: skip
    run, _ = scripted({**base, **answers})
    checks = {c.name: c for c in cluster_checks(settings, run, wait_s=5)}
    assert not checks[failing].ok and fix in checks[failing].line()


@pytest.mark.slurm
def test_the_dev_cluster_passes_every_check():
    settings = SlurmDispatch(**usable_dev_profile())
    checks = check_profile(settings, wait_s=120)
    assert [c.name for c in checks][-1] == "test job"
    assert all(c.ok for c in checks), [c.line() for c in checks]
