"""Compiled kernel of both signals over all pairs (numba): BMA and idea Jaccard
(docs/sabermath.md §5, §6) of a row against a range of columns, bit-identical to
:func:`~saber_core.signals.bma_published.bma_block` and
:func:`~saber_core.signals.jaccard_published.jaccard_block` (those stay as the plain reference).

Per row ``i`` (tags ``A``, tokens ``T_i``) and the columns ``j ≥ lo``:

* ``best[p, j] = max_{b∈B_j} Lin(A_p, b)``, scattered from the tree: for every ancestor ``x`` of
  ``A_p`` with IC > 0 and every document ``j`` with a tag below ``x`` (the smallest such IC
  ``μ_j(x)``), ``2·IC(x) / ((IC(A_p) + μ_j(x)) + 1e-12)``; the maximum over ``x`` is the Lin of
  the best tag (the argument of :mod:`.bma`);
* ``rowmax[u] = max_{a∈A} Lin(u, a)`` for every node ``u``, the same way over the preorder range
  of each ancestor's subtree;
* ``h_A = Σ_p best[p, j]``, ``h_B = Σ_{b∈B_j} rowmax[b]`` (list order, from +0.0), and
  ``BMA = h_A / (|A|+|B|) + h_B / (|A|+|B|)`` (pooled) or ``½ (h_A/|A| + h_B/|B|)``;
* ``|T_i ∩ T_j|`` counted from the postings of ``T_i``; ``J = s / (|T_i| + |T_j| − s)``, two
  empty sets 1.0 (published) or 0.0;
* both stored as float16 (:func:`float16_bits`, round half to even, as numpy's cast).

Only the columns a row touches are written, and the column loop resets them, so a row costs
about (tree scatter + postings + one pass over its columns). BMA and Jaccard are symmetric to the
bit (``IC(a) + IC(b)`` commutes, the two halves swap), so the all-pairs passes visit each
unordered pair once (``j ≥ i``) and count it for both rows; a pass over rows appended to a
databank (``prefix``: the rows already passed) scores each new row against every column and
counts its pairs with the old rows and the later new rows.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from dataclasses import dataclass

import numba as nb
import numpy as np

from saber_core.signals.bma_published import BmaIndex
from saber_core.signals.jaccard_published import IdeaTokens
from saber_core.signals.lin_published import LIN_EPS

PAD_WIDTH = 8  # tag lists up to this length are also stored padded (n, PAD_WIDTH)
NO_BAND = (0xFFFF, 0, 0xFFFF, 0)  # a band above every value in [0, 1]: histograms only


@dataclass(frozen=True)
class PairArrays:
    """Flat arrays of the documents' tag lists and idea tokens for the kernel (build with
    :func:`pair_arrays`).

    Documents: ``tag_ptr`` (n + 1), ``tag_nodes`` node ids and ``tag_pre`` their preorder
    positions, in list order, ``tag_pad`` the same padded to :data:`PAD_WIDTH` with ``N``;
    ``tok_ptr``/``tok_ids`` token ids, ``tok_size``; tokens:
    ``post_ptr``/``post_doc`` the documents of each token, ascending. Tree: ``ic``, ``ancestors``
    (N, D), ``pre_of``/``pre_size`` preorder position and subtree size, ``ic_pre`` IC by preorder
    position; ``below_ptr``/``below_doc``/``below_mu`` per node the documents with a tag in its
    subtree (ascending) and the smallest IC of such a tag; ``holder_ptr``/``holder_doc`` per node
    the documents holding it. Flags: ``root_self`` (Lin(a, a) = 1), ``pooled``, ``empty_one``
    (J(∅, ∅) = 1)."""

    tag_ptr: np.ndarray
    tag_nodes: np.ndarray
    tag_pre: np.ndarray
    tag_pad: np.ndarray
    tok_ptr: np.ndarray
    tok_ids: np.ndarray
    tok_size: np.ndarray
    post_ptr: np.ndarray
    post_doc: np.ndarray
    ic: np.ndarray
    ancestors: np.ndarray
    pre_of: np.ndarray
    pre_size: np.ndarray
    ic_pre: np.ndarray
    below_ptr: np.ndarray
    below_doc: np.ndarray
    below_mu: np.ndarray
    holder_ptr: np.ndarray
    holder_doc: np.ndarray
    root_self: bool
    pooled: bool
    empty_one: bool

    @property
    def n_docs(self) -> int:
        """Documents (rows and columns)."""
        return len(self.tag_ptr) - 1

    def digest(self) -> str:
        """Content hash of every array and flag (what a pass's result depends on)."""
        h = hashlib.blake2b(digest_size=16)
        for value in self.data:
            array = np.ascontiguousarray(value)
            h.update(f"{array.dtype}{array.shape}".encode())
            h.update(array.tobytes())
        return h.hexdigest()

    def row_digests(self) -> np.ndarray:
        """Per row, a 16-byte hash of everything its pair values depend on, (n, 16) uint8: its
        tags in list order, each with its ancestor chain (node ids, IC bits), its token ids and
        the flags. Two rows with equal digests score alike against any row; when a databank
        grows, the old rows keep their digests exactly when their pairs keep their values
        (node and token ids are given in order of first sighting, so appended rows leave the
        old ids alone)."""
        ic_bits = self.ic.view(np.int64)
        node_keys = np.zeros((len(self.ancestors), 16), dtype=np.uint8)
        for node, chain in enumerate(self.ancestors):
            chain = chain[chain >= 0].astype(np.int64)
            key = hashlib.blake2b(chain.tobytes() + ic_bits[chain].tobytes(), digest_size=16)
            node_keys[node] = np.frombuffer(key.digest(), dtype=np.uint8)
        tags = node_keys[self.tag_nodes].tobytes()
        tokens = self.tok_ids.astype(np.int64).tobytes()
        flags = bytes([self.root_self, self.pooled, self.empty_one])
        out = np.empty((self.n_docs, 16), dtype=np.uint8)
        for row in range(self.n_docs):
            t0, t1 = int(self.tag_ptr[row]), int(self.tag_ptr[row + 1])
            k0, k1 = int(self.tok_ptr[row]), int(self.tok_ptr[row + 1])
            h = hashlib.blake2b(flags + struct.pack("<qq", t1 - t0, k1 - k0), digest_size=16)
            h.update(tags[16 * t0 : 16 * t1])
            h.update(tokens[8 * k0 : 8 * k1])
            out[row] = np.frombuffer(h.digest(), dtype=np.uint8)
        return out

    @property
    def data(self) -> tuple:
        """The arrays and flags as the kernel's one tuple argument (field order)."""
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))


