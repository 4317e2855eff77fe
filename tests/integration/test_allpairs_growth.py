"""The discovery assets' passes over a grown databank (saber_allpairs/runner.py): a
finished pass whose rows are still the first rows is the base, only the new pairs are scored
(under its band, without a band sample), an interrupted grown pass resumes from its own folder,
the result equals a from-scratch pass bit for bit and replaces the base; a changed old row or
another band means a full pass, and the figures say why."""

from __future__ import annotations

import numpy as np
import pytest
from allpairs_corpus import prefix_scorers

from saber_allpairs.runner import (
    PassLog,
    all_pairs_pass,
    banded_pass,
    pass_code,
    passes_root,
    unit_count,
)
from saber_compute.pass_checkpoint import PassFolder, finished_passes
from saber_config import load_build_config
from saber_core.discovery.global_threshold import histogram_threshold
from saber_core.discovery.pass_totals import (
    Band,
    pass_key,
    resolve_counts,
    row_units,
    run_pass,
    unchanged_prefix,
)

OLD, NEW = 450, 600
FIELDS = ("hist_b", "hist_j", "counts", "band_b", "band_j")


@pytest.fixture
def plan(tmp_path):
    build = load_build_config(
        "tiny", home=str(tmp_path), allpairs_units=5, allpairs_workers=2,
        allpairs_checkpoint_seconds=0,
    )  # fmt: skip
    return build.reads()


@pytest.fixture(scope="module")
def scorers():
    return prefix_scorers([OLD, NEW])


def assert_same_totals(got, expected) -> None:
    assert got.band == expected.band
    for name in FIELDS:
        assert np.array_equal(getattr(got, name), getattr(expected, name)), name
    assert sorted(map(tuple, got.events.tolist())) == sorted(map(tuple, expected.events.tolist()))


def test_an_interrupted_grown_pass_resumes_and_equals_a_fresh_pass(plan, scorers):
    log = PassLog(print, print, "test-run")
    old, new = scorers
    first, figures = banded_pass(log, plan, old, 0.9, "pass1")
    assert figures["growth"] == {"mode": "full", "reason": "no earlier pass"}
    band = first.band
    # a grown pass killed after two of its units (each thread saves whole units)
    units = row_units(NEW, unit_count(plan, NEW, OLD), OLD)
    key = pass_key(new.arrays, units, band, pass_code(), OLD)
    work = PassFolder(passes_root(plan), "pass1-grow", key)
    run_pass(new.arrays, units, band, only=[1, 3], after_unit=work.writer(0.0), prefix=OLD)

    grown, figures = banded_pass(log, plan, new, 0.9, "pass1")
    growth = figures["growth"]
    assert growth["mode"] == "incremental" and growth["units_resumed"] == 2
    assert (growth["base_rows"], growth["new_rows"]) == (OLD, NEW - OLD)
    assert figures["sample"]["rows"] == 0 and grown.band == band
    assert figures["unordered_pairs"] == OLD * (NEW - OLD) + (NEW - OLD) * (NEW - OLD + 1) // 2
    assert_same_totals(grown, run_pass(new.arrays, row_units(NEW, 7), band))
    # the grown pass replaces its base and its work folder, and is the base of the next one
    passes = sorted(p.name for p in passes_root(plan).iterdir())
    assert len(passes) == 1 and passes[0] == figures["folder"].rsplit("/", 1)[-1]
    [(folder, record)] = finished_passes(passes_root(plan), "pass1")
    assert folder.complete() is not None
    assert len(record.digests) == NEW and record.band == band
    again, figures = banded_pass(log, plan, new, 0.9, "pass1")
    assert figures["growth"] == {"mode": "reused"}
    assert_same_totals(again, grown)
    # a fresh pass samples its own band: the same histograms, the same exact counts
    fresh = load_build_config("tiny", home=str(passes_root(plan).parents[2] / "fresh")).reads()
    scratch, _ = banded_pass(log, fresh, new, 0.9, "pass1")
    assert np.array_equal(scratch.hist_b, grown.hist_b)
    assert np.array_equal(scratch.hist_j, grown.hist_j)
    t = histogram_threshold(grown.hist_b, 0.9), histogram_threshold(grown.hist_j, 0.9)
    assert np.array_equal(resolve_counts(scratch, *t), resolve_counts(grown, *t))


def test_an_exact_pass_grows_only_under_the_same_thresholds(plan, scorers):
    log = PassLog(print, print, "test-run")
    old, new = scorers
    all_pairs_pass(log, plan, old, Band.exact(0.3, 0.2), "pass2")
    same, figures = all_pairs_pass(log, plan, new, Band.exact(0.3, 0.2), "pass2")
    assert figures["growth"]["mode"] == "incremental"
    assert_same_totals(same, run_pass(new.arrays, row_units(NEW, 3), Band.exact(0.3, 0.2)))
    other, figures = all_pairs_pass(log, plan, new, Band.exact(0.35, 0.2), "pass2")
    assert figures["growth"]["mode"] == "full"
    assert "the last pass counted under band" in figures["growth"]["reason"]
    assert_same_totals(other, run_pass(new.arrays, row_units(NEW, 3), Band.exact(0.35, 0.2)))


def test_an_edited_old_row_means_a_full_pass_that_names_it(plan, scorers):
    log = PassLog(print, print, "test-run")
    old, _ = scorers
    banded_pass(log, plan, old, 0.9, "pass1")
    # the last old row takes another row's idea (its tokens were all seen before: no other
    # row's token ids move)
    [edited] = prefix_scorers([NEW], copy_idea={OLD - 1: 3})
    assert unchanged_prefix(old.row_digests, edited.row_digests) == OLD - 1
    totals, figures = banded_pass(log, plan, edited, 0.9, "pass1")
    growth = figures["growth"]
    assert growth["mode"] == "full" and figures["sample"]["rows"] > 0
    assert (
        f"1 of the {OLD} rows of the last pass differ now in what their pairs are scored "
        f"from (first: row {OLD - 1})" in growth["reason"]
    )
    assert_same_totals(totals, run_pass(edited.arrays, row_units(NEW, 4), totals.band))
