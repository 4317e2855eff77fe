"""The all-pairs pass, run for the discovery assets without Dagster
(:mod:`saber_core.discovery.pass_totals` computes it): the band sample, units, the pass folder
(resume after a kill, reuse when done), threads on this machine or SLURM shards, progress through
a :class:`PassLog`, and the figures of each pass (wall time, pairs per second, peak RSS) for the
asset's metadata.

A grown databank pays for its new pairs only: when a finished pass of the same label covered
rows that are still the first rows and still score alike (row digests), the pass adds a pass
over the new pairs to its totals, under its band (:func:`growth_base`, :func:`grown_pass`);
otherwise the figures say why the pass had to be full."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from saber_compute.pass_checkpoint import PassFolder, RowsRecord, finished_passes
from saber_config import PlanReads
from saber_core.discovery.pair_kernel import PairArrays
from saber_core.discovery.pair_scorer import PairScorer
from saber_core.discovery.pass_totals import (
    Band,
    PassTotals,
    pass_key,
    resolve_counts,
    row_units,
    run_pass,
    sample_band,
    sample_histograms,
    sample_rows,
    unchanged_prefix,
    unit_pairs,
)
from saber_lineage.code_version import code_version
from saber_slurm import slurm_dispatch_from_build
from saber_slurm.allpairs_jobs import AllPairsJobs, ShardJobSettings, sharded_pass

PAIRS_PER_UNIT = 100_000_000  # a few seconds of one core: the resume granularity


@dataclass(frozen=True)
class PassLog:
    """Where a pass reports: progress lines (``info``), a costlier path taken (``warning``),
    and the run that owns its SLURM shard jobs (``run_id``)."""

    info: Callable[[str], None]
    warning: Callable[[str], None]
    run_id: str


def unit_count(plan: PlanReads, n_docs: int, prefix: int = 0) -> int:
    """Units of a pass over ``n_docs`` rows (the rows after ``prefix``): ``allpairs_units``,
    else one per :data:`PAIRS_PER_UNIT` pairs and at least four per worker (how a pass is cut
    never changes its totals: not a recorded setting)."""
    units = plan.plan.allpairs.units
    if units > 0:
        return units
    pairs = unit_pairs(n_docs, (prefix, n_docs), prefix)
    return max(4 * worker_count(plan), -(-pairs // PAIRS_PER_UNIT))


def worker_count(plan: PlanReads) -> int:
    """Threads of a local pass: ``allpairs_workers``, else every core."""
    return plan.plan.allpairs.workers or os.cpu_count() or 1


def _logger(log: PassLog, label: str):
    started, last = time.monotonic(), [0.0]

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - last[0] >= 30:
            last[0] = now
            rate = done / max(now - started, 1e-9)
            log.info(
                f"{label}: {done:,}/{total:,} pairs ({100 * done / max(total, 1):.1f}%), "
                f"{rate / 1e6:.1f}M pairs/s"
            )

    return report


def peak_rss_mb() -> int:
    """Peak resident memory of this process so far, MB."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def pass_code() -> str:
    """The version of the code that computes a pass's totals."""
    return code_version("saber_core.discovery.pass_totals")


def passes_root(plan: PlanReads) -> Path:
    """Where the passes of the build keep their folders."""
    return plan.plan.paths.artifacts_dir / "allpairs"


def pass_folder(plan: PlanReads, scorer: PairScorer, band: Band, label: str) -> PassFolder:
    """The folder of the pass of ``scorer``'s documents under ``band`` (named by the arrays,
    units, band and the kernel's code: a changed kernel never reuses old totals)."""
    units = row_units(scorer.n_docs, unit_count(plan, scorer.n_docs))
    key = pass_key(scorer.arrays, units, band, pass_code())
    return PassFolder(passes_root(plan), label, key)


@dataclass(frozen=True)
class Growth:
    """The finished pass a pass over a grown databank adds to (its folder and record), or —
    ``base`` None — why there is none."""

    base: PassFolder | None
    record: RowsRecord | None
    reason: str = ""

    @property
    def rows(self) -> int:
        """Rows the base pass covered."""
        return len(self.record.digests) if self.record is not None else 0


IC_NOTE = {
    "corpus_frequency": "ic: corpus_frequency counts every document's tags, so new documents "
    "change every node's IC and every BMA: only a full pass is exact",
    "seco": "ic: seco keeps the old pairs only when the new documents add no node to the tag "
    "tree (a new node changes every node's IC)",
}


def _mismatch(plan: PlanReads, record: RowsRecord, digests: np.ndarray, band: Band | None) -> str:
    """Why the finished pass of ``record`` is no base for rows ``digests``."""
    n_old, n = len(record.digests), len(digests)
    if record.code != pass_code():
        return "the code of the passes changed since the last pass"
    if band is not None and record.band != band:
        return f"the last pass counted under band {record.band}, this one needs {band}"
    if n_old > n:
        return f"the last pass covered {n_old} rows, the databank now has {n} (rows removed)"
    first = unchanged_prefix(record.digests, digests)
    changed = int((record.digests != digests[:n_old]).any(axis=1).sum())
    note = IC_NOTE.get(plan.plan.construction.ic, "")
    return (
        f"{changed} of the {n_old} rows of the last pass differ now in what their pairs are "
        f"scored from (first: row {first}){'; ' + note if note else ''}"
    )


