"""The all-pairs passes (§7–§8 at corpus scale): one streamed pass over every unordered pair
gives the exact float16 histograms (hence the thresholds) *and* the per-row group counts —
without a second pass over the pairs.

The group counts need the thresholds, which the pass itself produces. So a small *sample*
first (:func:`sample_band`: full rows of ~1% of the rows) estimates each threshold and a band of
float16 values ``[low, low + width)`` that contains it with a wide margin (the estimate ± 6
standard errors of the sample, by batch means over the sample rows). The pass then counts each
pair for both rows (:func:`saber_core.discovery.pair_kernel.upper_pass`):

* both signals outside their bands — the groups are sure: added to ``counts`` (n, 3);
* one signal inside its band — a per-row histogram over the band's values, split by the other
  signal (below / above its band): ``band_b`` (2, n, width_b), ``band_j`` (2, n, width_j);
* both inside — an event (i, j, offsets), rare.

:func:`resolve_counts` then reads the exact groups off these for the true thresholds — when
they lie in the bands; otherwise (an unlucky sample) it returns None and the caller runs one
*exact* pass (:meth:`Band.exact`, width 0 at the thresholds: every pair sure).

Units (row ranges against the columns ``j ≥ i``) are independent and their totals add up
(integer counts): a pass resumes from the units already done, runs on several threads, and
splits into shards on several machines; any split gives the identical totals.

**Growth.** Every total is a sum over unordered pairs. When documents are appended to a
databank whose pass is done and whose first rows still score exactly as before (equal
:meth:`~saber_core.discovery.pair_kernel.PairArrays.row_digests`: :func:`unchanged_prefix`),
the grown databank's totals are the old ones re-indexed (:meth:`PassTotals.grown`) plus a pass
over the new pairs only, under the old band: units with ``prefix`` = the old row count, each new
row against the old rows and the later new rows. Any other change (a different IC, tokenizer,
fix; a removed or edited document) needs a full pass.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from saber_core.discovery import pair_kernel
from saber_core.published import GROUPS

N_PATTERNS = 1 << 16
ROW_CHUNK = 64  # full rows scored at once by the sample (2 × 64 × n float16)
SAMPLE_SHARE = 0.01  # rows of the band sample
SAMPLE_MIN_ROWS = 1000
SAMPLE_BATCHES = 20  # batch means over the sample rows: the standard error of the estimate
BAND_SIGMAS = 6.0
BAND_MARGIN = 2  # float16 steps added below and above the band
Progress = Callable[[int, int], None] | None


@dataclass(frozen=True)
class Band:
    """float16 bit ranges ``[low, low + width)`` of BMA and Jaccard where the thresholds are
    expected (for values in [0, 1] a larger bit pattern is a larger value)."""

    low_b: int
    width_b: int
    low_j: int
    width_j: int

    @classmethod
    def none(cls) -> Band:
        """No counting (histograms only): a band above every value."""
        return cls(*pair_kernel.NO_BAND)

    @classmethod
    def exact(cls, t_bma: float, t_jac: float) -> Band:
        """Width 0 at the thresholds: every pair counted in its group directly."""
        bits_b, bits_j = threshold_bits(t_bma, t_jac)
        return cls(bits_b, 0, bits_j, 0)

    @property
    def counting(self) -> bool:
        """Whether the pass counts groups at all."""
        return (self.low_b, self.low_j) != (0xFFFF, 0xFFFF)

    def as_tuple(self) -> tuple[int, int, int, int]:
        """The kernel's ``band`` argument."""
        return self.low_b, self.width_b, self.low_j, self.width_j


def threshold_bits(t_bma: float, t_jac: float) -> tuple[int, int]:
    """The thresholds as the float16 bit patterns the stored values are compared with (the
    published comparison is done in float16)."""
    for name, t in (("bma", t_bma), ("jaccard", t_jac)):
        if not 0.0 <= t <= 1.0:
            raise ValueError(f"{name} threshold {t} is outside [0, 1]")
    return int(np.float16(t_bma).view(np.uint16)), int(np.float16(t_jac).view(np.uint16))


