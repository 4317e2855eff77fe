"""All-pairs discovery of the published construction (§7–§8): every ordered pair of the
corpus scored on both signals, one global percentile threshold per signal, the per-row group
counts, eligibility, and the seeded random pools — streamed, never holding the N × N matrices.

Passes (:func:`run_pass`, the compiled kernel of :mod:`.pair_kernel` over *units*: ranges of
rows, each against the columns ``j ≥ i``; a symmetric pair counts for (i, j) and (j, i)):

1. histograms — exact counts of the stored float16 values (one per bit pattern, 65,536 per
   signal; self-pairs included, as published); the thresholds follow from them exactly
   (:func:`saber_core.sabermath.threshold.histogram_threshold`);
2. group counts — per row, under the thresholds (compared in float16, the row itself never
   high), the members of topic-only / summary-only / both; a row is *eligible* when every group
   reaches its size;
3. :func:`replay_draws` — the published pools are ``rng.choice(group, k, replace=False)`` per
   group (topic-only, summary-only, both) with ONE generator shared by the eligible rows in row
   order. A draw consumes the generator according to the group's size only, so the positions
   drawn for every eligible row follow from the counts alone, in one cheap sequential pass —
   without the member lists;
4. :func:`row_pools` — the rows actually used (the final sampler's queries) are scored once
   more and their drawn positions mapped to documents.

Units are independent and their results add up (integer counts), so a pass resumes from the
units already done (``resume``; ``commit`` is called after each unit with the running totals)
and shards split the units between machines: any split gives the identical totals.

``group_choice: top_score`` (a platform variant) replaces the draw by the top-k of each group by
its ranking score (BMA, Jaccard, BMA + Jaccard; ties by document index).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from saber_core.sabermath import pair_kernel
from saber_core.sabermath.bma import BmaIndex, bma_block
from saber_core.sabermath.jaccard import IdeaTokens, jaccard_block
from saber_core.sabermath.selection import GROUPS

Progress = Callable[[int, int], None] | None
ROW_CHUNK = 64  # rows scored at once by :meth:`PairScorer.rows` (2 × 64 × n float16)
N_PATTERNS = 1 << 16


@dataclass(frozen=True)
class PairScorer:
    """Both signals of the databank's documents, as stored (float16): the compiled kernel
    (:attr:`arrays`, :meth:`rows`) and the plain numpy reference (:meth:`block`)."""

    bma: BmaIndex
    ideas: IdeaTokens
    pooled: bool = True
    empty_idea_jaccard: bool = False  # the fix: J(∅, ∅) = 0 instead of 1

    @property
    def n_docs(self) -> int:
        """Documents (rows and columns of the all-pairs matrices)."""
        return self.bma.n_docs

    @cached_property
    def arrays(self) -> pair_kernel.PairArrays:
        """The kernel's flat arrays."""
        return pair_kernel.pair_arrays(self.bma, self.ideas, self.pooled, self.empty_idea_jaccard)

    def rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(BMA, Jaccard) of ``rows`` against every document, each (len(rows), n_docs) float16,
        by the kernel."""
        rows = np.asarray(rows, dtype=np.int64)
        out_b = np.empty((len(rows), self.n_docs), dtype=np.uint16)
        out_j = np.empty_like(out_b)
        data = self.arrays.data
        for start in range(0, len(rows), ROW_CHUNK):
            part = slice(start, start + ROW_CHUNK)
            pair_kernel.full_rows(rows[part], out_b[part], out_j[part], data)
        return out_b.view(np.float16), out_j.view(np.float16)

    def block(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The same by the numpy reference kernels (bench and tests)."""
        bma = bma_block(self.bma, rows, pooled=self.pooled)
        jac = jaccard_block(self.ideas, rows, empty_idea_jaccard=self.empty_idea_jaccard)
        return bma, jac


def row_units(n_docs: int, n_units: int) -> list[tuple[int, int]]:
    """Contiguous row ranges ``[start, stop)`` covering ``n_docs`` rows whose upper-triangle
    pairs (row ``i`` has ``n − i``) are about equal; at most ``n_units``, none empty."""
    if n_docs == 0:
        return []
    stops = np.arange(n_docs + 1, dtype=np.int64)
    pairs_before = stops * n_docs - stops * (stops - 1) // 2  # pairs of the rows before each
    cuts = np.searchsorted(pairs_before, np.linspace(0, pairs_before[-1], n_units + 1)[1:-1])
    bounds = np.unique(np.r_[0, cuts, n_docs])
    return [(int(a), int(b)) for a, b in itertools.pairwise(bounds)]


