"""The all-pairs passes of the discovery assets: units, checkpoints (resume after a kill),
threads on this machine, progress in the step's log, and the figures of the pass (wall time,
pairs per second, peak RSS) for the asset's metadata."""

from __future__ import annotations

import os
import resource
import time

import dagster as dg

from saber_core.sabermath.allpairs import PairScorer, PassTotals, pass_key, row_units, run_pass
from saber_resources.config import BuildConfig
from saber_resources.pass_checkpoint import PassCheckpoint

PAIRS_PER_UNIT = 250_000_000  # ~10 s of one core: the commit (and resume) granularity


def unit_count(build: BuildConfig, n_docs: int) -> int:
    """Units of a pass over ``n_docs`` rows: ``allpairs_units``, else one per
    :data:`PAIRS_PER_UNIT` pairs and at least four per worker."""
    if build.allpairs.units > 0:
        return build.allpairs.units
    pairs = n_docs * (n_docs + 1) // 2
    return max(4 * worker_count(build), -(-pairs // PAIRS_PER_UNIT))


def worker_count(build: BuildConfig) -> int:
    """Threads of a local pass: ``allpairs_workers``, else every core."""
    return build.allpairs.workers or os.cpu_count() or 1


def _logger(context: dg.AssetExecutionContext, label: str):
    started, last = time.monotonic(), [0.0]

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - last[0] >= 30:
            last[0] = now
            rate = done / max(now - started, 1e-9)
            context.log.info(
                f"{label}: {done:,}/{total:,} pairs ({100 * done / total:.1f}%), "
                f"{rate / 1e6:.1f}M pairs/s"
            )

    return report


def all_pairs_pass(
    context: dg.AssetExecutionContext,
    build: BuildConfig,
    scorer: PairScorer,
    thresholds: tuple[int, int] | None,
    label: str,
) -> tuple[PassTotals, dict]:
    """Run (or resume, or reuse) one pass over every pair of ``scorer``'s documents; returns its
    totals and figures."""
    started = time.monotonic()
    arrays = scorer.arrays
    units = row_units(arrays.n_docs, unit_count(build, arrays.n_docs))
    checkpoint = PassCheckpoint(
        build.artifacts_dir / "allpairs", label, pass_key(arrays, units, thresholds)
    )
    resume = checkpoint.load()
    resumed = len(resume.units_done) if resume else 0
    if resumed:
        context.log.info(f"{label}: resuming from {checkpoint.path} ({resumed}/{len(units)} units)")
    totals = run_pass(
        arrays,
        units,
        thresholds,
        workers=worker_count(build),
        resume=resume,
        commit=checkpoint.save,
        progress=_logger(context, label),
    )
    seconds = time.monotonic() - started
    pairs = arrays.n_docs * (arrays.n_docs + 1) // 2
    figures = {
        "seconds": round(seconds, 1),
        "unordered_pairs": pairs,
        "pairs_per_second": round(pairs / max(seconds, 1e-9)),
        "units": len(units),
        "units_resumed": resumed,
        "workers": worker_count(build),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "checkpoint": str(checkpoint.path),
    }
    return totals, figures