@dataclass
class PassTotals:
    """Running totals of a pass over some units (:mod:`module docstring <.passes>`):
    histograms over ordered pairs (65,536 per signal), sure group counts (n, 3), the band
    histograms and events, and the units done."""

    band: Band
    hist_b: np.ndarray
    hist_j: np.ndarray
    counts: np.ndarray
    band_b: np.ndarray
    band_j: np.ndarray
    events: np.ndarray
    units_done: set[int] = field(default_factory=set)

    @classmethod
    def empty(cls, n_docs: int, band: Band) -> PassTotals:
        """Zero totals."""
        zeros = np.zeros(N_PATTERNS, dtype=np.int64)
        return cls(
            band=band,
            hist_b=zeros,
            hist_j=zeros.copy(),
            counts=np.zeros((n_docs if band.counting else 0, len(GROUPS)), dtype=np.int64),
            band_b=np.zeros((2, n_docs if band.width_b else 0, band.width_b), dtype=np.int32),
            band_j=np.zeros((2, n_docs if band.width_j else 0, band.width_j), dtype=np.int32),
            events=np.zeros((0, 4), dtype=np.int32),
        )

    def add(self, other: PassTotals) -> None:
        """Add ``other`` (same band, disjoint units) in place; ValueError otherwise."""
        if other.band != self.band:
            raise ValueError(f"cannot add totals of band {other.band} to band {self.band}")
        twice = self.units_done & other.units_done
        if twice:
            raise ValueError(f"units counted twice: {sorted(twice)}")
        for name in ("hist_b", "hist_j", "counts", "band_b", "band_j"):
            getattr(self, name).__iadd__(getattr(other, name))
        self.events = np.concatenate([self.events, other.events])
        self.units_done |= other.units_done

    def grown(self, n_docs: int) -> PassTotals:
        """These totals re-indexed to a databank of ``n_docs`` rows whose first rows are this
        pass's (the appended rows zero; no unit done)."""
        n_old = len(self.counts) if self.band.counting else 0
        if n_docs < n_old:
            raise ValueError(f"cannot grow totals of {n_old} rows to {n_docs}")
        out = PassTotals.empty(n_docs, self.band)
        out.hist_b += self.hist_b
        out.hist_j += self.hist_j
        out.counts[:n_old] = self.counts
        out.band_b[:, : self.band_b.shape[1]] = self.band_b
        out.band_j[:, : self.band_j.shape[1]] = self.band_j
        out.events = self.events.copy()
        return out


def pass_key(
    arrays: pair_kernel.PairArrays,
    units: Sequence[tuple[int, int]],
    band: Band,
    code: str = "",
    prefix: int = 0,
) -> str:
    """What a pass's totals depend on: the arrays, the units (over the rows after ``prefix``),
    the band and (``code``) the version of the code that computes them (hex)."""
    text = f"{arrays.digest()}|{list(units)}|{band.as_tuple()}|{code}"
    text += f"|prefix {prefix}" if prefix else ""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def row_units(n_docs: int, n_units: int, prefix: int = 0) -> list[tuple[int, int]]:
    """Contiguous row ranges ``[start, stop)`` covering the rows ``[prefix, n_docs)`` whose
    pairs (row ``i``: ``prefix + n − i``, :func:`unit_pairs`) are about equal; at most
    ``n_units``, none empty."""
    if n_docs <= prefix:
        return []
    stops = np.arange(prefix, n_docs + 1, dtype=np.int64)
    rows = stops - prefix
    pairs_before = rows * (n_docs + prefix) - (prefix + stops - 1) * rows // 2  # of rows before
    goals = np.linspace(0, pairs_before[-1], n_units + 1)[1:-1]
    cuts = prefix + np.searchsorted(pairs_before, goals)
    bounds = np.unique(np.r_[prefix, cuts, n_docs])
    return [(int(a), int(b)) for a, b in itertools.pairwise(bounds)]


def unit_pairs(n_docs: int, unit: tuple[int, int], prefix: int = 0) -> int:
    """Σ_{i=start}^{stop−1} (prefix + n − i): the unit's unordered pairs, self-pairs included
    (``prefix``: with the old rows of a grown databank, :func:`add_unit`)."""
    start, stop = unit
    return (stop - start) * (n_docs + prefix) - (start + stop - 1) * (stop - start) // 2


