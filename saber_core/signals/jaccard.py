"""The Jaccard summary signal: a fixed, versioned tokenizer and sparse Jaccard similarity.

Tokenizer (version ``TOKENIZER_VERSION``), applied to every text:

1. Unicode NFKC normalisation (``"ﬁ"`` -> ``"fi"``, ``"x²"`` -> ``"x2"``);
2. lower-casing (Unicode, no locale);
3. tokens = maximal runs of the regex ``[\\p{L}\\p{N}]+`` (Unicode letters and digits, so
   punctuation, apostrophes, hyphens and symbols separate tokens: ``"can't"`` -> ``can``, ``t``);
4. tokens in ``STOP_WORDS`` are dropped;
5. the text becomes the *set* of its remaining tokens. ``None`` or empty text -> empty set.

Known quirk: a combining mark is neither a letter nor a digit, so a character that lower-cases
to a base letter plus a mark that has no precomposed form splits a word (``"İ"`` -> ``i`` +
U+0307). Everything is done in bulk with polars string expressions; ``tokenize`` for one text
runs the same bulk path.

Jaccard: J(A, B) = |A ∩ B| / |A ∪ B| with |A ∪ B| = |A| + |B| − |A ∩ B|, and J = 0 when both sets
are empty. Texts are rows of a binary sparse matrix, so all intersections at once are the
product Q · Dᵀ.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl
import scipy.sparse as sp

TOKEN_PATTERN = r"[\p{L}\p{N}]+"

# A fixed list of English function words: articles and determiners, pronouns, auxiliary and modal
# verbs, prepositions, conjunctions, connective adverbs and contraction stems. Deliberately NOT
# included, because they can carry mathematical meaning: number and ordinal words, comparison and
# quantity words (more, less, same, many), "even" (parity), "am" (as in AM-GM), spatial
# prepositions (between, above, along, inside) and single letters other than "a" (variables such
# as i, d, m, s, t; so "can't" and "triangle's" leave a "t" / "s" token).
STOP_WORDS: tuple[str, ...] = (
    # articles and determiners
    "a", "an", "the", "this", "that", "these", "those", "some", "any", "each", "every", "either",
    "neither", "all", "both", "no", "such", "other", "another", "own",
    # pronouns
    "me", "my", "mine", "myself", "we", "us", "our", "ours", "ourselves", "you", "your", "yours",
    "yourself", "yourselves", "he", "him", "his", "himself", "she", "her", "hers", "herself",
    "it", "its", "itself", "they", "them", "their", "theirs", "themselves", "what", "which",
    "who", "whom", "whose", "whoever", "whatever", "whichever",
    # auxiliary and modal verbs
    "is", "are", "was", "were", "be", "been", "being", "have", "has", "had", "having",
    "do", "does", "did", "doing", "can", "cannot", "could", "may", "might", "must", "shall",
    "should", "will", "would",
    # prepositions
    "about", "after", "against", "at", "before", "by", "during", "for", "from", "in", "into",
    "of", "off", "on", "onto", "out", "since", "to", "toward", "towards", "until", "upon", "via",
    "with", "without",
    # conjunctions
    "and", "or", "but", "nor", "if", "then", "else", "so", "because", "while", "whereas",
    "although", "though", "unless", "whether", "as", "than", "yet",
    # connective and common adverbs
    "not", "only", "also", "just", "very", "too", "quite", "rather", "here", "there", "when",
    "where", "why", "how", "again", "ever", "never", "now", "still", "already", "thus",
    "hence", "therefore", "however", "moreover", "furthermore", "instead", "otherwise", "perhaps",
    "indeed",
    # contraction stems left by the pattern ("don't" -> "don", "t")
    "don", "doesn", "didn", "isn", "aren", "wasn", "weren", "hasn", "haven", "hadn", "wouldn",
    "shouldn", "couldn",
)  # fmt: skip


def _tokenizer_version(pattern: str, stop_words: Sequence[str]) -> str:
    """``saber-jaccard-v1+`` and the first 8 hex digits of sha256(pattern, sorted stop words).

    The ``v1`` prefix stands for the fixed pipeline (NFKC, lower-case, regex, stop words, set);
    changing a pipeline step must bump it.
    """
    payload = pattern + "\n" + "\n".join(sorted(set(stop_words)))
    return "saber-jaccard-v1+" + hashlib.sha256(payload.encode("utf-8")).hexdigest()[:8]


TOKENIZER_VERSION = _tokenizer_version(TOKEN_PATTERN, STOP_WORDS)


def token_frame(texts: Sequence[str | None] | pl.Series, *, sets: bool = True) -> pl.DataFrame:
    """Long frame ``(row: u32, token: str)`` of the project tokenizer: NFKC, lower-case, runs of
    ``TOKEN_PATTERN``. ``sets=True`` (Jaccard): one row per distinct token of each text, stop
    words removed; ``sets=False`` (word n-grams): every token in text order, repeats and stop
    words kept."""
    tokens = pl.col("text").str.normalize("NFKC").str.to_lowercase().str.extract_all(TOKEN_PATTERN)
    frame = (
        pl.DataFrame({"text": pl.Series("text", texts, dtype=pl.String)})
        .with_row_index("row")
        .select("row", (tokens.list.unique() if sets else tokens).alias("token"))
        .explode("token")
        .drop_nulls("token")
    )
    return frame.filter(~pl.col("token").is_in(list(STOP_WORDS))) if sets else frame


def tokenize(text: str | None) -> frozenset[str]:
    """The token set of one text (the same bulk path as ``build_token_matrix``)."""
    return frozenset(token_frame([text])["token"].to_list())


@dataclass(frozen=True)
class TokenMatrix:
    """Token sets of ``n_texts`` texts as a binary sparse matrix.

    ``matrix``: CSR, shape (n_texts, len(vocabulary)), float32 with every stored value 1.0
    (float32 counts are exact up to 2**24, far above any text's token count, and products stay
    float32). ``vocabulary``: frame ``(column: u32, token: str)`` with ``column`` = row position.
    ``set_sizes``: int32 |set| per text, counting tokens absent from the vocabulary too, so the
    Jaccard union stays right when texts are encoded against another corpus' vocabulary.
    """

    matrix: sp.csr_matrix
    vocabulary: pl.DataFrame
    set_sizes: np.ndarray

    @property
    def n_texts(self) -> int:
        """Number of texts (rows)."""
        return self.matrix.shape[0]

    def rows(self, index: int | slice | Sequence[int] | np.ndarray) -> TokenMatrix:
        """The sub-matrix of the given rows, sharing the vocabulary (an int keeps one row)."""
        index = [index] if isinstance(index, int | np.integer) else index
        return TokenMatrix(self.matrix[index], self.vocabulary, self.set_sizes[index])


def build_token_matrix(
    texts: Sequence[str | None] | pl.Series, vocabulary: pl.DataFrame | None = None
) -> TokenMatrix:
    """Tokenize ``texts`` in bulk into a ``TokenMatrix``.

    Without ``vocabulary`` the columns are the texts' own tokens, sorted. With one (e.g. a
    corpus' ``TokenMatrix.vocabulary``, to encode queries against it) the columns are its
    tokens; other tokens get no column but still count in ``set_sizes``.
    """
    tokens = token_frame(texts)
    n_texts = len(texts)
    if vocabulary is None:
        vocabulary = tokens.select(pl.col("token").unique().sort()).with_row_index("column")
    elif vocabulary.columns != ["column", "token"] or not np.array_equal(
        vocabulary["column"].to_numpy(), np.arange(vocabulary.height)
    ):
        raise ValueError("vocabulary must be a frame (column, token) with column = 0..V-1")
    set_sizes = np.bincount(tokens["row"].to_numpy(), minlength=n_texts).astype(np.int32)
    hits = tokens.join(vocabulary, on="token", how="inner")
    rows, cols = hits["row"].to_numpy(), hits["column"].to_numpy()
    matrix = sp.csr_matrix(
        (np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=(n_texts, vocabulary.height)
    )
    return TokenMatrix(matrix, vocabulary, set_sizes)


def _check_shared_vocabulary(queries: TokenMatrix, docs: TokenMatrix) -> None:
    if queries.vocabulary is not docs.vocabulary and not queries.vocabulary.equals(docs.vocabulary):
        raise ValueError(
            "queries and docs have different vocabularies: "
            "build the queries with build_token_matrix(texts, vocabulary=docs.vocabulary)"
        )


def jaccard_dense_block(queries: TokenMatrix, docs: TokenMatrix) -> np.ndarray:
    """Dense (n_queries, n_docs) float32 Jaccard: I = Q · Dᵀ, J = I / (|q| + |d| − I), 0/0 = 0.

    Memory is about 4 · n_queries · (n_docs + V) bytes: call it on blocks of queries.
    """
    _check_shared_vocabulary(queries, docs)
    q_dense = queries.matrix.toarray()
    inter = np.ascontiguousarray((docs.matrix @ q_dense.T).T, dtype=np.float32)
    union = np.add.outer(queries.set_sizes.astype(np.float32), docs.set_sizes.astype(np.float32))
    union -= inter
    # Where the union is empty both sets are empty, and inter (hence J) is already 0.
    np.divide(inter, union, out=inter, where=union > 0)
    return inter


def jaccard_one_vs_many(query: TokenMatrix | int, docs: TokenMatrix) -> np.ndarray:
    """Jaccard of one text against every doc, shape (n_docs,) float32.

    ``query`` is a one-row ``TokenMatrix`` (built with ``vocabulary=docs.vocabulary``) or the
    index of a row of ``docs``.
    """
    if not isinstance(query, TokenMatrix):
        query = docs.rows(int(query))
    if query.n_texts != 1:
        raise ValueError(f"expected one query row, got {query.n_texts}")
    return jaccard_dense_block(query, docs)[0]


def jaccard_many_vs_many(queries: TokenMatrix, docs: TokenMatrix) -> sp.csr_matrix:
    """Sparse (n_queries, n_docs) float32 Jaccard storing only pairs with |q ∩ d| > 0.

    I = Q · Dᵀ (sparse), then J = I / (|q| + |d| − I) on the stored entries; absent pairs are 0.
    """
    _check_shared_vocabulary(queries, docs)
    inter = sp.csr_matrix(queries.matrix @ docs.matrix.T, dtype=np.float32)
    inter.sort_indices()
    rows = np.repeat(np.arange(inter.shape[0]), np.diff(inter.indptr))
    union = queries.set_sizes[rows] + docs.set_sizes[inter.indices] - inter.data
    inter.data = (inter.data / union).astype(np.float32)
    return inter


def pool_jaccard(tokens: TokenMatrix, query_rows: np.ndarray, pool_rows: np.ndarray) -> np.ndarray:
    """(Q, n) float32 Jaccard of query ``q``'s text (row ``query_rows[q]`` of ``tokens``) with
    each of its pool members' texts (rows ``pool_rows[q]``): the same values as
    :func:`jaccard_one_vs_many` at those columns, without scoring the whole corpus."""
    pool_rows = np.asarray(pool_rows, dtype=np.int64)
    out = np.zeros(pool_rows.shape, dtype=np.float32)
    for q, (row, pool) in enumerate(zip(np.asarray(query_rows).tolist(), pool_rows, strict=True)):
        out[q] = jaccard_dense_block(tokens.rows([row]), tokens.rows(pool))[0]
    return out
