"""All-pairs discovery of the published construction (§7–§8), the parts around the passes
(:mod:`.passes`): the pair scorer (compiled kernel, numpy reference), eligibility, the replayed
draws and the pools of the rows actually used.

* :func:`replay_draws` — the published pools are ``rng.choice(group, k, replace=False)`` per
  group (topic-only, summary-only, both) with ONE generator shared by the eligible rows in row
  order. A draw consumes the generator according to the group's size only, so the positions
  drawn for every eligible row follow from the counts alone, in one cheap sequential pass —
  without the member lists;
* :func:`row_pools` — the rows actually used (the final sampler's queries) are scored once
  more and their drawn positions mapped to documents.

``group_choice: top_score`` (a platform variant) replaces the draw by the top-k of each group by
its ranking score (BMA, Jaccard, BMA + Jaccard; ties by document index).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from saber_core.discovery import pair_kernel
from saber_core.published import GROUPS
from saber_core.signals.bma_published import BmaIndex, bma_block
from saber_core.signals.jaccard_published import IdeaTokens, jaccard_block

ROW_CHUNK = 64  # rows scored at once by :meth:`PairScorer.rows` (2 × 64 × n float16)


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

    @cached_property
    def row_digests(self) -> np.ndarray:
        """What each row's pair values depend on, hashed (:meth:`PairArrays.row_digests`)."""
        return self.arrays.row_digests()

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