def growth_base(
    plan: PlanReads, scorer: PairScorer, label: str, band: Band | None = None
) -> Growth:
    """The finished pass of ``label`` (under ``band``; None: any band) with the most rows whose
    rows are the first rows of ``scorer``'s databank and score alike (equal row digests, same
    code), or why none is."""
    digests, code = scorer.row_digests, pass_code()
    found = finished_passes(passes_root(plan), label)
    usable = [
        (folder, record)
        for folder, record in found
        if record.code == code
        and (band is None or record.band == band)
        and len(record.digests) <= len(digests)
        and unchanged_prefix(record.digests, digests) == len(record.digests)
    ]
    if usable:
        return Growth(*max(usable, key=lambda f: len(f[1].digests)))
    reason = _mismatch(plan, found[0][1], digests, band) if found else "no earlier pass"
    return Growth(None, None, reason)


def grown_pass(
    log: PassLog, plan: PlanReads, scorer: PairScorer, growth: Growth,
    label: str,
) -> tuple[PassTotals, dict]:  # fmt: skip
    """The totals of ``scorer``'s databank: the base pass's, re-indexed, plus a pass over the
    pairs of the rows appended since (every old row and every later new row) under the base's
    band, resumable in its own folder ``<label>-grow-<key>``."""
    arrays, n_old, band = scorer.arrays, growth.rows, growth.record.band
    n = arrays.n_docs
    units = row_units(n, unit_count(plan, n, n_old), n_old)
    key = pass_key(arrays, units, band, pass_code(), n_old)
    work = PassWork(arrays, units, band, PassFolder(passes_root(plan), f"{label}-grow", key), n_old)
    totals = work.resumed()
    resumed = len(totals.units_done)
    log.info(
        f"{label}: {n - n_old} rows appended to the {n_old} of the finished pass "
        f"{growth.base.path.name}: scoring their pairs only ({len(work.todo(totals))} units to do)"
    )
    totals, figures = score_units(log, plan, work, totals, f"{label} (new pairs)")
    whole = growth.base.complete().grown(n)
    whole.add(totals)
    pairs = unit_pairs(n, (n_old, n), n_old)
    growth_figures = {"mode": "incremental", "base_rows": n_old, "new_rows": n - n_old}
    return whole, {
        **figures,
        "growth": {**growth_figures, "base": growth.base.path.name, "units_resumed": resumed},
        "unordered_pairs": pairs,
    }


@dataclass(frozen=True)
class PassWork:
    """One pass to score: the ``arrays``, their row ``units`` (over the rows after ``prefix``:
    a grown pass), the ``band`` counted under and the ``folder`` that checkpoints each unit."""

    arrays: PairArrays
    units: list[tuple[int, int]]
    band: Band
    folder: PassFolder
    prefix: int = 0

    def resumed(self) -> PassTotals:
        """The totals of the units checkpointed so far."""
        return self.folder.resumed(self.arrays.n_docs, self.band)

    def todo(self, totals: PassTotals) -> list[int]:
        """The units ``totals`` lacks."""
        return [u for u in range(len(self.units)) if u not in totals.units_done]


def score_units(
    log: PassLog, plan: PlanReads, work: PassWork, totals: PassTotals, label: str
) -> tuple[PassTotals, dict]:
    """The units of ``work`` that ``totals`` (its pass so far) lacks, added to it: on SLURM
    shards when the build runs there, then here whatever they left (every unit checkpointed to
    the pass folder); the totals and the SLURM figures."""
    figures: dict = {}
    todo = work.todo(totals)
    if plan.plan.execution == "slurm" and todo:
        figures["slurm"] = slurm_shards(log, plan, work, todo)
        totals = work.resumed()
    totals.add(
        run_pass(
            work.arrays,
            work.units,
            work.band,
            skip=totals.units_done,
            workers=worker_count(plan),
            after_unit=work.folder.writer(plan.plan.allpairs.checkpoint_seconds),
            progress=_logger(log, label),
            prefix=work.prefix,
        )
    )
    return totals, figures


def slurm_shards(log: PassLog, plan: PlanReads, work: PassWork, todo: list[int]) -> dict:
    """Run the units ``todo`` of ``work`` as SLURM shard jobs (:mod:`saber_slurm.allpairs_jobs`);
    their totals land in the pass folder as partials. Returns the figures."""
    settings = slurm_dispatch_from_build(plan.plan)
    a = plan.plan.allpairs
    job = ShardJobSettings(a.shard_cpus, a.shard_partition, a.shard_mem, a.shard_time)
    folder = work.folder.path
    shards = sharded_pass(settings, work.units, work.band, todo, a.shards, folder.name, work.prefix)
    log.info(
        f"all-pairs: {len(todo)} units as {len(shards.shards)} SLURM shards in {shards.remote}"
    )
    runner = AllPairsJobs(settings, job, log.run_id, log.info)
    return runner.run(work.arrays, shards, folder)


