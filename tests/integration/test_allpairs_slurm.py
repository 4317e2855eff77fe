"""All-pairs passes as SLURM shard jobs on the dev cluster (`make slurm-up`): four shards add up
to the identical totals of a local pass, and the shards of a grown databank's new pairs to the
totals of a from-scratch pass; a finished plan is never submitted again; tasks that
keep failing fail the pass with their log; and a `method: sabermath` build under
`execution: slurm` gives the identical thresholds, counts, queries and pools to the local
build."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from pathlib import Path

import dagster as dg
import numpy as np
import pytest
from allpairs_corpus import prefix_scorers
from allpairs_corpus import scorer as make_scorer
from test_sabermath_build import SETTINGS, tag_corpus
from test_slurm import accounting_under, usable_dev_profile

from saber_cli.build import run_build
from saber_compute.pass_checkpoint import load_totals
from saber_config import load_build_config
from saber_core.discovery.pass_totals import Band, PassTotals, row_units, run_pass
from saber_slurm import SlurmDispatch
from saber_slurm import allpairs_jobs as jobs
from saber_store.database import DuckDBStore

pytestmark = pytest.mark.slurm

UNITS = 16
BAND = Band(0x3400, 300, 0x2E00, 300)  # wide bands: sure counts, band histograms and events


@pytest.fixture(scope="module")
def dev() -> dict:
    return usable_dev_profile()


@pytest.fixture
def remote_base(dev) -> str:
    base = f"{dev['remote_base']}/test-allpairs-{uuid.uuid4().hex[:8]}"
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _settings(dev: dict, remote_base: str, **overrides) -> SlurmDispatch:
    values = {**dev, "remote_base": remote_base, "poll_timeout": 900, "status_poll_seconds": 1.0}
    return SlurmDispatch(**{**values, **overrides})


def _accounted(remote_base: str, n: int, run_id: str) -> dict[str, str]:
    """The tasks under ``remote_base`` of run ``run_id`` (their folder ``…/jobs/<run_id>``)
    once ``n`` of them are in the accounting (slurmdbd records a finished task a moment after it
    left the queue); other runs' tasks in a content-addressed folder stay out."""
    deadline = time.monotonic() + 60.0
    while True:
        mine = {
            job: state
            for job, state, work in accounting_under(remote_base)
            if work.endswith(f"/jobs/{run_id}")
        }
        if len(mine) >= n or time.monotonic() > deadline:
            return mine
        time.sleep(1.0)


def _downloaded(folder: Path, n_docs: int) -> PassTotals:
    totals = PassTotals.empty(n_docs, BAND)
    for path in sorted(folder.glob("partial-slurm-*.npz")):
        totals.add(load_totals(path))
    return totals


