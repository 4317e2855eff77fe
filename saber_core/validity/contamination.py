"""Two-way word n-gram containment between benchmark texts and an external corpus (issue 8).

Containment of text A in text B, with ``G(·)`` the SET of word n-grams of a text::

    containment(A in B) = |G(A) ∩ G(B)| / |G(A)|        (0 when G(A) is empty)

It is asymmetric: a short benchmark query copied inside a long training document has
containment(query in doc) = 1 but containment(doc in query) small, and a short training snippet
copied inside a long benchmark candidate is the reverse. A one-sided gate misses one of the two
(the Recipe-Matching audit missed reverse overlap that way), so the gate here flags a pair when
``max(containment(bench in ext), containment(ext in bench)) ≥ threshold`` (default 0.35).

Words: the project tokenizer's normalisation (:mod:`saber_core.signals.jaccard`: Unicode NFKC,
lower-case,
tokens = runs of ``[\\p{L}\\p{N}]+``) but stop words are KEPT and token order and repeats are
kept: n-grams are about copied word sequences, and function words are part of a copied sentence
(dropping them would make unrelated sentences share n-grams). A text with fewer than ``n``
tokens has no n-grams and containment 0 both ways.

n: default 8 words. 8-grams are the unit of the PaLM contamination analysis; GPT-3 used 13-grams,
which are longer than many competition problem statements once formulas are split into tokens,
and short n (≤ 5) matches mathematical boilerplate ("find all positive integers n such") across
unrelated problems.

Hashing: each distinct token gets a 64-bit content hash (BLAKE2b, stable across runs and
versions), an n-gram ``t_0 … t_{n−1}`` the polynomial hash ``Σ_k t_k · P^k mod 2^64`` passed
through the SplitMix64 finalizer. Different n-grams collide with probability about
``K² / 2^65`` for ``K`` distinct n-grams (≈ 3·10⁻⁶ at K = 10⁷). Texts become rows of binary
sparse matrices over the distinct n-gram hashes, and all intersections at once are the sparse
product ``B · Eᵀ``, computed in blocks of benchmark rows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
import scipy.sparse as sp

from saber_core.signals.jaccard import token_frame

DEFAULT_NGRAM = 8
DEFAULT_THRESHOLD = 0.35
_P = np.uint64(0x9E3779B97F4A7C15)  # odd multiplier of the polynomial hash


@dataclass(frozen=True)
class NGramSets:
    """The distinct hashed word n-grams of ``n_texts`` texts.

    ``rows`` (K,) int64 text index, ``hashes`` (K,) uint64, sorted by (row, hash) and unique per
    row; ``sizes`` (n_texts,) int64 = |G(text)|; ``n`` the n-gram length.
    """

    rows: np.ndarray
    hashes: np.ndarray
    sizes: np.ndarray
    n: int

    @property
    def n_texts(self) -> int:
        """Number of texts."""
        return len(self.sizes)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def word_tokens(texts: Sequence[str | None] | pl.Series) -> tuple[np.ndarray, list[str]]:
    """Tokens of every text in order: (row index per token (int64), token strings).

    NFKC, lower-case, ``[\\p{L}\\p{N}]+`` runs; stop words kept; ``None`` / empty → no token.
    """
    frame = token_frame(texts, sets=False)
    return frame["row"].to_numpy().astype(np.int64), frame["token"].to_list()


def _blake64(token: str) -> int:
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "little")


def _token_hashes(frame: pl.DataFrame) -> np.ndarray:
    """64-bit BLAKE2b hash of each token of ``frame`` (computed once per distinct token)."""
    uniq = frame["token"].unique().to_list()
    if not uniq:
        return np.zeros(0, dtype=np.uint64)
    hashes = pl.Series([_blake64(t) for t in uniq], dtype=pl.UInt64)
    return (
        frame["token"]
        .replace_strict(pl.Series(uniq, dtype=pl.String), hashes, return_dtype=pl.UInt64)
        .to_numpy()
    )


def ngram_sets(texts: Sequence[str | None] | pl.Series, n: int = DEFAULT_NGRAM) -> NGramSets:
    """Hashed word n-gram sets of ``texts`` (module docstring); vectorized over all texts."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    n_texts = len(texts)
    frame = token_frame(texts, sets=False)
    row = frame["row"].to_numpy().astype(np.int64)
    t = _token_hashes(frame)
    counts = np.bincount(row, minlength=n_texts)
    # Tokens are in text order; an n-gram starts at every token with >= n - 1 tokens after it
    # in the same text.
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pos = np.arange(len(row)) - starts[row] if len(row) else np.zeros(0, dtype=np.int64)
    valid = pos + n <= counts[row]
    first = np.flatnonzero(valid)
    h = np.zeros(len(first), dtype=np.uint64)
    mult = np.uint64(1)
    with np.errstate(over="ignore"):
        for k in range(n):
            h += t[first + k] * mult
            mult = mult * _P
    h = _splitmix64(h)
    r = row[first]
    order = np.lexsort((h, r))
    r, h = r[order], h[order]
    keep = np.ones(len(r), dtype=bool)
    keep[1:] = (r[1:] != r[:-1]) | (h[1:] != h[:-1])
    r, h = r[keep], h[keep]
    return NGramSets(rows=r, hashes=h, sizes=np.bincount(r, minlength=n_texts), n=n)


