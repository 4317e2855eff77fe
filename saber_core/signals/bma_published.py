"""docs/sabermath.md §5: pooled Best-Match Average of tag lists, stored as float16
(``build_benchmark/fastbma/src/fastbma/bma.c``, ``build_benchmark/similarities/compute/
processor.py``).

For the tag lists ``A`` (row document) and ``B`` (column document), node ids in list order::

    h_A = Σ_{a∈A} max_{b∈B} Lin(a, b)        (summed left to right over A, from +0.0)
    h_B = Σ_{b∈B} max_{a∈A} Lin(b, a)        (summed left to right over B, from +0.0)
    BMA(A, B) = h_A / (|A| + |B|) + h_B / (|A| + |B|)

— the pooled form, two separately divided halves then added (the C code's float order), 0 when
either list is empty; lists are used as given (a repeated tag counts twice). The stored value is
``float16(BMA)``, for every ordered pair, self-pairs included.

Block kernel (:func:`bma_block`), exact to the bit:

* documents with the same tag list share a column, so everything runs over distinct lists;
* ``max_{b∈B} Lin(a, b)`` from the tree: with ``x`` running over the ancestors of ``a`` (``a``
  included) and ``μ_B(x)`` the smallest IC of a tag of ``B`` in the subtree of ``x``, it equals
  ``max_x 2·IC(x) / ((IC(a) + μ_B(x)) + 1e-12)`` — a tag below ``x`` has its LCA with ``a`` at or
  below ``x`` (IC at least IC(x)), and for fixed ``x`` the value falls as IC(b) grows; both hold
  for the rounded values too. Only the lists with a tag below ``x`` are touched, and ancestors
  with IC 0 (the root) are skipped: they give Lin 0 (with the ``root_self_similarity`` fix a list
  holding ``a`` itself gets 1.0);
* ``max_{a∈A} Lin(b, a)`` is gathered from the per-row maxima of the Lin table of the row tags
  against every used node, list position by list position;
* the sums run position by position, padding adds an exact +0.0; ``h_A`` starts from the +0.0
  of the table, so no sum is −0.0 where the C code's (from 0.0) is +0.0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from saber_core.signals.lin_published import LIN_EPS, LinSimilarity


@dataclass(frozen=True)
class BmaIndex:
    """Documents' tag lists prepared for :func:`bma_block` (build with :func:`bma_index`).

    ``nodes`` sorted distinct node ids used by the documents; ``list_of_doc`` (n_docs,) the id of
    each document's distinct tag list; ``list_ptr``/``list_flat`` the lists (CSR, positions into
    ``nodes``, list order kept); ``groups`` per list length ``k`` ≥ 1: (list ids (n_k,),
    positions (n_k, k)); ``below_*`` per tree node ``x`` (CSR): the lists with a tag in the
    subtree of ``x``, ascending, and the smallest IC of such a tag; ``holder_*`` per tree node:
    the lists holding it.
    """

    lin: LinSimilarity
    nodes: np.ndarray
    list_of_doc: np.ndarray
    list_ptr: np.ndarray
    list_flat: np.ndarray
    groups: tuple[tuple[np.ndarray, np.ndarray], ...]
    below_ptr: np.ndarray
    below_lists: np.ndarray
    below_min_ic: np.ndarray
    holder_ptr: np.ndarray
    holder_lists: np.ndarray

    @property
    def n_docs(self) -> int:
        """Number of documents."""
        return len(self.list_of_doc)

    @property
    def n_lists(self) -> int:
        """Number of distinct tag lists."""
        return len(self.list_ptr) - 1

    @property
    def list_lengths(self) -> np.ndarray:
        """Length of each distinct list."""
        return np.diff(self.list_ptr)


def _by_node(
    nodes: np.ndarray, lists: np.ndarray, values: np.ndarray, n_nodes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (node, list) pairs grouped by node: CSR pointers (n_nodes + 1), the lists
    (ascending within a node) and the smallest ``value`` of each pair."""
    if nodes.size == 0:
        return np.zeros(n_nodes + 1, np.int64), lists, values
    order = np.lexsort((lists, nodes))
    nodes, lists, values = nodes[order], lists[order], values[order]
    starts = np.flatnonzero(np.r_[True, (np.diff(nodes) != 0) | (np.diff(lists) != 0)])
    pointers = np.searchsorted(nodes[starts], np.arange(n_nodes + 1))
    return pointers, lists[starts], np.minimum.reduceat(values, starts)