def threshold_bits(t_bma: float, t_jac: float) -> tuple[int, int]:
    """The thresholds as the float16 bit patterns the stored values are compared with (for
    values in [0, 1], a larger pattern is a larger value)."""
    for name, t in (("bma", t_bma), ("jaccard", t_jac)):
        if not 0.0 <= t <= 1.0:
            raise ValueError(f"{name} threshold {t} is outside [0, 1]")
    return tuple(int(np.float16(t).view(np.uint16)) for t in (t_bma, t_jac))


@dataclass
class PassTotals:
    """Running totals of a pass: the float16 histograms (65,536 counts per signal, over ordered
    pairs), the group counts (n, 3) when thresholds were given, and the units done."""

    hist_b: np.ndarray
    hist_j: np.ndarray
    counts: np.ndarray | None
    units_done: set[int] = field(default_factory=set)

    @classmethod
    def empty(cls, n_docs: int, counting: bool) -> PassTotals:
        """Zero totals."""
        counts = np.zeros((n_docs, len(GROUPS)), dtype=np.int64) if counting else None
        zeros = np.zeros(N_PATTERNS, dtype=np.int64)
        return cls(zeros, zeros.copy(), counts)

    def add(self, other: PassTotals) -> None:
        """Add ``other`` (disjoint units) in place; ValueError when a unit is in both."""
        if self.units_done & other.units_done:
            raise ValueError(f"units counted twice: {sorted(self.units_done & other.units_done)}")
        self.hist_b += other.hist_b
        self.hist_j += other.hist_j
        if self.counts is not None:
            self.counts += other.counts
        self.units_done |= other.units_done


def pass_key(
    arrays: pair_kernel.PairArrays,
    units: Sequence[tuple[int, int]],
    thresholds: tuple[int, int] | None,
) -> str:
    """What a pass's totals depend on: the arrays, the units and the thresholds (hex)."""
    return hashlib.blake2b(
        f"{arrays.digest()}|{list(units)}|{thresholds}".encode(), digest_size=16
    ).hexdigest()


def unit_pass(
    arrays: pair_kernel.PairArrays, unit: tuple[int, int], thresholds: tuple[int, int] | None
) -> PassTotals:
    """One unit (rows ``[start, stop)`` × columns ``j ≥ i``) of a pass."""
    totals = PassTotals.empty(arrays.n_docs, thresholds is not None)
    t_b, t_j = thresholds or (pair_kernel.NO_THRESHOLD, pair_kernel.NO_THRESHOLD)
    counts = totals.counts if totals.counts is not None else np.zeros((0, 3), dtype=np.int64)
    pair_kernel.upper_pass(
        unit[0], unit[1], t_b, t_j, totals.hist_b, totals.hist_j, counts, arrays.data
    )
    return totals


def _unit_pairs(n_docs: int, start: int, stop: int) -> int:
    """Σ_{i=start}^{stop−1} (n − i): the unit's unordered pairs, self-pairs included."""
    return (stop - start) * n_docs - (start + stop - 1) * (stop - start) // 2


def run_pass(
    arrays: pair_kernel.PairArrays,
    units: Sequence[tuple[int, int]],
    thresholds: tuple[int, int] | None = None,
    *,
    only: Sequence[int] | None = None,
    workers: int = 1,
    resume: PassTotals | None = None,
    commit: Callable[[PassTotals], None] | None = None,
    progress: Progress = None,
) -> PassTotals:
    """A pass over the units ``only`` (default: all) of ``units``, ``workers`` threads at once:
    histograms, and with ``thresholds`` (:func:`threshold_bits`) the group counts. Units in
    ``resume.units_done`` are skipped; ``commit(totals)`` follows every finished unit;
    ``progress(pairs done, pairs)`` too."""
    wanted = list(range(len(units)) if only is None else only)
    totals = resume or PassTotals.empty(arrays.n_docs, thresholds is not None)
    todo = [u for u in wanted if u not in totals.units_done]
    n = arrays.n_docs
    size = {u: _unit_pairs(n, *units[u]) for u in wanted}
    done_pairs = sum(size[u] for u in wanted if u in totals.units_done)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        running = {pool.submit(unit_pass, arrays, units[u], thresholds): u for u in todo}
        while running:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in sorted(finished, key=running.get):
                unit = running.pop(future)
                part = future.result()
                part.units_done = {unit}
                totals.add(part)
                done_pairs += size[unit]
                if commit:
                    commit(totals)
                if progress:
                    progress(done_pairs, sum(size.values()))
    return totals


