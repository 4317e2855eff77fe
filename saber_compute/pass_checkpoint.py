"""Where the all-pairs passes keep their work: ``<root>/<label>-<key>/`` (``key``: the pass's
:func:`~saber_core.discovery.pass_totals.pass_key`), holding

* ``partial-<id>.npz`` — the totals of whole units of one worker thread (or one SLURM shard),
  rewritten atomically (a temporary file renamed over it) at most every ``interval`` seconds;
* ``complete.npz`` — the totals of every unit, once the pass is done;
* ``rows.npz`` — beside it, the row digests of the documents it covered, its band and the
  version of the code that computed it: what a later pass over a grown databank needs to add
  to these totals (:func:`finished_passes`).

A killed pass resumes from the sum of the partials (their units are skipped) and adds up to
the identical totals; shards are partials written by other machines into the same folder."""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from saber_core.discovery.pair_kernel import PairArrays
from saber_core.discovery.pass_totals import Band, PassTotals

COMPLETE = "complete.npz"
ROWS = "rows.npz"


def save_totals(totals: PassTotals, path: Path) -> None:
    """Write ``totals`` to ``path`` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp.npz")
    np.savez(
        partial,
        band=np.array(totals.band.as_tuple(), dtype=np.int64),
        hist_b=totals.hist_b,
        hist_j=totals.hist_j,
        counts=totals.counts,
        band_b=totals.band_b,
        band_j=totals.band_j,
        events=totals.events,
        units_done=np.array(sorted(totals.units_done), dtype=np.int64),
    )
    os.replace(partial, path)


def load_totals(path: Path) -> PassTotals:
    """The totals saved at ``path``."""
    with np.load(path) as saved:
        return PassTotals(
            band=Band(*(int(v) for v in saved["band"])),
            hist_b=saved["hist_b"],
            hist_j=saved["hist_j"],
            counts=saved["counts"],
            band_b=saved["band_b"],
            band_j=saved["band_j"],
            events=saved["events"],
            units_done={int(u) for u in saved["units_done"]},
        )


class PassFolder:
    """The folder of one pass (module docstring)."""

    def __init__(self, root: Path, label: str, key: str) -> None:
        self.root = Path(root)
        self.label = label
        self.path = self.root / f"{label}-{key}"

    @property
    def complete_path(self) -> Path:
        """The totals of the finished pass."""
        return self.path / COMPLETE

    def complete(self) -> PassTotals | None:
        """The finished pass's totals, if it finished."""
        return load_totals(self.complete_path) if self.complete_path.exists() else None

    def resumed(self, n_docs: int, band: Band) -> PassTotals:
        """The sum of the partials (whole units; empty totals when there are none)."""
        totals = PassTotals.empty(n_docs, band)
        for path in sorted(self.path.glob("partial-*.npz")):
            totals.add(load_totals(path))
        return totals

    def writer(self, interval: float) -> PartialWriter:
        """An ``after_unit`` callback saving each thread's totals to its own partial."""
        return PartialWriter(self.path, interval)

    def finish(
        self, totals: PassTotals, prune: bool = True, rows: RowsRecord | None = None
    ) -> None:
        """Save the complete totals (and ``rows``, what they cover), drop the partials and
        (``prune``) the other passes of the label."""
        if rows is not None:
            rows.save(self.path / ROWS)
        save_totals(totals, self.complete_path)
        for path in self.path.glob("partial-*.npz"):
            path.unlink(missing_ok=True)
        if not prune:
            return
        for other in self.root.glob(f"{self.label}-*"):
            if other != self.path and other.is_dir():
                shutil.rmtree(other, ignore_errors=True)

    def rows(self) -> RowsRecord | None:
        """What the finished pass covers, if it finished and recorded it."""
        path = self.path / ROWS
        return RowsRecord.load(path) if path.exists() and self.complete_path.exists() else None


@dataclass(frozen=True)
class RowsRecord:
    """The rows a finished pass covered (``digests``: :meth:`PairArrays.row_digests`), its
    band and the version of the code that computed its totals."""

    digests: np.ndarray
    band: Band
    code: str

    def save(self, path: Path) -> None:
        """Write the record to ``path`` atomically."""
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp.npz")
        band = np.array(self.band.as_tuple(), dtype=np.int64)
        np.savez(partial, digests=self.digests, band=band, code=np.array(self.code))
        os.replace(partial, path)

    @classmethod
    def load(cls, path: Path) -> RowsRecord:
        """The record saved at ``path``."""
        with np.load(path) as saved:
            band = Band(*(int(v) for v in saved["band"]))
            return cls(saved["digests"], band, str(saved["code"]))


def finished_passes(root: Path, label: str) -> list[tuple[PassFolder, RowsRecord]]:
    """The finished passes of ``label`` under ``root`` that recorded their rows, newest first."""
    found = []
    for path in Path(root).glob(f"{label}-*"):
        folder = PassFolder(root, label, path.name[len(label) + 1 :])
        record = folder.rows() if path.is_dir() else None
        if record is not None:
            found.append((path.stat().st_mtime, folder, record))
    return [(folder, record) for _, folder, record in sorted(found, key=lambda f: -f[0])]


class PartialWriter:
    """Saves the totals of each worker thread to ``partial-<id>.npz`` after a unit, when
    ``interval`` seconds passed since that thread's last save (0: after every unit)."""

    def __init__(self, folder: Path, interval: float) -> None:
        self.folder = folder
        self.interval = interval
        self._files: dict[int, tuple[Path, float]] = {}

    def __call__(self, totals: PassTotals) -> None:
        path, last = self._files.get(id(totals), (None, -float("inf")))
        if path is None:
            path = self.folder / f"partial-{uuid.uuid4().hex}.npz"
        now = time.monotonic()
        if now - last >= self.interval:
            save_totals(totals, path)
            last = now
        self._files[id(totals)] = (path, last)


def save_arrays(arrays: PairArrays, path: Path) -> None:
    """Write the kernel arrays (and flags) of a pass to ``path`` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.stem}.{os.getpid()}.tmp.npz")
    np.savez(partial, **{f.name: np.asarray(getattr(arrays, f.name)) for f in fields(arrays)})
    os.replace(partial, path)


def load_arrays(path: Path) -> PairArrays:
    """The kernel arrays saved at ``path``."""
    with np.load(path) as saved:
        values = {
            f.name: bool(saved[f.name]) if f.type == "bool" else saved[f.name]
            for f in fields(PairArrays)
        }
    return PairArrays(**values)