def bma_index(lin: LinSimilarity, doc_nodes: Sequence[Sequence[int]]) -> BmaIndex:
    """Prepare per-document node-id lists (e.g. :meth:`FrequencyTree.node_ids` of the cleaned
    tags, order kept) for :func:`bma_block` under the similarity ``lin``. ValueError naming the
    document when a node id is not a node of the tree."""
    distinct: dict[tuple[int, ...], int] = {}
    list_of_doc = np.array(
        [distinct.setdefault(tuple(int(n) for n in doc), len(distinct)) for doc in doc_nodes],
        dtype=np.int64,
    )
    lengths = np.array([len(t) for t in distinct], dtype=np.int64)
    flat_nodes = np.fromiter((n for t in distinct for n in t), np.int64, count=int(lengths.sum()))
    bad = np.flatnonzero((flat_nodes < 0) | (flat_nodes >= lin.n_nodes))
    if bad.size:
        doc = int(
            np.flatnonzero(list_of_doc == np.searchsorted(np.cumsum(lengths), bad[0], "right"))[0]
        )
        raise ValueError(
            f"document {doc}: node id {flat_nodes[bad[0]]} is not in [0, {lin.n_nodes})"
        )
    nodes, flat = np.unique(flat_nodes, return_inverse=True)
    ptr = np.concatenate([[0], np.cumsum(lengths)])
    groups = []
    for k in np.unique(lengths[lengths > 0]):
        ids = np.flatnonzero(lengths == k)
        groups.append((ids, flat[ptr[ids][:, None] + np.arange(k)]))

    entry_list = np.repeat(np.arange(len(lengths)), lengths)
    entry_ic = lin.ic[flat_nodes]
    holder_ptr, holder_lists, _ = _by_node(flat_nodes, entry_list, entry_ic, lin.n_nodes)
    above = lin.ancestors[flat_nodes]  # (entries, depth): each tag's ancestors, −1 padded
    inside = above >= 0
    below_ptr, below_lists, below_min_ic = _by_node(
        above[inside],
        np.broadcast_to(entry_list[:, None], above.shape)[inside],
        np.broadcast_to(entry_ic[:, None], above.shape)[inside],
        lin.n_nodes,
    )
    return BmaIndex(
        lin=lin,
        nodes=nodes,
        list_of_doc=list_of_doc,
        list_ptr=ptr,
        list_flat=flat.astype(np.int64),
        groups=tuple(groups),
        below_ptr=below_ptr,
        below_lists=below_lists,
        below_min_ic=below_min_ic,
        holder_ptr=holder_ptr,
        holder_lists=holder_lists,
    )


def _best_match_row(index: BmaIndex, node: int, out: np.ndarray) -> None:
    """``out[B] = max_{b∈B} Lin(node, b)`` for every list ``B`` (``out`` starts at 0), by the
    tree (module docstring)."""
    ic = index.lin.ic
    for x in index.lin.ancestors[node]:
        if x < 0:
            break
        if not ic[x] > 0.0:  # Lin through x is ±0: nothing to raise
            continue
        lo, hi = index.below_ptr[x], index.below_ptr[x + 1]
        lists = index.below_lists[lo:hi]
        value = (2.0 * ic[x]) / ((ic[node] + index.below_min_ic[lo:hi]) + LIN_EPS)
        out[lists] = np.maximum(out[lists], value)
    if index.lin.root_self_similarity:
        out[index.holder_lists[index.holder_ptr[node] : index.holder_ptr[node + 1]]] = 1.0