@dataclass(frozen=True)
class Containment:
    """Stored pairs (benchmark text ``bench``, external text ``external``) sharing n-grams.

    All arrays (P,): ``shared`` = |G(b) ∩ G(e)|, ``bench_in_external`` = shared / |G(b)|,
    ``external_in_bench`` = shared / |G(e)|, ``score`` = the max of the two. Pairs absent from
    the arrays share no n-gram (or were below ``min_score``). ``bench_sizes`` / ``external_sizes``
    are |G| per text.
    """

    bench: np.ndarray
    external: np.ndarray
    shared: np.ndarray
    bench_in_external: np.ndarray
    external_in_bench: np.ndarray
    score: np.ndarray
    bench_sizes: np.ndarray
    external_sizes: np.ndarray

    def flagged(self, threshold: float = DEFAULT_THRESHOLD) -> np.ndarray:
        """Indices into the stored pairs with ``score ≥ threshold`` (both directions)."""
        return np.flatnonzero(self.score >= threshold)

    def max_per_bench(self) -> tuple[np.ndarray, np.ndarray]:
        """Per benchmark text: the highest ``score`` over external texts (0 if none shares an
        n-gram) and the external text reaching it (−1 if none); ties → lowest external index."""
        nb = len(self.bench_sizes)
        best = np.zeros(nb)
        arg = np.full(nb, -1, dtype=np.int64)
        if len(self.score):
            order = np.lexsort((self.external, -self.score, self.bench))
            first = np.r_[True, self.bench[order][1:] != self.bench[order][:-1]]
            top = order[first]
            best[self.bench[top]] = self.score[top]
            arg[self.bench[top]] = self.external[top]
        return best, arg


def _binary_matrix(sets: NGramSets, columns: np.ndarray, n_cols: int) -> sp.csr_matrix:
    return sp.csr_matrix(
        (np.ones(len(columns), dtype=np.float32), (sets.rows, columns)),
        shape=(sets.n_texts, n_cols),
    )


def containment(
    bench: NGramSets | Sequence[str | None],
    external: NGramSets | Sequence[str | None],
    n: int = DEFAULT_NGRAM,
    min_score: float = 0.0,
    block_rows: int = 2048,
) -> Containment:
    """Two-way containment of every benchmark text against every external text.

    Texts are turned into :class:`NGramSets` with ``n`` (pass prebuilt sets to reuse them; their
    ``n`` must match). Intersections come from the sparse product ``B_blk · Eᵀ`` for blocks of
    ``block_rows`` benchmark texts (float32 counts, exact below 2^24 shared n-grams). Only pairs
    sharing at least one n-gram and with ``score ≥ min_score`` are stored, sorted by
    (bench, external); raising ``min_score`` bounds the output when common boilerplate n-grams
    link many unrelated texts.
    """
    b = bench if isinstance(bench, NGramSets) else ngram_sets(bench, n)
    e = external if isinstance(external, NGramSets) else ngram_sets(external, n)
    if b.n != e.n:
        raise ValueError(f"n-gram lengths differ: bench n={b.n}, external n={e.n}")
    vocab, inverse = np.unique(np.concatenate([b.hashes, e.hashes]), return_inverse=True)
    inverse = inverse.reshape(-1)
    bm = _binary_matrix(b, inverse[: len(b.hashes)], len(vocab))
    em_t = _binary_matrix(e, inverse[len(b.hashes) :], len(vocab)).T.tocsr()
    parts: list[tuple[np.ndarray, ...]] = []
    for start in range(0, b.n_texts, block_rows):
        inter = (bm[start : start + block_rows] @ em_t).tocoo()
        i = inter.row.astype(np.int64) + start
        j = inter.col.astype(np.int64)
        s = np.rint(inter.data).astype(np.int64)
        c_b = s / b.sizes[i]
        c_e = s / e.sizes[j]
        score = np.maximum(c_b, c_e)
        keep = (s > 0) & (score >= min_score)
        parts.append((i[keep], j[keep], s[keep], c_b[keep], c_e[keep], score[keep]))
    if parts:
        i, j, s, c_b, c_e, score = (np.concatenate(v) for v in zip(*parts, strict=True))
    else:
        i = j = s = np.zeros(0, dtype=np.int64)
        c_b = c_e = score = np.zeros(0)
    order = np.lexsort((j, i))
    return Containment(
        bench=i[order],
        external=j[order],
        shared=s[order],
        bench_in_external=c_b[order],
        external_in_bench=c_e[order],
        score=score[order],
        bench_sizes=b.sizes,
        external_sizes=e.sizes,
    )


def contamination_flags(
    bench_ids: Sequence[str],
    bench_texts: Sequence[str | None],
    query_ids: set[str],
    external_ids: Sequence[str],
    external_texts: Sequence[str | None],
    n: int = DEFAULT_NGRAM,
    threshold: float = DEFAULT_THRESHOLD,
) -> pl.DataFrame:
    """The flagged (benchmark text, external text) pairs as a table: ``doc_id, is_query,
    external_id, bench_in_external, external_in_bench, score`` (score ≥ ``threshold``)."""
    result = containment(bench_texts, external_texts, n=n, min_score=threshold)
    flagged = result.flagged(threshold)
    bench = np.asarray(bench_ids, dtype=object)[result.bench[flagged]]
    return pl.DataFrame(
        {
            "doc_id": bench,
            "is_query": [d in query_ids for d in bench],
            "external_id": np.asarray(external_ids, dtype=object)[result.external[flagged]],
            "bench_in_external": result.bench_in_external[flagged],
            "external_in_bench": result.external_in_bench[flagged],
            "score": result.score[flagged],
        },
        schema_overrides={"doc_id": pl.String, "external_id": pl.String, "is_query": pl.Boolean},
    )
