"""Topic similarity on the DAG of a node file (platform): Lin and Best-Match Average.

With IC the Seco intrinsic information content of :mod:`saber_core.ontology.dag` (a node counts
as its own ancestor):

* Lin similarity: ``lin(a, b) = 2·IC(MICA(a, b)) / (IC(a) + IC(b))``, where MICA is the common
  ancestor with the highest IC. ``lin(a, a) = 1`` by definition (this also covers the root,
  whose formula reads 0/0).
* Best-Match Average of topic sets A and B:
  ``BMA = ½·(mean_{a∈A} max_{b∈B} lin(a, b) + mean_{b∈B} max_{a∈A} lin(a, b))``; 0 if either
  set is empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from saber_core.ontology.dag import Ontology, concat_ranges


def mica_ic(ontology: Ontology, a: int, b: int) -> float:
    """IC of the most informative common ancestor of nodes ``a`` and ``b``."""
    common = np.intersect1d(ontology.ancestor_set(a), ontology.ancestor_set(b))
    return float(ontology.ic[common].max())


def lin(ontology: Ontology, a: int, b: int) -> float:
    """Lin similarity ``2·IC(MICA) / (IC(a) + IC(b))`` of two nodes given by row index."""
    if a == b:
        return 1.0
    denominator = ontology.ic[a] + ontology.ic[b]
    if denominator <= 0:
        return 0.0
    return float(2.0 * mica_ic(ontology, a, b) / denominator)


_LIN_CHUNK_ROWS = 128  # bounds the (row, ancestor, descendant) triples held at once


def lin_rows(ontology: Ontology, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """Lin table ``L[i, j] = lin(rows[i], columns[j])`` as float32 (len(rows), len(columns)).

    ``IC(MICA(a, b)) = max_{k ∈ anc(a) ∩ anc(b)} IC(k)``, and ``2·x / (IC(a) + IC(b))`` (then the
    float32 cast) is monotone in ``x``, so ``L[a, b] = max_k float32(2·IC(k) / (IC(a) + IC(b)))``
    over the triples (a, k ∈ anc(a) with IC(k) > 0, b ∈ desc-or-self(k)), scattered with
    ``np.maximum.at``; pairs whose only common ancestor is the root (IC 0) stay 0, and
    ``L[a, a] = 1``. The float64 formula per triple is the one of :func:`lin`, so values are
    bit-identical to it. Cost ``O(Σ_{a ∈ rows} Σ_{k ∈ anc(a)} |desc(k)|)``, no per-pair Python.
    """
    rows = np.asarray(rows, dtype=np.int64)
    columns = np.asarray(columns, dtype=np.int64)
    unique_cols, inverse = np.unique(columns, return_inverse=True)
    ic = ontology.ic
    anc, desc = ontology.ancestors, ontology.descendants
    position = np.full(ontology.n_nodes, -1, dtype=np.int64)  # node -> position in unique_cols
    position[unique_cols] = np.arange(len(unique_cols))
    n_cols = len(unique_cols)
    table = np.zeros((len(rows), n_cols), dtype=np.float32)
    flat = table.reshape(-1)
    for lo in range(0, len(rows), _LIN_CHUNK_ROWS):
        chunk = rows[lo : lo + _LIN_CHUNK_ROWS]
        counts = anc.indptr[chunk + 1] - anc.indptr[chunk]
        pair_row = np.repeat(np.arange(lo, lo + len(chunk)), counts)
        pair_anc = anc.indices[concat_ranges(anc.indptr[chunk], counts)].astype(np.int64)
        informative = ic[pair_anc] > 0
        pair_row, pair_anc = pair_row[informative], pair_anc[informative]
        dcounts = desc.indptr[pair_anc + 1] - desc.indptr[pair_anc]
        node = desc.indices[concat_ranges(desc.indptr[pair_anc], dcounts)]
        pos = position[node]
        hit = pos >= 0
        t_row = np.repeat(pair_row, dcounts)[hit]
        t_ic = np.repeat(ic[pair_anc], dcounts)[hit]
        node, pos = node[hit], pos[hit]
        value = (2.0 * t_ic / (ic[rows[t_row]] + ic[node])).astype(np.float32)
        np.maximum.at(flat, t_row * n_cols + pos, value)
    own = position[rows]
    has_own = own >= 0
    table[np.flatnonzero(has_own), own[has_own]] = 1.0
    if n_cols == len(columns) and np.array_equal(unique_cols, columns):
        return table
    return table[:, inverse]


def bma(ontology: Ontology, topics_a: Sequence[int], topics_b: Sequence[int]) -> float:
    """Best-Match Average of two topic sets (row indices); 0 when either set is empty."""
    a = np.unique(np.asarray(topics_a, dtype=np.int64))
    b = np.unique(np.asarray(topics_b, dtype=np.int64))
    if len(a) == 0 or len(b) == 0:
        return 0.0
    table = lin_rows(ontology, a, b).astype(np.float64)
    return float(0.5 * (table.max(axis=1).mean() + table.max(axis=0).mean()))


@dataclass(frozen=True)
class TopicSets:
    """Topic sets of many documents in CSR form over a compact table of the topics in use.

    ``used`` holds the ontology row index of each used topic; ``ptr``/``local`` give, for
    document d, the positions into ``used`` of its (deduplicated) topics.
    """

    used: np.ndarray  # (U,) ontology row indices
    ptr: np.ndarray  # (D+1,)
    local: np.ndarray  # (nnz,) positions into `used`

    @property
    def n_docs(self) -> int:
        """Number of documents."""
        return len(self.ptr) - 1

    def sizes(self) -> np.ndarray:
        """Number of topics of each document."""
        return np.diff(self.ptr)


def topic_sets(topic_lists: Sequence[Sequence[int]]) -> TopicSets:
    """Pack per-document topic lists (ontology row indices) into a ``TopicSets`` table."""
    deduped = [np.unique(np.asarray(t, dtype=np.int64)) for t in topic_lists]
    sizes = np.fromiter((len(t) for t in deduped), dtype=np.int64, count=len(deduped))
    flat = np.concatenate(deduped) if deduped else np.zeros(0, dtype=np.int64)
    used, local = np.unique(flat, return_inverse=True)
    ptr = np.zeros(len(deduped) + 1, dtype=np.int64)
    np.cumsum(sizes, out=ptr[1:])
    return TopicSets(used=used, ptr=ptr, local=local.astype(np.int64))


def bma_one_vs_many(lin_table: np.ndarray, docs: TopicSets) -> np.ndarray:
    """BMA of one query topic set against every document, from a precomputed Lin table.

    ``lin_table`` is ``lin_rows(ontology, query_topics, docs.used)`` (m × U). With
    ``G = lin_table[:, docs.local]`` (m × nnz), per document d with topics ``D``:
    ``BMA_d = ½·(mean_q max_{t∈D} G[q, t] + mean_{t∈D} max_q G[q, t])``. Documents without
    topics (and an empty query) score 0.
    """
    n_docs = docs.n_docs
    out = np.zeros(n_docs, dtype=np.float32)
    if lin_table.shape[0] == 0 or len(docs.local) == 0:
        return out
    gathered = lin_table[:, docs.local]  # (m, nnz)
    sizes = docs.sizes()
    nonempty = sizes > 0
    starts = docs.ptr[:-1][nonempty]
    query_side = np.maximum.reduceat(gathered, starts, axis=1).mean(axis=0)
    doc_side = np.add.reduceat(gathered.max(axis=0), starts) / sizes[nonempty]
    out[nonempty] = 0.5 * (query_side + doc_side)
    return out
