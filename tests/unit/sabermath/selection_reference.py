"""Reference: §8 target and candidate selection on dense score blocks, written from the method
text (the build selects from counts: ``saber_core.discovery.pair_scorer``)
(``build_benchmark/select/select_targets_and_candidates.py``, ``get_targets_and_candidates``).

For a row ``i`` of the databank (every row is a potential target; the caller concatenates the
splits ``numeric`` then ``proofs``) and its stored float16 scores against every document:

* high-BMA = ``bma ≥ threshold`` compared **in float16** (the Python-float threshold is cast to
  float16: 1757/2048 and 1725/8192 for the published ones), likewise high-Jaccard; the row itself
  is forced to not-high on both; nothing else is excluded;
* groups: topic-only = high BMA ∧ ¬high J, summary-only = ¬high BMA ∧ high J, both = high ∧ high;
* the row is a target when each group has ≥ ``per_group_count`` members (else it is dropped);
* its pool: ``rng.choice(group, per_group_count, replace=False)`` for topic-only, then
  summary-only, then both, in draw order — one ``np.random.default_rng`` shared by all targets in
  row order (published: created without a seed; ours gets one, recorded by the caller).

:func:`select_block` works on a block of consecutive rows; passing the same generator to the
blocks in row order gives exactly the draws of one pass. :func:`compact_candidates` builds the
candidates table (distinct pooled rows, ascending) and the pools' positions in it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from saber_core.published import PER_GROUP_COUNT


@dataclass(frozen=True)
class SelectionBlock:
    """A block's selection. ``group_counts`` (rows, 3) int64 members per group (for the
    eligibility table), ``eligible`` (rows,) bool; per target (eligible rows, in row order):
    ``targets`` (T,) databank rows, ``candidates`` (T, 3K) databank rows in pool order,
    ``groups`` (T, 3K) int8 codes into :data:`GROUPS`, ``bma_scores`` and ``jaccard_scores``
    (T, 3K) the stored float16 values."""

    group_counts: np.ndarray
    eligible: np.ndarray
    targets: np.ndarray
    candidates: np.ndarray
    groups: np.ndarray
    bma_scores: np.ndarray
    jaccard_scores: np.ndarray


def select_block(
    rows: np.ndarray,
    bma: np.ndarray,
    jaccard: np.ndarray,
    bma_threshold: float,
    jaccard_threshold: float,
    rng: np.random.Generator,
    per_group_count: int = PER_GROUP_COUNT,
) -> SelectionBlock:
    """Groups, eligibility and pools of the databank rows ``rows`` (module docstring).

    ``bma`` and ``jaccard`` (len(rows), n_docs) float16: the stored scores of each row against
    every document. ``rng`` draws the pools of the eligible rows in row order.
    """
    rows = np.asarray(rows, dtype=np.int64)
    bma, jaccard = np.asarray(bma), np.asarray(jaccard)
    if bma.dtype != np.float16 or jaccard.dtype != np.float16:
        raise ValueError(f"scores must be the stored float16, got {bma.dtype} and {jaccard.dtype}")
    if bma.shape != jaccard.shape or bma.shape[0] != len(rows):
        raise ValueError(f"bma {bma.shape} and jaccard {jaccard.shape} must be (len(rows), n)")
    high_bma = bma >= np.float16(bma_threshold)
    high_jaccard = jaccard >= np.float16(jaccard_threshold)
    block_rows = np.arange(len(rows))
    high_bma[block_rows, rows] = False
    high_jaccard[block_rows, rows] = False
    masks = (high_bma & ~high_jaccard, ~high_bma & high_jaccard, high_bma & high_jaccard)
    group_counts = np.stack([m.sum(axis=1) for m in masks], axis=1).astype(np.int64)
    eligible = (group_counts >= per_group_count).all(axis=1)

    k = per_group_count
    picked = np.flatnonzero(eligible)
    candidates = np.empty((len(picked), 3 * k), dtype=np.int64)
    for t, i in enumerate(picked):
        for g, mask in enumerate(masks):
            candidates[t, g * k : (g + 1) * k] = rng.choice(
                np.flatnonzero(mask[i]), size=k, replace=False
            )
    return SelectionBlock(
        group_counts=group_counts,
        eligible=eligible,
        targets=rows[picked],
        candidates=candidates,
        groups=np.broadcast_to(np.repeat(np.arange(3, dtype=np.int8), k), candidates.shape).copy(),
        bma_scores=np.take_along_axis(bma[picked], candidates, axis=1),
        jaccard_scores=np.take_along_axis(jaccard[picked], candidates, axis=1),
    )


def compact_candidates(candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The candidates table of pools of databank rows: the distinct rows, ascending, and each
    pool entry's position in that table (same shape as ``candidates``)."""
    table, positions = np.unique(np.asarray(candidates, dtype=np.int64), return_inverse=True)
    return table, positions.reshape(np.shape(candidates))