def _csr(keys: np.ndarray, values: np.ndarray, n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """Values grouped by key (stable: the given order within a key), with pointers."""
    order = np.argsort(keys, kind="stable")
    ptr = np.zeros(n_keys + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=n_keys), out=ptr[1:])
    return ptr, values[order]


def _preorder(parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Preorder position and subtree size of every node of a parent array (−1: a root)."""
    n = len(parents)
    children: list[list[int]] = [[] for _ in range(n)]
    roots = []
    for node, parent in enumerate(parents.tolist()):
        (children[parent] if parent >= 0 else roots).append(node)
    position = np.zeros(n, dtype=np.int64)
    size = np.ones(n, dtype=np.int64)
    order: list[int] = []
    stack = roots[::-1]
    while stack:
        node = stack.pop()
        position[node] = len(order)
        order.append(node)
        stack.extend(children[node][::-1])
    for node in reversed(order):
        if parents[node] >= 0:
            size[parents[node]] += size[node]
    return position, size


def pair_arrays(
    index: BmaIndex, ideas: IdeaTokens, pooled: bool = True, empty_idea_jaccard: bool = False
) -> PairArrays:
    """The kernel's arrays of a tag-list index (list order kept) and idea token sets; ``pooled``
    BMA or the mean of means, J(∅, ∅) = 0 with ``empty_idea_jaccard``."""
    lin = index.lin
    ancestors = lin.ancestors
    parents = np.array(
        [row[np.flatnonzero(row >= 0)[-2]] if (row >= 0).sum() > 1 else -1 for row in ancestors],
        dtype=np.int64,
    )
    pre_of, pre_size = _preorder(parents)
    ic_pre = np.empty_like(lin.ic)
    ic_pre[pre_of] = lin.ic

    lengths = index.list_lengths[index.list_of_doc]
    tag_ptr = np.zeros(index.n_docs + 1, dtype=np.int64)
    np.cumsum(lengths, out=tag_ptr[1:])
    starts = index.list_ptr[index.list_of_doc]
    flat = np.repeat(starts - tag_ptr[:-1], lengths) + np.arange(tag_ptr[-1])
    tag_nodes = index.nodes[index.list_flat[flat]].astype(np.int32)
    tag_doc = np.repeat(np.arange(index.n_docs, dtype=np.int64), lengths)

    above = ancestors[tag_nodes]  # (tags, depth)
    inside = above >= 0
    x = above[inside]
    doc = np.broadcast_to(tag_doc[:, None], above.shape)[inside]
    mu = np.broadcast_to(lin.ic[tag_nodes][:, None], above.shape)[inside]
    order = np.lexsort((mu, doc, x))
    x, doc, mu = x[order], doc[order], mu[order]
    first = np.r_[True, (np.diff(x) != 0) | (np.diff(doc) != 0)]  # smallest μ first
    below_ptr, below_doc = _csr(x[first], doc[first].astype(np.int32), lin.n_nodes)
    _, below_mu = _csr(x[first], mu[first], lin.n_nodes)
    held = np.lexsort((tag_doc, tag_nodes))
    keep = np.r_[True, (np.diff(tag_nodes[held]) != 0) | (np.diff(tag_doc[held]) != 0)]
    holder_ptr, holder_doc = _csr(
        tag_nodes[held][keep].astype(np.int64), tag_doc[held][keep].astype(np.int32), lin.n_nodes
    )

    matrix = ideas.matrix.tocsr()
    matrix.sort_indices()
    postings = matrix.tocsc()
    postings.sort_indices()
    tag_pre = pre_of[tag_nodes].astype(np.int32)
    tag_pad = np.full((index.n_docs, PAD_WIDTH), lin.n_nodes, dtype=np.int32)
    position = np.arange(tag_ptr[-1]) - np.repeat(tag_ptr[:-1], lengths)
    short = position < PAD_WIDTH
    tag_pad[tag_doc[short], position[short]] = tag_pre[short]
    return PairArrays(
        tag_ptr=tag_ptr,
        tag_nodes=tag_nodes,
        tag_pre=tag_pre,
        tag_pad=tag_pad,
        tok_ptr=matrix.indptr.astype(np.int64),
        tok_ids=matrix.indices.astype(np.int32),
        tok_size=ideas.sizes.astype(np.int64),
        post_ptr=postings.indptr.astype(np.int64),
        post_doc=postings.indices.astype(np.int32),
        ic=lin.ic.astype(np.float64),
        ancestors=ancestors.astype(np.int32),
        pre_of=pre_of.astype(np.int64),
        pre_size=pre_size.astype(np.int64),
        ic_pre=ic_pre,
        below_ptr=below_ptr,
        below_doc=below_doc,
        below_mu=below_mu,
        holder_ptr=holder_ptr,
        holder_doc=holder_doc,
        root_self=bool(lin.root_self_similarity),
        pooled=bool(pooled),
        empty_one=not empty_idea_jaccard,
    )


JIT = {"cache": True, "nogil": True, "error_model": "numpy"}


@nb.njit(**JIT)
def float16_bits(bits: np.ndarray, out: np.ndarray) -> None:
    """``out[k]`` = the bit pattern of ``float16(x_k)`` for the float64 bit patterns ``bits``
    (``x.view(np.int64)``) of finite values: round half to even, overflow to ±inf, as numpy's
    cast — in integer arithmetic on the 52-bit fraction."""
    for k in range(len(bits)):
        b = bits[k]
        sign = (b >> 48) & 0x8000
        exponent = ((b >> 52) & 0x7FF) - 1023
        fraction = b & 0xFFFFFFFFFFFFF
        if exponent > 15:
            out[k] = sign | 0x7C00
            continue
        if exponent >= -14:  # normal: keep 10 of the 52 fraction bits
            result = ((exponent + 15) << 10) | (fraction >> 42)
            rest = fraction & 0x3FFFFFFFFFF
            half = 0x20000000000
        elif exponent >= -25:  # subnormal: steps of 2**-24, the implicit bit shifted in
            shift = 42 + (-14 - exponent)
            significand = fraction | 0x10000000000000
            result = significand >> shift
            rest = significand & ((1 << shift) - 1)
            half = 1 << (shift - 1)
        else:  # below 2**-25 (or zero): rounds to zero
            out[k] = sign
            continue
        if rest > half or (rest == half and (result & 1) == 1):
            result += 1  # a carry out of the fraction bumps the exponent, as it should
        out[k] = sign | result


@nb.njit(**JIT)
def _first_at_least(values: np.ndarray, start: int, stop: int, bound: int) -> int:
    return start + np.searchsorted(values[start:stop], bound)


@nb.njit(**JIT)
def _scatter_row(i, lo, best, shared, rowmax, data):
    """Fill ``best[p, j]``, ``shared[j]`` (j ≥ lo) and ``rowmax`` of row ``i`` (module doc)."""
    (tag_ptr, tag_nodes, _, _, tok_ptr, tok_ids, _, post_ptr, post_doc, ic, ancestors, pre_of,
     pre_size, ic_pre, below_ptr, below_doc, below_mu, holder_ptr, holder_doc, root_self, _,
     _) = data  # fmt: skip
    rowmax[:] = 0.0
    for p in range(tag_ptr[i + 1] - tag_ptr[i]):
        a = tag_nodes[tag_ptr[i] + p]
        ic_a = ic[a]
        for depth in range(ancestors.shape[1]):
            x = ancestors[a, depth]
            if x < 0:
                break
            if not ic[x] > 0.0:  # Lin through x is ±0: nothing to raise
                continue
            two = 2.0 * ic[x]
            first = _first_at_least(below_doc, below_ptr[x], below_ptr[x + 1], lo)
            for t in range(first, below_ptr[x + 1]):
                value = two / ((ic_a + below_mu[t]) + LIN_EPS)
                j = below_doc[t]
                if value > best[p, j]:
                    best[p, j] = value
            for u in range(pre_of[x], pre_of[x] + pre_size[x]):
                value = two / ((ic_pre[u] + ic_a) + LIN_EPS)
                if value > rowmax[u]:
                    rowmax[u] = value
        if root_self:
            first = _first_at_least(holder_doc, holder_ptr[a], holder_ptr[a + 1], lo)
            for t in range(first, holder_ptr[a + 1]):
                best[p, holder_doc[t]] = 1.0
            rowmax[pre_of[a]] = 1.0
    for q in range(tok_ptr[i], tok_ptr[i + 1]):
        token = tok_ids[q]
        first = _first_at_least(post_doc, post_ptr[token], post_ptr[token + 1], lo)
        for t in range(first, post_ptr[token + 1]):
            shared[post_doc[t]] += 1


@nb.njit(**JIT)
def _row_values(i, lo, best, shared, rowmax, values, tag_ptr, tag_pre, tag_pad, tok_size, pooled,
                empty_one):  # fmt: skip
    """(BMA, Jaccard) of row ``i`` against the columns ``[lo, n)``, float64, into ``values``
    (2, n), from the scattered row; resets the columns. (Arrays come one by one: unpacking
    the data tuple inside the column loop would cost reference counting on every pair.)"""
    k_a = tag_ptr[i + 1] - tag_ptr[i]
    for j in range(lo, values.shape[1]):
        k_b = tag_ptr[j + 1] - tag_ptr[j]
        h_a = 0.0
        for p in range(k_a):
            h_a += best[p, j]
            best[p, j] = 0.0
        h_b = 0.0
        if k_b <= PAD_WIDTH:  # fixed trip count (padding reads rowmax[N] = +0.0): no branch miss
            for q in range(PAD_WIDTH):
                h_b += rowmax[tag_pad[j, q]]
        else:
            for q in range(tag_ptr[j], tag_ptr[j + 1]):
                h_b += rowmax[tag_pre[q]]
        if k_a == 0 or k_b == 0:
            values[0, j] = 0.0
        elif pooled:
            n = float(k_a + k_b)
            values[0, j] = h_a / n + h_b / n
        else:
            values[0, j] = (h_a / k_a + h_b / k_b) * 0.5
        s = shared[j]
        shared[j] = 0
        union = tok_size[i] + tok_size[j] - s
        if union == 0:
            values[1, j] = 1.0 if empty_one else 0.0
        else:
            values[1, j] = float(s) / float(union)


@nb.njit(**JIT)
def _scratch(data):
    """Per-thread work arrays: best (max tags, n), shared (n), rowmax (N + 1), values (2, n)."""
    tag_ptr, ic_pre = data[0], data[13]
    n = len(tag_ptr) - 1
    max_tags = 1
    for i in range(n):
        max_tags = max(max_tags, tag_ptr[i + 1] - tag_ptr[i])
    return (np.zeros((max_tags, n)), np.zeros(n, dtype=np.int64), np.zeros(len(ic_pre) + 1),
            np.empty((2, n)))  # fmt: skip


@nb.njit(**JIT)
def _row_bits(i, lo, scratch, bits_b, bits_j, data):
    """Float16 bits of row ``i`` against the columns ``[lo, n)`` into ``bits_*[lo:]``."""
    best, shared, rowmax, values = scratch
    (tag_ptr, _, tag_pre, tag_pad, _, _, tok_size, _, _, _, _, _, _, _, _, _, _, _, _, _, pooled,
     empty_one) = data  # fmt: skip
    _scatter_row(i, lo, best, shared, rowmax, data)
    _row_values(i, lo, best, shared, rowmax, values, tag_ptr, tag_pre, tag_pad, tok_size, pooled,
                empty_one)  # fmt: skip
    float16_bits(values[0, lo:].view(np.int64), bits_b[lo:])
    float16_bits(values[1, lo:].view(np.int64), bits_j[lo:])


@nb.njit(**JIT)
def _count_row(i, counted, m, bits_b, bits_j, band, counts, band_b, band_j, events, n_events):
    """Count the pairs (i, j) of the ``m`` columns ``counted`` for both rows: both signals
    outside their bands — the sure group into ``counts``; one inside — its band histogram
    ``band_b``/``band_j`` [other signal below (0) or above (1) its band, row, offset]; both
    inside — an event (smaller row, larger row, offsets) appended to ``events`` (grown when
    full). Returns the events and their number."""
    low_b, width_b, low_j, width_j = band
    for k in range(m):
        j = counted[k]
        bb, bj = bits_b[j], bits_j[j]
        zb = 0 if bb < low_b else (1 if bb < low_b + width_b else 2)
        zj = 0 if bj < low_j else (1 if bj < low_j + width_j else 2)
        if zb == 1 and zj == 1:
            if n_events == events.shape[0]:
                grown = np.empty((2 * events.shape[0] + 64, 4), dtype=events.dtype)
                grown[:n_events] = events[:n_events]
                events = grown
            events[n_events, 0], events[n_events, 1] = min(i, j), max(i, j)
            events[n_events, 2], events[n_events, 3] = bb - low_b, bj - low_j
            n_events += 1
        elif zb == 1:
            band_b[zj // 2, i, bb - low_b] += 1
            band_b[zj // 2, j, bb - low_b] += 1
        elif zj == 1:
            band_j[zb // 2, i, bj - low_j] += 1
            band_j[zb // 2, j, bj - low_j] += 1
        elif zb == 2 or zj == 2:
            group = 2 if zb == 2 and zj == 2 else (0 if zb == 2 else 1)
            counts[i, group] += 1
            counts[j, group] += 1
    return events, n_events


@nb.njit(**JIT)
def _scan(start, stop, bits_b, bits_j, hist_b, hist_j, low_b, low_j, counted, m):
    """Add the columns ``[start, stop)`` of a row twice to the histograms (the pair stands for
    (i, j) and (j, i)) and list in ``counted`` (from ``m``) those in or above a band; returns
    the new ``m``."""
    for j in range(start, stop):  # hot loop: no array is rebound here (no reference counting)
        bb, bj = bits_b[j], bits_j[j]
        hist_b[bb] += 2
        hist_j[bj] += 2
        if bb >= low_b or bj >= low_j:
            counted[m] = j
            m += 1
    return m


@nb.njit(**JIT)
def upper_pass(row_start, row_stop, prefix, band, hist_b, hist_j, counts, band_b, band_j, events,
               n_events, data):  # fmt: skip
    """Rows ``[row_start, row_stop)`` against the columns ``j ≥ i`` and, when ``prefix`` > 0,
    the columns ``j < prefix`` too (rows appended to a databank whose first ``prefix`` rows had
    their pass: ``prefix ≤ row_start``; every pair with an appended row, once), added in place:
    every ordered pair to the float16 histograms ``hist_b``/``hist_j`` (the unordered pair
    (i, j), j ≠ i, stands for (i, j) and (j, i)); every pair j ≠ i to the group counts of both
    rows under the float16 bands ``band = (low_b, width_b, low_j, width_j)``
    (:func:`_count_row`; width 0 at the thresholds: the exact groups); returns the events and
    their number."""
    scratch = _scratch(data)
    n = scratch[1].shape[0]
    bits_b, bits_j = np.empty(n, dtype=np.uint16), np.empty(n, dtype=np.uint16)
    counted = np.empty(n, dtype=np.int64)  # the columns of a row with a value in or above a band
    low_b, low_j = band[0], band[2]
    for i in range(row_start, row_stop):
        _row_bits(i, 0 if prefix > 0 else i, scratch, bits_b, bits_j, data)
        hist_b[bits_b[i]] += 1
        hist_j[bits_j[i]] += 1
        m = _scan(0, prefix, bits_b, bits_j, hist_b, hist_j, low_b, low_j, counted, 0)
        m = _scan(i + 1, n, bits_b, bits_j, hist_b, hist_j, low_b, low_j, counted, m)
        events, n_events = _count_row(
            i, counted, m, bits_b, bits_j, band, counts, band_b, band_j, events, n_events
        )
    return events, n_events


@nb.njit(**JIT)
def full_rows(rows, out_b, out_j, data):
    """Float16 bits of both signals of each row in ``rows`` against every column, into
    ``out_b``/``out_j`` (len(rows), n) uint16."""
    scratch = _scratch(data)
    for r in range(len(rows)):
        _row_bits(rows[r], 0, scratch, out_b[r], out_j[r], data)