def _assert_equal(a: PassTotals, b: PassTotals) -> None:
    for name in ("hist_b", "hist_j", "counts", "band_b", "band_j"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    events = [e[np.lexsort(e.T[::-1])] for e in (a.events, b.events)]
    np.testing.assert_array_equal(*events)
    assert a.units_done == b.units_done


def test_four_shards_add_up_to_the_local_pass_and_are_not_run_twice(dev, remote_base, tmp_path):
    scorer = make_scorer(n_docs=700)
    units = row_units(scorer.n_docs, UNITS)
    local = run_pass(scorer.arrays, units, BAND, workers=2)
    assert local.counts.sum() > 0 and local.band_b.sum() > 0 and len(local.events) > 0

    settings = _settings(dev, remote_base)
    work = jobs.sharded_pass(settings, units, BAND, list(range(len(units))), 4, "pass1-test")
    assert [len(s) for s in work.shards] == [4, 4, 4, 4]
    logs: list[str] = []
    runner = jobs.AllPairsJobs(settings, jobs.ShardJobSettings(cpus=1), "run-a", logs.append)
    figures = runner.run(scorer.arrays, work, tmp_path / "pass")
    _assert_equal(_downloaded(tmp_path / "pass", scorer.n_docs), local)
    (array_job,) = figures["job_ids"]
    tasks = _accounted(remote_base, 4, "run-a")
    assert tasks == {f"{array_job}_{k}": "COMPLETED" for k in range(4)}, tasks
    assert figures["shards"] == 4 and len(figures["shard_seconds"]) == 4

    # The same plan again (a rerun, another process): nothing is submitted, same totals.
    again = jobs.sharded_pass(settings, units, BAND, list(range(len(units))), 4, "pass1-test")
    jobs.AllPairsJobs(settings, jobs.ShardJobSettings(cpus=1), "run-b", logs.append).run(
        scorer.arrays, again, tmp_path / "again"
    )
    assert again.job_ids == [] and again.remote == work.remote
    _assert_equal(_downloaded(tmp_path / "again", scorer.n_docs), local)


def test_shards_of_a_grown_databank_add_its_new_pairs_to_the_old_pass(dev, remote_base, tmp_path):
    old, new = prefix_scorers([500, 640], n_docs=640)
    units = row_units(640, 8, 500)
    settings = _settings(dev, remote_base)
    work = jobs.sharded_pass(settings, units, BAND, list(range(8)), 3, "pass1-grow-test", 500)
    assert work.plan["prefix"] == 500
    runner = jobs.AllPairsJobs(settings, jobs.ShardJobSettings(cpus=1), "run-g", print)
    runner.run(new.arrays, work, tmp_path / "grow")
    grown = run_pass(old.arrays, row_units(500, 4), BAND).grown(640)
    grown.add(_downloaded(tmp_path / "grow", 640))
    scratch = run_pass(new.arrays, row_units(640, 8), BAND, workers=2)
    grown.units_done = scratch.units_done  # the units of different cuts; the totals below
    _assert_equal(grown, scratch)


def test_tasks_that_keep_failing_fail_the_pass_with_their_log(
    dev, remote_base, tmp_path, monkeypatch
):
    scorer = make_scorer(n_docs=200)
    units = row_units(scorer.n_docs, 4)
    monkeypatch.setattr(jobs, "kernel_digest", lambda: "0" * 16)  # the cluster's code differs
    settings = _settings(dev, remote_base, max_retries=1)
    work = jobs.sharded_pass(settings, units, BAND, [0, 1, 2, 3], 2, "pass1-failing")
    runner = jobs.AllPairsJobs(settings, jobs.ShardJobSettings(cpus=1), "run-f", print)
    with pytest.raises(jobs.AllPairsShardError) as failure:
        runner.run(scorer.arrays, work, tmp_path / "pass")
    message = str(failure.value)
    assert "failed 2 times" in message and "deploy the same checkout" in message
    assert len(work.job_ids) == 2
    states = set(_accounted(remote_base, 4, "run-f").values())
    assert states == {"FAILED"}, states


def _build(home: Path, corpus: Path, **extra):
    build = load_build_config(
        "tiny", home=str(home), corpus=str(corpus), allpairs_units=8, **SETTINGS, **extra
    )
    result = run_build(build, dagster_instance=dg.DagsterInstance.ephemeral())
    return build, DuckDBStore(database=str(build.database_path)), result.run_id


TABLES = {
    "pair_histograms": ["signal", "bits"],
    "target_eligibility": ["doc_id"],
    "queries": ["query_id"],
    "candidate_pools": ["query_id", "doc_id"],
}


def test_a_sabermath_build_on_slurm_equals_the_local_build(dev, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in tag_corpus(240)))
    _, local, _ = _build(tmp_path / "local", corpus)
    build, sharded, run_id = _build(
        tmp_path / "slurm",
        corpus,
        execution="slurm",
        slurm_profile="dev",
        allpairs_shards=4,
        allpairs_shard_cpus=1,
    )
    try:
        for table, keys in TABLES.items():
            mine, theirs = local.read_table(table), sharded.read_table(table)
            columns = [c for c in mine.columns if c not in ("created_at", "run_id")]
            assert mine.height > 0, table
            assert mine.select(columns).sort(keys).equals(theirs.select(columns).sort(keys)), table
        passes = sorted((build.artifacts_dir / "allpairs").glob("*"))
        assert passes, "the SLURM build made no pass folder"
        for folder in passes:  # every pass ran as 4 SLURM tasks of this run, all COMPLETED
            tasks = _accounted(f"{dev['remote_base']}/allpairs/{folder.name}", 4, run_id)
            assert len(tasks) == 4 and set(tasks.values()) == {"COMPLETED"}, (folder, tasks)
    finally:
        for folder in (build.artifacts_dir / "allpairs").glob("*"):
            shutil.rmtree(f"{dev['remote_base']}/allpairs/{folder.name}", ignore_errors=True)
