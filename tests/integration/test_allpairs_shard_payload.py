"""The all-pairs shard payload without a cluster: the plan cuts every unit once, contiguous
and balanced; the saved kernel arrays read back equal; shards run from a plan folder add up to
the local pass (also over the rows appended to a databank); a resumed shard skips the units of
its partials; a plan from other kernel code is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
from allpairs_corpus import prefix_scorers
from allpairs_corpus import scorer as make_scorer

from saber_compute.allpairs_shard import (
    ARRAYS,
    CODE_MISMATCH,
    PLAN,
    kernel_digest,
    plan_shards,
    run_shard,
    shard_folder,
)
from saber_compute.pass_checkpoint import load_arrays, save_arrays, save_totals
from saber_core.discovery.pass_totals import Band, PassTotals, row_units, run_pass

BAND = Band(0x3400, 300, 0x2E00, 300)


@pytest.mark.parametrize(("n_units", "n_shards"), [(10, 4), (16, 4), (3, 5), (1, 1), (97, 8)])
def test_plan_covers_every_unit_once_in_balanced_contiguous_runs(n_units, n_shards):
    shards = plan_shards(n_units, n_shards)
    assert [u for s in shards for u in s] == list(range(n_units))
    assert len(shards) == min(n_units, n_shards)
    sizes = [len(s) for s in shards]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


def test_arrays_round_trip(tmp_path):
    arrays = make_scorer(n_docs=120).arrays
    save_arrays(arrays, tmp_path / ARRAYS)
    back = load_arrays(tmp_path / ARRAYS)
    assert back.digest() == arrays.digest()
    assert (back.root_self, back.pooled, back.empty_one) == (
        arrays.root_self,
        arrays.pooled,
        arrays.empty_one,
    )


def _plan(tmp_path, arrays, units, shards, kernel=None, prefix=0):
    save_arrays(arrays, tmp_path / ARRAYS)
    plan = {
        "units": [list(u) for u in units],
        "band": list(BAND.as_tuple()),
        "shards": shards,
        "kernel": kernel or kernel_digest(),
        "prefix": prefix,
    }
    (tmp_path / PLAN).write_text(json.dumps(plan))


def test_shards_add_up_to_the_local_pass_and_resume_from_partials(tmp_path):
    scorer = make_scorer(n_docs=400)
    units = row_units(scorer.n_docs, 9)
    shards = plan_shards(len(units), 3)
    _plan(tmp_path, scorer.arrays, units, shards)
    # Shard 1 was killed after its first unit: that unit sits in a partial.
    first = run_pass(scorer.arrays, units, BAND, only=shards[1][:1])
    save_totals(first, shard_folder(tmp_path, 1).path / "partial-killed.npz")
    stats = [run_shard(tmp_path, k, workers=2, checkpoint_s=0.0) for k in range(3)]
    assert [s["units"] for s in stats] == [len(s) for s in shards]
    total = PassTotals.empty(scorer.n_docs, BAND)
    for k in range(3):
        folder = shard_folder(tmp_path, k)
        assert not list(folder.path.glob("partial-*.npz"))
        total.add(folder.complete())
    local = run_pass(scorer.arrays, units, BAND)
    for name in ("hist_b", "hist_j", "counts", "band_b", "band_j"):
        np.testing.assert_array_equal(getattr(total, name), getattr(local, name), err_msg=name)
    assert total.units_done == set(range(len(units)))
    assert run_shard(tmp_path, 0, workers=1)["resumed"] is True  # done: not run again


def test_shards_of_a_grown_databank_add_up_to_its_new_pairs(tmp_path):
    old, new = prefix_scorers([300, 420])
    units = row_units(420, 6, 300)
    shards = plan_shards(len(units), 3)
    _plan(tmp_path, new.arrays, units, shards, prefix=300)
    for k in range(3):
        run_shard(tmp_path, k, workers=1, checkpoint_s=0.0)
    total = run_pass(old.arrays, row_units(300, 2), BAND).grown(420)
    for k in range(3):
        total.add(shard_folder(tmp_path, k).complete())
    scratch = run_pass(new.arrays, row_units(420, 5), BAND)
    for name in ("hist_b", "hist_j", "counts", "band_b", "band_j"):
        np.testing.assert_array_equal(getattr(total, name), getattr(scratch, name), err_msg=name)


def test_a_plan_from_other_kernel_code_is_refused(tmp_path, capsys):
    scorer = make_scorer(n_docs=50)
    units = row_units(scorer.n_docs, 2)
    _plan(tmp_path, scorer.arrays, units, [[0], [1]], kernel="0" * 16)
    with pytest.raises(SystemExit) as stop:
        run_shard(tmp_path, 0, workers=1)
    assert stop.value.code == CODE_MISMATCH
    assert "deploy the same checkout" in capsys.readouterr().err


def test_shard_script_is_a_cpu_job_in_the_payload_environment_named_by_the_run():
    from saber_slurm import SlurmDispatch
    from saber_slurm.allpairs_jobs import ShardJobSettings, shard_script, sharded_pass

    settings = SlurmDispatch(
        remote_base="/scratch/saber",
        env_path="/opt/saber-env",
        partition="gpu",
        mem="64G",
        time_limit="02:00:00",
        gpus_per_node=4,
        payload_env={"PYTHONPATH": "/src/saber"},
    )
    units = row_units(1000, 8)
    work = sharded_pass(settings, units, BAND, list(range(8)), 3, "pass1-abc")
    assert [u for s in work.shards for u in s] == list(range(8)) and len(work.shards) == 3
    script = shard_script(settings, ShardJobSettings(cpus=8, partition="cpu"), work, "run-7")
    lines = script.splitlines()
    assert "#SBATCH --cpus-per-task=8" in lines and "#SBATCH --partition=cpu" in lines
    assert "#SBATCH --mem=64G" in lines and "#SBATCH --time=02:00:00" in lines
    assert not any("--gres" in line for line in lines)  # no GPU for the pass
    assert f"#SBATCH --chdir={work.remote}/jobs/run-7" in lines  # stop_run finds the run's tasks
    assert work.remote.startswith("/scratch/saber/allpairs/pass1-abc/shards-")
    assert "export PYTHONPATH=/src/saber" in lines
    python = "exec /opt/saber-env/env/bin/python -u -m saber_compute.allpairs_shard"
    assert lines[-1].startswith(python)
    assert '--shard "$SLURM_ARRAY_TASK_ID" --workers 8' in lines[-1]
