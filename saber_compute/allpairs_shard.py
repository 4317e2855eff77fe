"""The SLURM payload of one all-pairs shard (no Dagster)::

    python -m saber_compute.allpairs_shard --folder DIR --shard K [--workers N]

``DIR`` is a sharded pass's cluster folder (written by
:mod:`saber_slurm.allpairs_jobs`): ``arrays.npz`` (the documents' kernel arrays) and
``plan.json`` (``units``, ``band``, ``shards``: the unit indices of each shard, ``kernel``: the
digest of the kernel's code, ``prefix``: for a pass over appended rows, the rows passed
before). The job runs shard ``K``'s units on ``N`` threads
(default: the job's CPUs) into ``DIR/shard-K/`` — per-thread partials after every unit (a
killed or preempted job's successor resumes from them), ``progress.json``, and
``complete.npz`` with the shard's totals at the end. Exits with status 3 when the cluster's
kernel code differs from the one that planned the pass (its totals could differ).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import sys
import time
from pathlib import Path

from saber_compute.pass_checkpoint import PassFolder, load_arrays
from saber_core.discovery import pair_kernel, pass_totals
from saber_core.discovery.pass_totals import Band, run_pass

ARRAYS = "arrays.npz"
PLAN = "plan.json"
CODE_MISMATCH = 3


def kernel_digest() -> str:
    """The hash of the kernel's and the passes' source code (both ends of a sharded pass
    must run the same code)."""
    h = hashlib.sha256()
    for module in (pair_kernel, pass_totals):
        h.update(Path(module.__file__).read_bytes())
    return h.hexdigest()[:16]


def shard_folder(folder: Path, shard: int) -> PassFolder:
    """Where shard ``shard`` of the pass in ``folder`` keeps its partials and result."""
    return PassFolder(folder, "shard", str(shard))


def run_shard(folder: Path, shard: int, workers: int, checkpoint_s: float = 60.0) -> dict:
    """Run shard ``shard`` of the pass planned in ``folder`` (resuming from its partials);
    returns its stats."""
    plan = json.loads((folder / PLAN).read_text())
    if plan["kernel"] != kernel_digest():
        print(
            f"allpairs shard {shard}: the cluster's kernel code ({kernel_digest()}) differs from "
            f"the planner's ({plan['kernel']}); deploy the same checkout",
            file=sys.stderr,
        )
        raise SystemExit(CODE_MISMATCH)
    own = shard_folder(folder, shard)
    done = own.complete()
    if done is not None:
        return {"shard": shard, "units": len(done.units_done), "resumed": True}
    arrays = load_arrays(folder / ARRAYS)
    units = [tuple(u) for u in plan["units"]]
    band = Band(*plan["band"])
    started = time.monotonic()
    totals = own.resumed(arrays.n_docs, band)
    mine = plan["shards"][shard]
    progress_path = own.path / "progress.json"

    def progress(pairs_done: int, pairs_total: int) -> None:
        text = json.dumps({"pairs_done": pairs_done, "pairs_total": pairs_total})
        progress_path.write_text(text)

    own.path.mkdir(parents=True, exist_ok=True)
    totals.add(
        run_pass(
            arrays,
            units,
            band,
            only=mine,
            skip=totals.units_done,
            workers=workers,
            prefix=int(plan.get("prefix", 0)),
            after_unit=own.writer(checkpoint_s),
            progress=progress,
        )
    )
    if totals.units_done != set(mine):
        raise RuntimeError(f"shard {shard}: units {sorted(totals.units_done)} != plan {mine}")
    stats = {
        "shard": shard,
        "units": len(mine),
        "seconds": round(time.monotonic() - started, 3),
        "workers": workers,
        "node": os.uname().nodename,
        "slurm_job_id": os.environ.get("SLURM_JOB_ID", ""),
    }
    (own.path / "stats.json").write_text(json.dumps(stats))
    own.finish(totals, prune=False)
    return stats


def plan_shards(n_units: int, n_shards: int) -> list[list[int]]:
    """Unit indices per shard: contiguous runs of about equal length (units have about equal
    pairs, :func:`~saber_core.discovery.pass_totals.row_units`), none empty."""
    n_shards = max(1, min(n_shards, n_units))
    cuts = [round(k * n_units / n_shards) for k in range(n_shards + 1)]
    return [list(range(a, b)) for a, b in itertools.pairwise(cuts) if b > a]


def main(argv: list[str] | None = None) -> int:
    """Entry point (module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m saber_compute.allpairs_shard")
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--shard", type=int, required=True)
    cpus = int(os.environ.get("SLURM_CPUS_PER_TASK") or os.cpu_count() or 1)
    parser.add_argument("--workers", type=int, default=cpus)
    args = parser.parse_args(argv)
    print(json.dumps(run_shard(args.folder, args.shard, args.workers)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
