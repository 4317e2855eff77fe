"""Checkpoints of the all-pairs passes: the running totals (histograms, group counts, units done)
written after every finished unit, atomically (a temporary file renamed over the last one), so a
killed pass resumes from its last finished unit and adds up to the identical totals."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from saber_core.sabermath.allpairs import PassTotals


class PassCheckpoint:
    """The checkpoint of one pass: ``<folder>/<label>-<key>.npz``; ``key`` is the pass's
    :func:`~saber_core.sabermath.allpairs.pass_key` (other inputs: another file)."""

    def __init__(self, folder: Path, label: str, key: str) -> None:
        self.folder = Path(folder)
        self.label = label
        self.path = self.folder / f"{label}-{key}.npz"

    def load(self) -> PassTotals | None:
        """The saved totals, or None when there are none for this key."""
        if not self.path.exists():
            return None
        with np.load(self.path) as saved:
            counts = saved["counts"] if "counts" in saved.files else None
            return PassTotals(
                hist_b=saved["hist_b"],
                hist_j=saved["hist_j"],
                counts=counts,
                units_done={int(u) for u in saved["units_done"]},
            )

    def save(self, totals: PassTotals) -> None:
        """Replace the checkpoint with ``totals``; older checkpoints of the label go."""
        self.folder.mkdir(parents=True, exist_ok=True)
        arrays = {
            "hist_b": totals.hist_b,
            "hist_j": totals.hist_j,
            "units_done": np.array(sorted(totals.units_done), dtype=np.int64),
        }
        if totals.counts is not None:
            arrays["counts"] = totals.counts
        partial = self.path.with_suffix(f".{os.getpid()}.partial.npz")
        np.savez(partial, **arrays)
        os.replace(partial, self.path)
        for other in self.folder.glob(f"{self.label}-*.npz"):
            if other != self.path and ".partial" not in other.name:
                other.unlink(missing_ok=True)
