"""Candidate discovery for many queries × the whole corpus: BMA, Jaccard, near-duplicates, pools.

This is the code the Dagster assets call. Queries are corpus rows (``query_docs``); they are
processed in blocks of ``block_size`` so memory stays bounded (a few float32/float64
``block_size × n_docs`` arrays) and nothing of size ``n_queries × n_docs`` is ever held.

Per block of queries:

* **BMA** (:func:`bma_block`), for the block's distinct query topics ``T``:

  - query side ``M[t, p] = max_{u ∈ D_p} lin(t, u)`` per distinct topic (shared by all queries
    of the block that have ``t``), from :class:`BmaIndex`'s (ancestor → documents, min IC)
    table: ``max_{a ∈ anc(t), IC(a) > 0} 2·IC(a) / (IC(t) + minIC_p(a))`` — about 110K updates
    per topic at paper scale instead of a pass over all topic incidences;
  - doc side ``W[q, u] = max_{t ∈ Q_q} L[t, u]`` with ``L = lin_rows(ontology, T, used)``, summed
    over each document's topics slot by slot (documents sorted by topic count, so slot ``j`` is
    one gather over the documents with more than ``j`` topics);
  - ``BMA = ½·(Σ_t M[t, p] / |Q| + Σ_u W[q, u] / |D|)``. Maxima are exact in float32; both sums
    are taken in float64 in numpy's own pairwise order over sorted topics, so every value is
    bit-identical to ``ontology.bma`` (then stored as float32).
* **Summary Jaccard**: ``text.jaccard_dense_block`` (float32).
* **Problem Jaccard** (near-duplicates): :func:`near_duplicates`, an exact prefix-filtered
  search that evaluates only documents sharing one of the query's rarest tokens (values
  bit-identical to ``jaccard_dense_block`` on every document that can reach the cut).
* **Pools**: ``pools.select_pool`` per query with those three rows (problem Jaccard ≥
  ``near_duplicate_cut`` = near-duplicate).

Results equal a per-query brute force (``ontology.bma``, set Jaccard, ``select_pool`` on full
vectors) exactly; ``tests/test_discovery.py`` checks it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl
import scipy.sparse as sp

from saber_core.discovery.pools import Pool, PoolConfig, select_pool
from saber_core.ontology.dag import Ontology
from saber_core.signals.jaccard import TokenMatrix, jaccard_dense_block
from saber_core.signals.lin_bma import TopicSets, concat_ranges, lin_rows

DEFAULT_BLOCK = 32


# ------------------------------------------------------------------------------ topic sets
def doc_topic_sets(
    ontology: Ontology, topics: pl.Series | Sequence[Sequence[str] | None]
) -> TopicSets:
    """``TopicSets`` of every document from lists of node ids (vectorized ``topic_sets``).

    Equal to ``topic_sets([ontology.indices(t or []) for t in topics])``; raises KeyError naming
    the first unknown topic id. Null or empty lists give a document without topics.
    """
    series = pl.Series("topics", topics, dtype=pl.List(pl.String))
    n_docs = len(series)
    long = (
        pl.DataFrame({"doc": np.arange(n_docs, dtype=np.int64), "topic": series})
        .explode("topic")
        .drop_nulls("topic")
    )
    nodes = pl.DataFrame(
        {"topic": ontology.node_ids.astype(str), "node": np.arange(ontology.n_nodes)}
    )
    joined = long.join(nodes, on="topic", how="left", maintain_order="left")
    unknown = joined.filter(pl.col("node").is_null())
    if unknown.height:
        raise KeyError(f"topic id {unknown['topic'][0]!r} is not a node of the ontology")
    pairs = joined.select("doc", "node").unique().sort("doc", "node")
    doc = pairs["doc"].to_numpy()
    node = pairs["node"].to_numpy().astype(np.int64)
    used, local = np.unique(node, return_inverse=True)
    ptr = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(np.bincount(doc, minlength=n_docs), out=ptr[1:])
    return TopicSets(used=used, ptr=ptr, local=local.astype(np.int64).reshape(-1))


def query_topics(doc_topics: TopicSets, docs: Sequence[int] | np.ndarray) -> list[np.ndarray]:
    """The ontology row indices of the topics of each given document (sorted)."""
    return [
        doc_topics.used[doc_topics.local[doc_topics.ptr[d] : doc_topics.ptr[d + 1]]]
        for d in np.asarray(docs, dtype=np.int64)
    ]


# ------------------------------------------------------------------------------------- BMA
@dataclass(frozen=True)
class BmaIndex:
    """A corpus' topic sets laid out for :func:`bma_block` (built once by :func:`build_bma_index`).

    Documents are sorted by topic count, descending: ``order[p]`` is the document at position
    ``p``; documents without topics come last. ``slots[j]`` (intp, length ``n_j``) holds the
    ``j``-th topic (position into ``used``) of the documents at positions ``< n_j`` (those with
    more than ``j`` topics); ``runs`` lists ``(k, start, end)``: positions ``start..end-1`` have
    exactly ``k > 0`` topics.

    ``below_ptr/below_pos/below_ic`` is a CSC over ontology nodes ``a`` with IC(a) > 0: the
    positions of the documents having a topic under ``a`` (descendant-or-self) and, per
    document, ``min IC`` of those topics. Since ``lin(t, u) = 2·IC(MICA)/(IC(t) + IC(u))``
    decreases in IC(u), ``max_{u ∈ D} lin(t, u) = max_{a ∈ anc(t)} 2·IC(a)/(IC(t) + minIC_D(a))``.
    """

    n_docs: int
    used: np.ndarray
    order: np.ndarray
    slots: list[np.ndarray]
    runs: list[tuple[int, int, int]]
    below_ptr: np.ndarray
    below_pos: np.ndarray
    below_ic: np.ndarray

    @property
    def n_with_topics(self) -> int:
        """Documents with at least one topic (they occupy positions ``0..n-1``)."""
        return len(self.slots[0]) if self.slots else 0


def build_bma_index(ontology: Ontology, doc_topics: TopicSets) -> BmaIndex:
    """Lay out ``doc_topics`` for :func:`bma_block`: O(nnz · |anc|) plus one sort, once per corpus.

    The (node, document, IC) triples of every topic's ancestors are packed into one int64 key
    ``(node · n + position) · L + rank(IC)`` (L distinct IC values) and sorted, so the first
    triple of each (node, document) carries the minimum IC.
    """
    sizes = doc_topics.sizes()
    order = np.argsort(-sizes, kind="stable")
    sorted_sizes = sizes[order]
    starts = doc_topics.ptr[:-1][order]
    n_top = int(np.count_nonzero(sorted_sizes))
    slots = []
    for j in range(int(sizes.max(initial=0))):
        n_j = int(np.count_nonzero(sorted_sizes > j))
        slots.append(doc_topics.local[starts[:n_j] + j].astype(np.intp))
    runs = []
    for k in np.unique(sorted_sizes[sorted_sizes > 0])[::-1].tolist():
        where = np.flatnonzero(sorted_sizes == k)
        runs.append((int(k), int(where[0]), int(where[-1]) + 1))

    ic, anc, n_nodes = ontology.ic, ontology.ancestors, ontology.n_nodes
    pos = np.repeat(np.arange(n_top, dtype=np.int64), sorted_sizes[:n_top])
    topic = doc_topics.used[doc_topics.local[concat_ranges(starts[:n_top], sorted_sizes[:n_top])]]
    counts = anc.indptr[topic + 1] - anc.indptr[topic]
    node = anc.indices[concat_ranges(anc.indptr[topic], counts)].astype(np.int64)
    pos = np.repeat(pos, counts)
    levels, rank = np.unique(ic, return_inverse=True)
    rank = np.repeat(rank.reshape(-1)[topic], counts)
    keep = ic[node] > 0
    node, pos, rank = node[keep], pos[keep], rank[keep]
    n_levels = len(levels)
    if n_nodes * max(n_top, 1) * n_levels >= 2**62:
        raise ValueError("corpus × ontology too large for the packed sort key")
    key = np.sort((node * n_top + pos) * n_levels + rank)
    pair = key // n_levels
    first = np.ones(len(pair), dtype=bool)
    first[1:] = pair[1:] != pair[:-1]
    key, pair = key[first], pair[first]
    below_ptr = np.zeros(n_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(pair // max(n_top, 1), minlength=n_nodes), out=below_ptr[1:])
    return BmaIndex(
        n_docs=len(sizes),
        used=doc_topics.used,
        order=order,
        slots=slots,
        runs=runs,
        below_ptr=below_ptr,
        below_pos=(pair % max(n_top, 1)).astype(np.intp),
        below_ic=levels[key % n_levels],
    )


def best_match_rows(ontology: Ontology, index: BmaIndex, topics: np.ndarray) -> np.ndarray:
    """``M[i, p] = max_{u ∈ D_p} lin(topics[i], u)`` for the document at every position p.

    (len(topics), n_with_topics) float32, bit-identical to the max over ``lin_rows`` entries:
    per ancestor ``a`` of ``t`` with IC(a) > 0 one vectorized update
    ``M[t, docs under a] ← max(·, float32(2·IC(a) / (IC(t) + minIC(a))))`` (the float64
    expression of ``lin``); ``lin(t, t) = 1`` also for a topic with IC 0.
    """
    ic, anc = ontology.ic, ontology.ancestors
    ptr, n_top = index.below_ptr, index.n_with_topics
    best = np.zeros((len(topics), n_top), dtype=np.float32)
    # Values of a big column depend on t only through IC(t) (all leaves share IC 1): reuse them.
    cache: dict[tuple[int, float], np.ndarray] = {}
    for i, t in enumerate(np.asarray(topics, dtype=np.int64).tolist()):
        row = best[i]
        ancestors = anc.indices[anc.indptr[t] : anc.indptr[t + 1]]
        sizes = ptr[ancestors + 1] - ptr[ancestors]
        keep = sizes > 0
        ancestors, sizes = ancestors[keep], sizes[keep]
        # Largest column first: it writes into zeros, so plain assignment is its max.
        for n_a, a in enumerate(ancestors[np.argsort(-sizes, kind="stable")].tolist()):
            lo, hi = ptr[a], ptr[a + 1]
            where = index.below_pos[lo:hi]
            value = cache.get((a, ic[t]))
            if value is None:
                value = (2.0 * ic[a] / (ic[t] + index.below_ic[lo:hi])).astype(np.float32)
                if hi - lo >= 4096:
                    cache[(a, ic[t])] = value
            if n_a == 0:
                row[where] = value
            else:
                row[where] = np.maximum(row[where], value)
        if ic[t] <= 0:  # lin(t, t) = 1 even where the formula reads 0/0
            local = np.searchsorted(index.used, t)
            if local < len(index.used) and index.used[local] == t:
                for slot in index.slots:
                    row[: len(slot)][slot == local] = 1.0
    return best


def numpy_order_sum(
    term: Callable[[int], np.ndarray], n: int, out: np.ndarray | None = None
) -> np.ndarray:
    """``Σ_{i<n} term(i)`` elementwise in float64, in the order numpy's pairwise sum uses.

    For a length-n float64 vector numpy sums: n < 8 left to right; 8 ≤ n ≤ 128 in 8 strided
    partial sums ``r_j = Σ_m a[8m + j]`` combined as ``((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7))`` plus
    the tail left to right; larger n splits at ``n/2`` rounded down to a multiple of 8. Following
    it makes ``vector.mean()`` (as in ``ontology.bma``) and this sum bit-identical. ``out``
    (float64, the terms' shape) receives the result when given.
    """
    if n < 8:
        total = np.array(term(0), dtype=np.float64) if out is None else out
        if out is not None:
            out[...] = term(0)
        for i in range(1, n):
            total += term(i)
        return total
    if n <= 128:
        partial = [np.array(term(j), dtype=np.float64) for j in range(8)]
        i = 8
        while i < n - n % 8:
            for j in range(8):
                partial[j] += term(i + j)
            i += 8
        total = ((partial[0] + partial[1]) + (partial[2] + partial[3])) + (
            (partial[4] + partial[5]) + (partial[6] + partial[7])
        )
        for k in range(i, n):
            total += term(k)
    else:
        half = n // 2
        half -= half % 8
        total = numpy_order_sum(term, half) + numpy_order_sum(lambda i: term(half + i), n - half)
    if out is not None:
        out[...] = total
        return out
    return total


def _query_side(best: np.ndarray, rows: list[np.ndarray]) -> np.ndarray:
    """``Σ_{t ∈ Q} M[t, p] / |Q|`` per query (rows into ``best``), float64 (B', n_top)."""
    result = np.empty((len(rows), best.shape[1]), dtype=np.float64)
    for i, r in enumerate(rows):
        numpy_order_sum(lambda j, r=r: best[r[j]], len(r), out=result[i])
        result[i] /= len(r)
    return result


def bma_block(
    ontology: Ontology, index: BmaIndex, topics: Sequence[np.ndarray] | Sequence[Sequence[int]]
) -> np.ndarray:
    """BMA of each query topic set (ontology row indices) against every document, (B, D) float32.

    Bit-identical to ``float32(ontology.bma(ontology, topics[q], doc_topics[d]))``; 0 for an empty
    query or a document without topics. Memory: the Lin table (T × U float32) and ``M``
    (T × n_docs float32) for the block's T distinct topics, plus a few (B × n_docs) float64.
    """
    qsets = [np.unique(np.asarray(t, dtype=np.int64)) for t in topics]
    n_q, n_docs, n_top = len(qsets), index.n_docs, index.n_with_topics
    out = np.zeros((n_q, n_docs), dtype=np.float32)
    nonempty = [q for q in range(n_q) if len(qsets[q])]
    if not nonempty or n_top == 0:
        return out
    distinct = np.unique(np.concatenate([qsets[q] for q in nonempty]))
    lin = lin_rows(ontology, distinct, index.used)  # (T, U) float32, for the doc side
    rows = [np.searchsorted(distinct, qsets[q]) for q in nonempty]
    result = _query_side(best_match_rows(ontology, index, distinct), rows)

    # Doc side: W[q, u] = max_{t ∈ Q} L[t, u], then Σ_{u ∈ D} W[q, u] / |D| per run of |D| = k.
    table = np.stack([lin[r].max(axis=0) for r in rows])  # (B', U) float32
    for k, start, end in index.runs:  # numpy's pairwise order, slot by slot
        doc_side = numpy_order_sum(
            lambda j, start=start, end=end: np.take(table, index.slots[j][start:end], axis=1), k
        )
        doc_side /= k
        part = result[:, start:end]
        part += doc_side
        part *= 0.5
    positions = index.order[:n_top]
    for i, q in enumerate(nonempty):
        out[q, positions] = result[i]
    return out


# ------------------------------------------------------------------------- near-duplicates
@dataclass(frozen=True)
class NearDuplicateIndex:
    """Problem token sets indexed for an exact prefix-filtered Jaccard ≥ cut search.

    ``by_token`` (CSC) lists the documents of every token; ``rank`` orders tokens rarest first
    (document frequency, then column).
    """

    tokens: TokenMatrix
    by_token: sp.csc_matrix
    rank: np.ndarray


def build_near_duplicate_index(problems: TokenMatrix) -> NearDuplicateIndex:
    """Index ``problems`` (one row per document) for :func:`near_duplicates`."""
    by_token = problems.matrix.tocsc()
    by_token.sort_indices()
    order = np.argsort(np.diff(by_token.indptr), kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return NearDuplicateIndex(problems, by_token, rank)


def near_duplicates(
    index: NearDuplicateIndex, query: TokenMatrix, cut: float
) -> tuple[np.ndarray, np.ndarray]:
    """Documents whose problem Jaccard with the one-row ``query`` is ≥ ``cut``, and that Jaccard.

    Returns ``(docs, jaccard)`` with float32 values bit-identical to ``jaccard_dense_block``
    (``I / (|q| + |d| − I)`` in float32); every document with float32 Jaccard ≥ ``cut`` is
    included (candidates below the cut may be too). Prefix filter: ``J ≥ t`` needs
    ``I ≥ t·|q|``, so a match shares a token with the ``|q| − ⌈t·|q|⌉ + 1`` rarest tokens of q
    (tokens outside the vocabulary count as the rarest; ``t`` is lowered by 1e-6 relative so
    float32 rounding up to the cut is covered). Requires ``cut > 1e-6``.
    """
    if query.n_texts != 1:
        raise ValueError(f"expected one query row, got {query.n_texts}")
    if not cut > 1e-6:
        raise ValueError(f"near_duplicates needs a cut > 1e-6, got {cut}")
    size = int(query.set_sizes[0])
    columns = query.matrix.indices
    relaxed = cut * (1.0 - 1e-6)
    need = math.ceil(relaxed * size - 1e-9)
    prefix = size - need + 1 - (size - len(columns))
    empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
    if size == 0 or prefix <= 0:
        return empty
    prefix_cols = columns[np.argsort(index.rank[columns], kind="stable")[:prefix]]
    ptr = index.by_token.indptr
    counts = ptr[prefix_cols + 1] - ptr[prefix_cols]
    rows = index.by_token.indices[concat_ranges(ptr[prefix_cols], counts)]
    docs = np.unique(rows).astype(np.int64)
    if len(docs) == 0:
        return empty
    q_dense = np.zeros(index.tokens.matrix.shape[1], dtype=np.float32)
    q_dense[columns] = 1.0
    inter = np.asarray(index.tokens.matrix[docs] @ q_dense, dtype=np.float32)
    union = np.float32(size) + index.tokens.set_sizes[docs].astype(np.float32)
    union -= inter
    jaccard = np.zeros(len(docs), dtype=np.float32)
    np.divide(inter, union, out=jaccard, where=union > 0)
    return docs, jaccard


# -------------------------------------------------------------------------------- discovery
@dataclass(frozen=True)
class DiscoveryBlock:
    """One block of queries: positions ``start..start+len(pools)-1`` of ``query_docs``."""

    start: int
    pools: list[Pool]
    bma: list[np.ndarray]  # per query: float32 BMA of pool.doc_index (empty when skipped)
    jaccard: list[np.ndarray]  # per query: float32 summary Jaccard of pool.doc_index
    neighbours: dict[str, tuple[np.ndarray, np.ndarray]]  # signal -> (doc idx, score) (B, k)
    seconds: dict[str, float]


@dataclass(frozen=True)
class DiscoveryResult:
    """Pools and pool-member scores of every query, optional neighbours, time per step."""

    pools: list[Pool]
    bma: list[np.ndarray]
    jaccard: list[np.ndarray]
    neighbours: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def top_neighbours(block: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row the ``k`` highest scores, descending, ties by lower document index; (B, k) each.

    Rows with fewer than ``k`` documents are padded with index -1 and score NaN.
    """
    n_q, n_docs = block.shape
    kk = min(k, n_docs)
    idx = np.full((n_q, k), -1, dtype=np.int64)
    val = np.full((n_q, k), np.nan, dtype=np.float32)
    if kk == 0:
        return idx, val
    for r in range(n_q):
        row = block[r]
        cut = row[np.argpartition(row, n_docs - kk)[n_docs - kk :]].min()
        above = np.flatnonzero(row > cut)
        tied = np.flatnonzero(row == cut)[: kk - len(above)]
        cand = np.concatenate([above, tied])
        cand = cand[np.lexsort((cand, -row[cand]))]
        idx[r, :kk], val[r, :kk] = cand, row[cand]
    return idx, val


def _problem_jaccard(
    near: NearDuplicateIndex | None, problems: TokenMatrix, docs: np.ndarray, cut: float
) -> np.ndarray:
    """(B, n_docs) float32 problem Jaccard, exact wherever it can reach ``cut`` (else 0).

    With an index, only prefix-filter candidates get their (bit-identical) value: the rest are
    below ``cut``, so ``problem_jaccard ≥ cut`` — all that pool selection reads — is unchanged.
    """
    if near is None:
        return jaccard_dense_block(problems.rows(docs), problems)
    out = np.zeros((len(docs), problems.n_texts), dtype=np.float32)
    for i, doc in enumerate(np.asarray(docs).tolist()):
        found, values = near_duplicates(near, problems.rows(doc), cut)
        out[i, found] = values
    return out


def _near_index(problems: TokenMatrix, config: PoolConfig) -> NearDuplicateIndex | None:
    """The prefix-filter index for the near-duplicate cut; None (dense problem Jaccard) when the
    cut is ~0 and every document would be a candidate anyway."""
    return build_near_duplicate_index(problems) if config.near_duplicate_cut > 1e-6 else None


def _select_block(
    start: int,
    docs: np.ndarray,
    bma: np.ndarray,
    jaccard: np.ndarray,
    problem_jaccard: np.ndarray,
    config: PoolConfig,
    seed: int,
) -> tuple[list[Pool], list[np.ndarray], list[np.ndarray]]:
    """:func:`select_pool` for a block of queries ``start, start + 1, …`` (corpus rows ``docs``,
    score rows ``bma[i]``, ``jaccard[i]``, ``problem_jaccard[i]``); returns the pools and each
    pool member's BMA and Jaccard scores."""
    pools, bma_rows, jac_rows = [], [], []
    for i, doc in enumerate(docs.tolist()):
        b, j = np.asarray(bma[i]), np.asarray(jaccard[i])
        pool = select_pool(start + i, b, j, problem_jaccard[i], config, seed, doc)
        pools.append(pool)
        bma_rows.append(b[pool.doc_index])
        jac_rows.append(j[pool.doc_index])
    return pools, bma_rows, jac_rows


@dataclass(frozen=True)
class DiscoveryInputs:
    """What discovery reads: the ontology, every document's topic sets, summary and problem
    token rows (one row per document), and ``query_docs[q]``, the corpus row of query ``q``."""

    ontology: Ontology
    doc_topics: TopicSets
    query_docs: np.ndarray
    summaries: TokenMatrix
    problems: TokenMatrix

    def __post_init__(self) -> None:
        object.__setattr__(self, "query_docs", np.asarray(self.query_docs, dtype=np.int64))
        n_docs = self.doc_topics.n_docs
        if self.summaries.n_texts != n_docs or self.problems.n_texts != n_docs:
            raise ValueError(
                f"{n_docs} topic sets but {self.summaries.n_texts} summaries and "
                f"{self.problems.n_texts} problems"
            )


def iter_discovery(
    inputs: DiscoveryInputs,
    config: PoolConfig,
    seed: int,
    block_size: int = DEFAULT_BLOCK,
    neighbours: int = 0,
    index: BmaIndex | None = None,
) -> Iterator[DiscoveryBlock]:
    """Stream discovery over blocks of queries (see the module docstring).

    Query ``q`` (corpus row ``inputs.query_docs[q]``: its own topics, summary and problem are
    used; it is excluded from its pool) is the pool's ``query_index`` (tie-break seed
    ``[seed, q]``). ``neighbours > 0`` also returns each query's top-``neighbours`` documents per
    signal (the query itself included).
    """
    ontology, doc_topics, query_docs = inputs.ontology, inputs.doc_topics, inputs.query_docs
    summaries, problems = inputs.summaries, inputs.problems
    if index is None:
        index = build_bma_index(ontology, doc_topics)
    near = _near_index(problems, config)
    for start in range(0, len(query_docs), block_size):
        docs = query_docs[start : start + block_size]
        seconds: dict[str, float] = {}
        tick = time.perf_counter()
        bma = bma_block(ontology, index, query_topics(doc_topics, docs))
        seconds["bma"] = time.perf_counter() - tick
        tick = time.perf_counter()
        jac = jaccard_dense_block(summaries.rows(docs), summaries)
        seconds["jaccard"] = time.perf_counter() - tick
        tick = time.perf_counter()
        prob = _problem_jaccard(near, problems, docs, config.near_duplicate_cut)
        seconds["near_duplicates"] = time.perf_counter() - tick
        tick = time.perf_counter()
        pools, bma_rows, jac_rows = _select_block(start, docs, bma, jac, prob, config, seed)
        seconds["pools"] = time.perf_counter() - tick
        found: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if neighbours > 0:
            tick = time.perf_counter()
            found = {
                "bma": top_neighbours(bma, neighbours),
                "jaccard": top_neighbours(jac, neighbours),
            }
            seconds["neighbours"] = time.perf_counter() - tick
        yield DiscoveryBlock(start, pools, bma_rows, jac_rows, found, seconds)


def discover_pools(
    inputs: DiscoveryInputs,
    config: PoolConfig,
    seed: int,
    block_size: int = DEFAULT_BLOCK,
    neighbours: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> DiscoveryResult:
    """Run :func:`iter_discovery` to the end and collect its blocks.

    ``progress(done, total)`` is called after each block (e.g. to log from an asset).
    """
    pools: list[Pool] = []
    bma: list[np.ndarray] = []
    jac: list[np.ndarray] = []
    parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    seconds: dict[str, float] = {}
    tick = time.perf_counter()
    index = build_bma_index(inputs.ontology, inputs.doc_topics)
    seconds["index"] = time.perf_counter() - tick
    total = len(inputs.query_docs)
    for block in iter_discovery(inputs, config, seed, block_size, neighbours, index):
        pools += block.pools
        bma += block.bma
        jac += block.jaccard
        for name, pair in block.neighbours.items():
            parts.setdefault(name, []).append(pair)
        for name, value in block.seconds.items():
            seconds[name] = seconds.get(name, 0.0) + value
        if progress is not None:
            progress(len(pools), total)
    found = {
        name: (np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs]))
        for name, pairs in parts.items()
    }
    return DiscoveryResult(pools, bma, jac, found, seconds)


def select_pools(
    query_docs: Sequence[int] | np.ndarray,
    bma: np.ndarray,
    jaccard: np.ndarray,
    problems: TokenMatrix,
    config: PoolConfig,
    seed: int,
    block_size: int = DEFAULT_BLOCK,
    progress: Callable[[int, int], None] | None = None,
) -> DiscoveryResult:
    """Pools of every query from precomputed (Q, n_docs) score matrices (arrays or memory maps).

    Row ``q`` of ``bma`` and ``jaccard`` belongs to query ``q`` whose corpus row is
    ``query_docs[q]``; near-duplicates of its problem (``problems`` Jaccard ≥ the cut) and the
    query itself are excluded, then :func:`saber_core.discovery.pools.select_pool` (seed ``[seed,
    q]``).
    ``progress(done, total)`` is called after each block.
    """
    query_docs = np.asarray(query_docs, dtype=np.int64)
    if bma.shape != jaccard.shape or bma.shape != (len(query_docs), problems.n_texts):
        raise ValueError(
            f"bma {bma.shape} and jaccard {jaccard.shape} must both be "
            f"({len(query_docs)} queries, {problems.n_texts} documents)"
        )
    near = _near_index(problems, config)
    pools, bma_rows, jac_rows = [], [], []
    for start in range(0, len(query_docs), block_size):
        docs = query_docs[start : start + block_size]
        end = start + len(docs)
        prob = _problem_jaccard(near, problems, docs, config.near_duplicate_cut)
        block = _select_block(start, docs, bma[start:end], jaccard[start:end], prob, config, seed)
        pools += block[0]
        bma_rows += block[1]
        jac_rows += block[2]
        if progress:
            progress(start + len(docs), len(query_docs))
    return DiscoveryResult(pools, bma_rows, jac_rows)


def pool_frames(
    result: DiscoveryResult, query_ids: Sequence[str], doc_ids: Sequence[str] | np.ndarray
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``(candidate_pools, pool_outcomes)`` frames as the ``candidate_pools`` asset stores them.

    candidate_pools: ``query_id, position, doc_id, group, relaxed, bma, jaccard`` (released order);
    pool_outcomes: ``query_id, status, reason, n_eligible, n_near_duplicates`` + the thresholds.
    """
    doc_ids = np.asarray(doc_ids, dtype=object)
    frames, outcomes = [], []
    for pool, b, j in zip(result.pools, result.bma, result.jaccard, strict=True):
        query_id = query_ids[pool.query_index]
        outcomes.append(
            {
                "query_id": query_id,
                "status": pool.status,
                "reason": pool.reason,
                "n_eligible": pool.n_eligible,
                "n_near_duplicates": pool.n_near_duplicates,
                **pool.thresholds,
            }
        )
        if pool.status != "skipped":
            frames.append(
                pl.DataFrame(
                    {
                        "query_id": query_id,
                        "position": np.arange(len(pool.doc_index)),
                        "doc_id": doc_ids[pool.doc_index].astype(str),
                        "group": pool.group,
                        "relaxed": pool.relaxed,
                        "bma": b,
                        "jaccard": j,
                    }
                )
            )
    pools = pl.concat(frames) if frames else pl.DataFrame()
    return pools, pl.DataFrame(outcomes, infer_schema_length=None)


__all__ = [
    "BmaIndex",
    "DiscoveryBlock",
    "DiscoveryResult",
    "NearDuplicateIndex",
    "best_match_rows",
    "bma_block",
    "build_bma_index",
    "build_near_duplicate_index",
    "discover_pools",
    "doc_topic_sets",
    "iter_discovery",
    "near_duplicates",
    "numpy_order_sum",
    "pool_frames",
    "query_topics",
    "select_pools",
    "top_neighbours",
]