def add_unit(
    arrays: pair_kernel.PairArrays, unit: tuple[int, int], totals: PassTotals, prefix: int = 0
) -> None:
    """Run one unit into ``totals``: rows ``[start, stop)`` × columns ``j ≥ i`` and, for rows
    appended after the first ``prefix`` rows, × columns ``j < prefix``."""
    if not prefix <= unit[0] <= unit[1] <= arrays.n_docs:
        raise ValueError(
            f"unit {unit} is not a row range of the {arrays.n_docs} rows after the prefix {prefix}"
        )
    events, n_events = pair_kernel.upper_pass(
        unit[0], unit[1], prefix, totals.band.as_tuple(), totals.hist_b, totals.hist_j,
        totals.counts, totals.band_b, totals.band_j, np.zeros((64, 4), dtype=np.int32), 0,
        arrays.data,
    )  # fmt: skip
    totals.events = np.concatenate([totals.events, events[:n_events]])


def unchanged_prefix(old: np.ndarray, new: np.ndarray) -> int:
    """How many leading rows of the row digests ``old`` equal those of ``new``
    (:meth:`~saber_core.discovery.pair_kernel.PairArrays.row_digests`): the old pass's totals
    hold for the grown databank when this is ``len(old)``."""
    n = min(len(old), len(new))
    differ = np.flatnonzero((old[:n] != new[:n]).any(axis=1))
    return int(differ[0]) if len(differ) else n


def run_pass(
    arrays: pair_kernel.PairArrays,
    units: Sequence[tuple[int, int]],
    band: Band,
    *,
    only: Sequence[int] | None = None,
    skip: set[int] | frozenset[int] = frozenset(),
    workers: int = 1,
    prefix: int = 0,
    after_unit: Callable[[PassTotals], None] | None = None,
    progress: Progress = None,
) -> PassTotals:
    """The units ``only`` (default: all) of ``units`` but ``skip``, on ``workers`` threads, each
    adding into its own totals and calling ``after_unit(its totals)`` after every unit (from
    its thread: a checkpoint holds whole units only); returns the sum over the threads.
    ``prefix``: the units are rows appended after the first ``prefix`` rows (:func:`add_unit`).
    ``progress(pairs done, pairs to do)``."""
    todo = [u for u in (range(len(units)) if only is None else only) if u not in skip]
    queue = iter(todo)
    lock = threading.Lock()
    total_pairs = sum(unit_pairs(arrays.n_docs, units[u], prefix) for u in todo)
    done = [0]
    per_thread = [PassTotals.empty(arrays.n_docs, band) for _ in range(max(1, workers))]

    def work(totals: PassTotals) -> None:
        while True:
            with lock:
                unit = next(queue, None)
            if unit is None:
                return
            add_unit(arrays, units[unit], totals, prefix)
            totals.units_done.add(unit)
            if after_unit:
                after_unit(totals)
            with lock:
                done[0] += unit_pairs(arrays.n_docs, units[unit], prefix)
                if progress:
                    progress(done[0], total_pairs)

    threads = [threading.Thread(target=work, args=(t,)) for t in per_thread[1:]]
    for thread in threads:
        thread.start()
    work(per_thread[0])  # the caller's thread works too
    for thread in threads:
        thread.join()
    result = per_thread[0]
    for other in per_thread[1:]:
        result.add(other)
    return result


def resolve_counts(totals: PassTotals, t_bma: float, t_jac: float) -> np.ndarray | None:
    """The exact group counts (n, 3) under the thresholds, from the totals of every unit; None
    when a threshold lies outside its band (the pass cannot tell its groups)."""
    band = totals.band
    bits_b, bits_j = threshold_bits(t_bma, t_jac)
    off_b, off_j = bits_b - band.low_b, bits_j - band.low_j
    if not (0 <= off_b <= band.width_b and 0 <= off_j <= band.width_j):
        return None
    counts = totals.counts.copy()
    if band.width_b:
        counts[:, 0] += totals.band_b[0, :, off_b:].sum(axis=1)  # b high, J low
        counts[:, 2] += totals.band_b[1, :, off_b:].sum(axis=1)  # b high, J high
        counts[:, 1] += totals.band_b[1, :, :off_b].sum(axis=1)  # b low, J high
    if band.width_j:
        counts[:, 1] += totals.band_j[0, :, off_j:].sum(axis=1)
        counts[:, 2] += totals.band_j[1, :, off_j:].sum(axis=1)
        counts[:, 0] += totals.band_j[1, :, :off_j].sum(axis=1)
    if len(totals.events):
        rows_i, rows_j, ob, oj = totals.events.T.astype(np.int64)
        high_b, high_j = ob >= off_b, oj >= off_j
        group = np.where(high_b & high_j, 2, np.where(high_b, 0, 1))
        counted = high_b | high_j
        for rows in (rows_i, rows_j):
            np.add.at(counts, (rows[counted], group[counted]), 1)
    return counts