def row_counts(scorer, rows: np.ndarray, t_bma: float, t_jac: float) -> np.ndarray:
    """Members of each group (:data:`GROUPS` order) of ``rows`` against every document, from
    their full rows (``scorer.rows``), (len(rows), 3) int64."""
    rows = np.asarray(rows, dtype=np.int64)
    out = np.zeros((len(rows), len(GROUPS)), dtype=np.int64)
    for start in range(0, len(rows), ROW_CHUNK):
        block = rows[start : start + ROW_CHUNK]
        masks = _group_masks(block, *scorer.rows(block), t_bma, t_jac)
        out[start : start + len(block)] = np.stack([m.sum(axis=1) for m in masks], axis=1)
    return out


def _group_masks(
    rows: np.ndarray, bma: np.ndarray, jac: np.ndarray, t_bma: float, t_jac: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    high_b = bma >= np.float16(t_bma)
    high_j = jac >= np.float16(t_jac)
    index = np.arange(len(rows))
    high_b[index, rows] = False
    high_j[index, rows] = False
    return high_b & ~high_j, ~high_b & high_j, high_b & high_j


def eligible(counts: np.ndarray, sizes: tuple[int, int, int]) -> np.ndarray:
    """Rows whose every group has at least its size, (rows,) bool."""
    return (np.asarray(counts) >= np.asarray(sizes)[None, :]).all(axis=1)


def replay_draws(
    counts: np.ndarray, sizes: tuple[int, int, int], seed: int, keep: np.ndarray | None = None
) -> dict[int, list[np.ndarray]]:
    """The published draws: for every eligible row in order, ``rng.choice(count_g, size_g,
    replace=False)`` per group with one ``np.random.default_rng(seed)``; returns the drawn
    positions (within each group's members, in draw order) of the rows in ``keep`` (default:
    every eligible row), keyed by row position."""
    rng = np.random.default_rng(seed)
    wanted = None if keep is None else {int(k) for k in keep}
    out: dict[int, list[np.ndarray]] = {}
    for row in np.flatnonzero(eligible(counts, sizes)).tolist():
        drawn = [rng.choice(int(counts[row, g]), sizes[g], replace=False) for g in range(3)]
        if wanted is None or row in wanted:
            out[row] = drawn
    return out


@dataclass(frozen=True)
class RowPools:
    """Pools of some rows: ``candidates`` (R, Σ sizes) document rows in pool order (topic-only,
    summary-only, both), ``groups`` (R, Σ sizes) codes into :data:`GROUPS`, and the float16
    ``bma`` / ``jaccard`` of each candidate."""

    candidates: np.ndarray
    groups: np.ndarray
    bma: np.ndarray
    jaccard: np.ndarray


def row_pools(
    scorer,
    rows: np.ndarray,
    t_bma: float,
    t_jac: float,
    sizes: tuple[int, int, int],
    positions: list[list[np.ndarray]] | None,
) -> RowPools:
    """Score ``rows`` again (``scorer.rows``: a :class:`PairScorer`) and take each group's
    members at the drawn ``positions`` (per row:
    three position arrays from :func:`replay_draws`), or — ``positions=None`` — the top of
    each group by its ranking score (BMA, Jaccard, BMA + Jaccard; ties by document index)."""
    bma, jac = scorer.rows(rows)
    masks = _group_masks(rows, bma, jac, t_bma, t_jac)
    width = sum(sizes)
    candidates = np.empty((len(rows), width), dtype=np.int64)
    for i in range(len(rows)):
        parts = []
        for g, mask in enumerate(masks):
            members = np.flatnonzero(mask[i])
            if positions is not None:
                parts.append(members[positions[i][g]])
                continue
            score = (bma[i, members].astype(np.float64), jac[i, members].astype(np.float64))
            rank = score[0] if g == 0 else score[1] if g == 1 else score[0] + score[1]
            parts.append(members[np.lexsort((members, -rank))[: sizes[g]]])
        candidates[i] = np.concatenate(parts)
    groups = np.repeat(np.arange(3, dtype=np.int8), sizes)[None, :].repeat(len(rows), axis=0)
    return RowPools(
        candidates=candidates,
        groups=groups,
        bma=np.take_along_axis(bma, candidates, axis=1),
        jaccard=np.take_along_axis(jac, candidates, axis=1),
    )
