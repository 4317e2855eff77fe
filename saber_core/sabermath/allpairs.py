"""All-pairs discovery of the published construction (§7–§8): every ordered pair of the
corpus scored on both signals, one global percentile threshold per signal, the per-row group
counts, eligibility, and the seeded random pools — streamed block by block, never holding the
N × N matrices.

Passes (each over blocks of rows against every document):

1. :func:`pair_histograms` — exact histograms of the stored float16 values (one count per
   float16 bit pattern, 65,536 per signal; self-pairs included, as published); the thresholds
   follow from them exactly (:func:`saber_core.sabermath.threshold.histogram_threshold`);
2. :func:`group_counts` — per row, under the thresholds (compared in float16, the row itself
   never high), the members of topic-only / summary-only / both; a row is *eligible* when every
   group reaches its size;
3. :func:`replay_draws` — the published pools are ``rng.choice(group, k, replace=False)`` per
   group (topic-only, summary-only, both) with ONE generator shared by the eligible rows in row
   order. A draw consumes the generator according to the group's size only, so the positions
   drawn for every eligible row follow from the counts alone, in one cheap sequential pass —
   without the member lists;
4. :func:`row_pools` — the rows actually used (the final sampler's queries) are scored once
   more and their drawn positions mapped to documents.

``group_choice: top_score`` (a platform variant) replaces the draw by the top-k of each group by
its ranking score (BMA, Jaccard, BMA + Jaccard; ties by document index).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from saber_core.sabermath.bma import BmaIndex, bma_block
from saber_core.sabermath.jaccard import IdeaTokens, jaccard_block
from saber_core.sabermath.selection import GROUPS
from saber_core.sabermath.threshold import float16_histogram

Progress = Callable[[int, int], None] | None
DEFAULT_BLOCK = 64


@dataclass(frozen=True)
class PairScorer:
    """Both signals of a block of rows against every document, as stored (float16)."""

    bma: BmaIndex
    ideas: IdeaTokens
    pooled: bool = True
    empty_idea_jaccard: bool = False  # the fix: J(∅, ∅) = 0 instead of 1

    @property
    def n_docs(self) -> int:
        """Documents (rows and columns of the all-pairs matrices)."""
        return self.bma.n_docs

    def block(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(BMA, Jaccard) of ``rows`` against every document, each (len(rows), n_docs) float16."""
        bma = bma_block(self.bma, rows, pooled=self.pooled)
        jac = jaccard_block(self.ideas, rows, empty_idea_jaccard=self.empty_idea_jaccard)
        return bma, jac


def _blocks(n_rows: int, block_size: int):
    return [(s, min(s + block_size, n_rows)) for s in range(0, n_rows, block_size)]


def pair_histograms(
    scorer: PairScorer, rows: np.ndarray, block_size: int = DEFAULT_BLOCK, progress: Progress = None
) -> tuple[np.ndarray, np.ndarray]:
    """Pass 1 over ``rows`` × every document: (BMA counts, Jaccard counts) per float16 bit
    pattern; histograms of disjoint row sets add up."""
    counts_b = np.zeros(65536, dtype=np.int64)
    counts_j = np.zeros(65536, dtype=np.int64)
    for start, stop in _blocks(len(rows), block_size):
        bma, jac = scorer.block(rows[start:stop])
        counts_b += float16_histogram(bma)
        counts_j += float16_histogram(jac)
        if progress:
            progress(stop, len(rows))
    return counts_b, counts_j


def _group_masks(
    rows: np.ndarray, bma: np.ndarray, jac: np.ndarray, t_bma: float, t_jac: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    high_b = bma >= np.float16(t_bma)
    high_j = jac >= np.float16(t_jac)
    index = np.arange(len(rows))
    high_b[index, rows] = False
    high_j[index, rows] = False
    return high_b & ~high_j, ~high_b & high_j, high_b & high_j


def group_counts(
    scorer: PairScorer,
    rows: np.ndarray,
    t_bma: float,
    t_jac: float,
    block_size: int = DEFAULT_BLOCK,
    progress: Progress = None,
) -> np.ndarray:
    """Pass 2: members of each group (:data:`GROUPS` order) per row, (len(rows), 3) int64."""
    out = np.zeros((len(rows), len(GROUPS)), dtype=np.int64)
    for start, stop in _blocks(len(rows), block_size):
        block = rows[start:stop]
        masks = _group_masks(block, *scorer.block(block), t_bma, t_jac)
        out[start:stop] = np.stack([m.sum(axis=1) for m in masks], axis=1)
        if progress:
            progress(stop, len(rows))
    return out


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
    scorer: PairScorer,
    rows: np.ndarray,
    t_bma: float,
    t_jac: float,
    sizes: tuple[int, int, int],
    positions: list[list[np.ndarray]] | None,
) -> RowPools:
    """Score ``rows`` again and take each group's members at the drawn ``positions`` (per row:
    three position arrays from :func:`replay_draws`), or — ``positions=None`` — the top of
    each group by its ranking score (BMA, Jaccard, BMA + Jaccard; ties by document index)."""
    bma, jac = scorer.block(rows)
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