def _rows_against_all(index: BmaIndex, row_lists: np.ndarray, pooled: bool = True) -> np.ndarray:
    """float64 BMA of non-empty distinct lists against every distinct list, (rows, n_lists);
    ``pooled=False``: the mean of the two means, ``½ (h_A / |A| + h_B / |B|)``."""
    ptr, lengths = index.list_ptr, index.list_lengths
    row_positions = [index.list_flat[ptr[r] : ptr[r + 1]] for r in row_lists]
    used = np.unique(np.concatenate(row_positions))  # positions into index.nodes
    padded = np.full((len(row_lists), int(lengths[row_lists].max())), len(used), np.int64)
    for i, positions in enumerate(row_positions):  # row tags into ``used``, len(used) = padding
        padded[i, : len(positions)] = np.searchsorted(used, positions)

    # h_A: best[a, B] = max_{b∈B} Lin(a, b); the padding row stays 0.
    best = np.zeros((len(used) + 1, index.n_lists))
    for i, node in enumerate(index.nodes[used]):
        _best_match_row(index, node, best[i])
    half_rows = best[padded[:, 0]]  # C sums from 0.0: same, as best starts at +0.0
    for i in range(1, padded.shape[1]):
        half_rows += best[padded[:, i]]

    # h_B: row_best[u, A] = max_{a∈A} Lin(u, a) for every used node u, then gathered per list.
    table = np.zeros((len(index.nodes), len(used) + 1))
    table[:, :-1] = index.lin.rows(index.nodes, index.nodes[used])
    row_best = table[:, padded[:, 0]]
    for i in range(1, padded.shape[1]):
        np.maximum(row_best, table[:, padded[:, i]], out=row_best)
    half_cols = np.zeros((index.n_lists, len(row_lists)))
    for ids, positions in index.groups:
        total = row_best[positions[:, 0]]  # −0.0 here (Lin through the root) vanishes below
        for j in range(1, positions.shape[1]):
            total += row_best[positions[:, j]]
        half_cols[ids] = total

    if not pooled:
        half_rows /= lengths[row_lists][:, None].astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):  # empty column lists: 0 below
            half_rows += half_cols.T / lengths[None, :].astype(np.float64)
        half_rows *= 0.5
        half_rows[:, lengths == 0] = 0.0
        return half_rows
    n = lengths[row_lists][:, None].astype(np.float64) + lengths[None, :]
    half_rows /= n
    half_rows += half_cols.T / n  # h_A / n ≥ +0.0, so the sum is never −0.0
    return half_rows


def bma_block(
    index: BmaIndex,
    rows: np.ndarray,
    row_chunk: int = 16,
    dtype: type = np.float16,
    pooled: bool = True,
) -> np.ndarray:
    """BMA of each document ``rows[i]`` against every document, (len(rows), n_docs).

    Bit-identical to the published kernel (module docstring) under ``index.lin`` (its
    ``root_self_similarity`` flag selects the diagonal); 0 where either list is empty. ``dtype``
    float16 gives the stored value, float64 the value before storage. Distinct row lists are
    processed ``row_chunk`` at a time: memory ≈ (4 · row_chunk + distinct row tags) × distinct
    lists float64, plus the output. ``pooled=False`` gives the platform's mean of the two means
    ``½ (h_A / |A| + h_B / |B|)`` instead (same kernel, IC and Lin).
    """
    rows = np.asarray(rows, dtype=np.int64)
    row_lists, row_inverse = np.unique(index.list_of_doc[rows], return_inverse=True)
    result = np.zeros((len(row_lists), index.n_lists), dtype=dtype)
    row_lengths = index.list_lengths[row_lists]
    filled = np.flatnonzero(row_lengths > 0)
    filled = filled[np.argsort(row_lengths[filled], kind="stable")]  # little padding per chunk
    for start in range(0, len(filled), row_chunk):
        part = filled[start : start + row_chunk]
        result[part] = _rows_against_all(index, row_lists[part], pooled)
    return result[row_inverse][:, index.list_of_doc]