def sample_rows(n_docs: int, seed: int) -> np.ndarray:
    """The band sample: ``max(1000, 1%)`` of the rows (all of a small corpus), seeded."""
    size = min(n_docs, max(SAMPLE_MIN_ROWS, math.ceil(SAMPLE_SHARE * n_docs)))
    return np.sort(np.random.default_rng(seed).choice(n_docs, size, replace=False))


def sample_histograms(
    arrays: pair_kernel.PairArrays, rows: np.ndarray, workers: int = 1
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Float16 histograms (BMA, Jaccard) of the full rows ``rows`` (every column), in
    :data:`SAMPLE_BATCHES` batches of consecutive rows, on ``workers`` threads."""
    batches = [b for b in np.array_split(np.asarray(rows, np.int64), SAMPLE_BATCHES) if len(b)]
    out: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(batches)
    queue = iter(range(len(batches)))
    lock = threading.Lock()

    def work() -> None:
        chunk_b = np.empty((ROW_CHUNK, arrays.n_docs), dtype=np.uint16)
        chunk_j = np.empty_like(chunk_b)
        while True:
            with lock:
                k = next(queue, None)
            if k is None:
                return
            hist_b = np.zeros(N_PATTERNS, dtype=np.int64)
            hist_j = np.zeros(N_PATTERNS, dtype=np.int64)
            for start in range(0, len(batches[k]), ROW_CHUNK):
                part = batches[k][start : start + ROW_CHUNK]
                b, j = chunk_b[: len(part)], chunk_j[: len(part)]
                pair_kernel.full_rows(part, b, j, arrays.data)
                hist_b += np.bincount(b.ravel(), minlength=N_PATTERNS)
                hist_j += np.bincount(j.ravel(), minlength=N_PATTERNS)
            out[k] = (hist_b, hist_j)

    threads = [threading.Thread(target=work) for _ in range(max(1, workers) - 1)]
    for thread in threads:
        thread.start()
    work()
    for thread in threads:
        thread.join()
    return out  # type: ignore[return-value]


def sample_band(batch_histograms: Sequence[tuple[np.ndarray, np.ndarray]], quantile: float) -> Band:
    """The band of each signal from the float16 histograms of the sample's full rows, in
    batches: the quantile's value ± :data:`BAND_SIGMAS` standard errors (batch means of the
    share above the estimate), widened by :data:`BAND_MARGIN` steps each side."""
    bounds = []
    for signal in range(2):
        batches = np.array([h[signal] for h in batch_histograms], dtype=np.int64)
        total = batches.sum(axis=0)
        cumulative = np.cumsum(total)
        pairs = int(cumulative[-1])
        estimate = int(np.searchsorted(cumulative, max(1, math.ceil(quantile * pairs))))
        above = batches[:, estimate:].sum(axis=1) / batches.sum(axis=1)
        se = float(above.std(ddof=1) / math.sqrt(len(batches))) if len(batches) > 1 else 1.0
        lo_rank = max(1, math.ceil((quantile - BAND_SIGMAS * se) * pairs))
        hi_rank = min(pairs, math.ceil((quantile + BAND_SIGMAS * se) * pairs))
        low = max(0, int(np.searchsorted(cumulative, lo_rank)) - BAND_MARGIN)
        high = min(0x7C00, int(np.searchsorted(cumulative, hi_rank)) + BAND_MARGIN + 1)
        bounds += [low, high - low]
    return Band(*bounds)
