"""The all-pairs passes of the discovery assets (:mod:`saber_core.discovery.passes`): the band
sample, units, the pass folder (resume after a kill, reuse when done), threads on this machine,
progress in the step's log, and the figures of each pass (wall time, pairs per second, peak RSS)
for the asset's metadata."""

from __future__ import annotations

import os
import resource
import time

import dagster as dg
import numpy as np

from saber_compute.pass_checkpoint import PassFolder
from saber_core.discovery.all_pairs import PairScorer
from saber_core.discovery.pair_kernel import PairArrays
from saber_core.discovery.passes import (
    Band,
    PassTotals,
    pass_key,
    resolve_counts,
    row_units,
    run_pass,
    sample_band,
    sample_histograms,
    sample_rows,
)
from saber_resources.code_version import code_version
from saber_resources.config import PlanReads
from saber_resources.slurm import slurm_dispatch_from_build
from saber_resources.slurm.allpairs_jobs import AllPairsJobs, ShardJobSettings, sharded_pass

PAIRS_PER_UNIT = 100_000_000  # a few seconds of one core: the resume granularity


def unit_count(plan: PlanReads, n_docs: int) -> int:
    """Units of a pass over ``n_docs`` rows: ``allpairs_units``, else one per
    :data:`PAIRS_PER_UNIT` pairs and at least four per worker (how a pass is cut never changes
    its totals: not a recorded setting)."""
    units = plan.plan.allpairs.units
    if units > 0:
        return units
    pairs = n_docs * (n_docs + 1) // 2
    return max(4 * worker_count(plan), -(-pairs // PAIRS_PER_UNIT))


def worker_count(plan: PlanReads) -> int:
    """Threads of a local pass: ``allpairs_workers``, else every core."""
    return plan.plan.allpairs.workers or os.cpu_count() or 1


def _logger(context: dg.AssetExecutionContext, label: str):
    started, last = time.monotonic(), [0.0]

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - last[0] >= 30:
            last[0] = now
            rate = done / max(now - started, 1e-9)
            context.log.info(
                f"{label}: {done:,}/{total:,} pairs ({100 * done / max(total, 1):.1f}%), "
                f"{rate / 1e6:.1f}M pairs/s"
            )

    return report


def peak_rss_mb() -> int:
    """Peak resident memory of this process so far, MB."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def pass_folder(plan: PlanReads, scorer: PairScorer, band: Band, label: str) -> PassFolder:
    """The folder of the pass of ``scorer``'s documents under ``band`` (named by the arrays,
    units, band and the kernel's code: a changed kernel never reuses old totals)."""
    units = row_units(scorer.n_docs, unit_count(plan, scorer.n_docs))
    key = pass_key(scorer.arrays, units, band, code_version("saber_core.discovery.passes"))
    return PassFolder(plan.plan.paths.artifacts_dir / "allpairs", label, key)


def slurm_shards(
    context: dg.AssetExecutionContext,
    plan: PlanReads,
    arrays: PairArrays,
    units: list[tuple[int, int]],
    band: Band,
    folder: PassFolder,
    todo: list[int],
) -> dict:
    """Run the units ``todo`` as SLURM shard jobs (:mod:`saber_resources.slurm.allpairs_jobs`);
    their totals land in ``folder`` as partials. Returns the figures."""
    settings = slurm_dispatch_from_build(plan.plan)
    a = plan.plan.allpairs
    job = ShardJobSettings(a.shard_cpus, a.shard_partition, a.shard_mem, a.shard_time)
    work = sharded_pass(settings, units, band, todo, a.shards, folder.path.name)
    context.log.info(
        f"all-pairs: {len(todo)} units as {len(work.shards)} SLURM shards in {work.remote}"
    )
    runner = AllPairsJobs(settings, job, context.run.run_id, context.log.info)
    return runner.run(arrays, work, folder.path)


def all_pairs_pass(
    context: dg.AssetExecutionContext,
    plan: PlanReads,
    scorer: PairScorer,
    band: Band,
    label: str,
) -> tuple[PassTotals, dict]:
    """One pass over every pair of ``scorer``'s documents — reused when done, resumed when
    killed; returns its totals and figures."""
    started = time.monotonic()
    arrays = scorer.arrays
    units = row_units(arrays.n_docs, unit_count(plan, arrays.n_docs))
    folder = pass_folder(plan, scorer, band, label)
    figures = {"units": len(units), "folder": str(folder.path), "band": list(band.as_tuple())}
    done = folder.complete()
    if done is not None:
        context.log.info(f"{label}: reusing the finished pass in {folder.path}")
        return done, {**figures, "reused": True}
    totals = folder.resumed(arrays.n_docs, band)
    resumed = len(totals.units_done)
    if resumed:
        context.log.info(f"{label}: resuming, {resumed}/{len(units)} units done")
    todo = [u for u in range(len(units)) if u not in totals.units_done]
    if plan.plan.execution == "slurm" and todo:
        figures["slurm"] = slurm_shards(context, plan, arrays, units, band, folder, todo)
        totals = folder.resumed(arrays.n_docs, band)
    totals.add(
        run_pass(
            arrays,
            units,
            band,
            skip=totals.units_done,
            workers=worker_count(plan),
            after_unit=folder.writer(plan.plan.allpairs.checkpoint_seconds),
            progress=_logger(context, label),
        )
    )
    folder.finish(totals)
    seconds = time.monotonic() - started
    pairs = arrays.n_docs * (arrays.n_docs + 1) // 2
    return totals, {
        **figures,
        "seconds": round(seconds, 1),
        "unordered_pairs": pairs,
        "pairs_per_second": round(pairs / max(seconds, 1e-9)),
        "units_resumed": resumed,
        "workers": worker_count(plan),
        "peak_rss_mb": peak_rss_mb(),
    }


def banded_pass(
    context: dg.AssetExecutionContext,
    plan: PlanReads,
    scorer: PairScorer,
    quantile: float,
    label: str,
) -> tuple[PassTotals, dict]:
    """Pass 1: the band sample (seeded by the build's seed), then the pass that gives the exact
    histograms and, for thresholds inside the bands, the group counts."""
    started = time.monotonic()
    rows = sample_rows(scorer.n_docs, plan.seed)
    band = sample_band(sample_histograms(scorer.arrays, rows, worker_count(plan)), quantile)
    sample = {"rows": len(rows), "seconds": round(time.monotonic() - started, 1)}
    context.log.info(f"{label}: band sample of {len(rows)} rows: {band}")
    totals, figures = all_pairs_pass(context, plan, scorer, band, label)
    return totals, {**figures, "sample": sample}


def exact_counts(
    context: dg.AssetExecutionContext,
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
    context.log.warning(
        f"{label}: the thresholds {thresholds} lie outside the sampled bands "
        f"{totals.band if totals else None}: one more pass counts the groups exactly"
    )
    exact, figures = all_pairs_pass(context, plan, scorer, Band.exact(*thresholds), label)
    return exact.counts, {"second_pass": True, **figures}