def all_pairs_pass(
    log: PassLog,
    plan: PlanReads,
    scorer: PairScorer,
    band: Band,
    label: str,
    growth: Growth | None = None,
) -> tuple[PassTotals, dict]:
    """One pass over every pair of ``scorer``'s documents — reused when done, grown from a
    finished pass of fewer rows (``growth``, default :func:`growth_base` under ``band``),
    resumed when killed; returns its totals and figures."""
    started = time.monotonic()
    arrays = scorer.arrays
    units = row_units(arrays.n_docs, unit_count(plan, arrays.n_docs))
    folder = pass_folder(plan, scorer, band, label)
    figures = {"units": len(units), "folder": str(folder.path), "band": list(band.as_tuple())}
    done = folder.complete()
    if done is not None:
        log.info(f"{label}: reusing the finished pass in {folder.path}")
        return done, {**figures, "reused": True, "growth": {"mode": "reused"}}
    growth = growth or growth_base(plan, scorer, label, band)
    if growth.base is not None:
        totals, more = grown_pass(log, plan, scorer, growth, label)
    else:
        log.info(f"{label}: a full pass ({growth.reason})")
        totals, more = full_pass(log, plan, scorer, band, folder, units)
        more["growth"] = {"mode": "full", "reason": growth.reason}
    totals.units_done = set(range(len(units)))
    folder.finish(totals, rows=RowsRecord(scorer.row_digests, band, pass_code()))
    seconds = time.monotonic() - started
    return totals, {
        **figures,
        **more,
        "seconds": round(seconds, 1),
        "pairs_per_second": round(more["unordered_pairs"] / max(seconds, 1e-9)),
        "workers": worker_count(plan),
        "peak_rss_mb": peak_rss_mb(),
    }


def full_pass(
    log: PassLog,
    plan: PlanReads,
    scorer: PairScorer,
    band: Band,
    folder: PassFolder,
    units: list[tuple[int, int]],
) -> tuple[PassTotals, dict]:
    """Every unit of the pass in ``folder`` not done yet (on SLURM shards or here)."""
    work = PassWork(scorer.arrays, units, band, folder)
    totals = work.resumed()
    resumed = len(totals.units_done)
    if resumed:
        log.info(f"{folder.label}: resuming, {resumed}/{len(units)} units done")
    totals, figures = score_units(log, plan, work, totals, folder.label)
    n = scorer.n_docs
    return totals, {**figures, "unordered_pairs": n * (n + 1) // 2, "units_resumed": resumed}


def banded_pass(
    log: PassLog,
    plan: PlanReads,
    scorer: PairScorer,
    quantile: float,
    label: str,
) -> tuple[PassTotals, dict]:
    """Pass 1: the band sample (seeded by the build's seed), then the pass that gives the exact
    histograms and, for thresholds inside the bands, the group counts. A databank grown from
    one with a finished pass takes that pass's band (no sample) and pays for its new pairs."""
    growth = growth_base(plan, scorer, label)
    if growth.base is not None:
        band = growth.record.band
        totals, figures = all_pairs_pass(log, plan, scorer, band, label, growth)
        return totals, {**figures, "sample": {"rows": 0, "band_of": growth.base.path.name}}
    started = time.monotonic()
    rows = sample_rows(scorer.n_docs, plan.seed)
    band = sample_band(sample_histograms(scorer.arrays, rows, worker_count(plan)), quantile)
    sample = {"rows": len(rows), "seconds": round(time.monotonic() - started, 1)}
    log.info(f"{label}: band sample of {len(rows)} rows: {band}")
    totals, figures = all_pairs_pass(log, plan, scorer, band, label, growth)
    return totals, {**figures, "sample": sample}


def exact_counts(
    log: PassLog,
    plan: PlanReads,
    scorer: PairScorer,
    totals: PassTotals | None,
    thresholds: tuple[float, float],
    label: str,
) -> tuple[np.ndarray, dict]:
    """The group counts under ``thresholds``: read off the banded pass's ``totals``, or — a
    threshold outside its band, or no totals — by an exact second pass."""
    counts = resolve_counts(totals, *thresholds) if totals is not None else None
    if counts is not None:
        return counts, {"second_pass": False}
    log.warning(
        f"{label}: the thresholds {thresholds} lie outside the sampled bands "
        f"{totals.band if totals else None}: one more pass counts the groups exactly"
    )
    exact, figures = all_pairs_pass(log, plan, scorer, Band.exact(*thresholds), label)
    return exact.counts, {"second_pass": True, **figures}
