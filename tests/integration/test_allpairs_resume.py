"""A pass killed with SIGKILL in the middle resumes from its partials (whole units) and gives
the identical totals to an uninterrupted pass; a finished pass is reused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
from allpairs_corpus import scorer as make_scorer

from saber_compute.pass_checkpoint import PassFolder
from saber_core.discovery.pass_totals import Band, pass_key, resolve_counts, row_units, run_pass

UNITS = 60
BAND = Band(0x3400, 300, 0x2E00, 300)  # values 0.25… and 0.094…: wide, many events


def folder_of(root: Path, scorer) -> PassFolder:
    units = row_units(scorer.n_docs, UNITS)
    return PassFolder(root, "pass1", pass_key(scorer.arrays, units, BAND))


KILLED_RUN = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {here!r})
    from allpairs_corpus import scorer as make_scorer
    from test_allpairs_resume import BAND, UNITS, folder_of
    from saber_core.discovery.pass_totals import row_units, run_pass

    scorer = make_scorer()
    folder = folder_of({root!r}, scorer)
    save = folder.writer(0.0)
    saved = []

    def after_unit(totals):
        save(totals)
        saved.append(1)
        if len(saved) == 25:  # the other thread is in the middle of a unit
            os.kill(os.getpid(), signal.SIGKILL)

    run_pass(scorer.arrays, row_units(scorer.n_docs, UNITS), BAND, workers=2,
             after_unit=after_unit)
    """
)


def test_sigkill_then_resume_gives_the_identical_totals(tmp_path):
    here = str(Path(__file__).parent)
    script = KILLED_RUN.format(here=here, root=str(tmp_path))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.getcwd()])}
    killed = subprocess.run([sys.executable, "-c", script], env=env, timeout=600)
    assert killed.returncode == -signal.SIGKILL

    scorer = make_scorer()
    folder = folder_of(tmp_path, scorer)
    assert folder.complete() is None
    resumed = folder.resumed(scorer.n_docs, BAND)
    assert 20 <= len(resumed.units_done) < UNITS  # both threads' finished units, no more
    units = row_units(scorer.n_docs, UNITS)
    rest = run_pass(scorer.arrays, units, BAND, skip=resumed.units_done, workers=2)
    assert not (rest.units_done & resumed.units_done)
    resumed.add(rest)
    folder.finish(resumed)

    whole = run_pass(scorer.arrays, units, BAND)
    for name in ("hist_b", "hist_j", "counts", "band_b", "band_j"):
        assert np.array_equal(getattr(resumed, name), getattr(whole, name)), name
    t = (0.26, 0.1)  # inside the band
    counts = resolve_counts(whole, *t)
    assert counts is not None and counts.sum() > 0
    assert np.array_equal(resolve_counts(resumed, *t), counts)
    assert len(whole.events) > 0
    again = folder_of(tmp_path, scorer).complete()  # reused as it is
    assert again.units_done == set(range(len(units)))
    assert np.array_equal(again.counts, whole.counts)
    assert not list(folder.path.glob("partial-*"))
