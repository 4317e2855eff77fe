"""Tokenizer and Jaccard signal: hand-computed values and a brute-force set reference."""

import re
import unicodedata

import numpy as np
import polars as pl
import pytest

from saber_core.signals import jaccard as text
from saber_core.signals.jaccard import (
    STOP_WORDS,
    TOKENIZER_VERSION,
    build_token_matrix,
    jaccard_dense_block,
    jaccard_many_vs_many,
    jaccard_one_vs_many,
    tokenize,
)

# Python's [^\W_] is "letter or digit" (str.isalnum), the same classes as [\p{L}\p{N}].
_REFERENCE_PATTERN = re.compile(r"[^\W_]+")


def reference_tokens(s: str | None) -> set[str]:
    """Independent pure-Python tokenizer: NFKC, lower, letter/digit runs, minus stop words."""
    if s is None:
        return set()
    words = _REFERENCE_PATTERN.findall(unicodedata.normalize("NFKC", s).lower())
    return set(words) - set(STOP_WORDS)


def reference_jaccard(a: set[str], b: set[str]) -> float:
    union = a | b
    return len(a & b) / len(union) if union else 0.0


def pair(a: str, b: str) -> float:
    docs = build_token_matrix([b])
    return float(jaccard_one_vs_many(build_token_matrix([a], docs.vocabulary), docs)[0])


def test_tokenize_case_punctuation_and_stop_words():
    assert tokenize("The SUM of the primes, is odd!") == {"sum", "primes", "odd"}
    assert tokenize("x-axis; f(x)=2x+1 (mod 7).") == {"x", "axis", "f", "2x", "1", "mod", "7"}
    assert tokenize(None) == frozenset() and tokenize("") == frozenset()
    assert tokenize("the of and, is!") == frozenset()  # only stop words and punctuation


def test_unicode_normalisation():
    assert tokenize("Éléments") == tokenize("ÉLÉMENTS") == {"éléments"}
    # decomposed E + combining acute (NFD) equals the precomposed form after NFKC
    assert tokenize("E\u0301le\u0301ments") == {"éléments"}
    assert tokenize("ﬁnite x²") == {"finite", "x2"}  # compatibility ligature and superscript
    assert pair("Éléments d'Euclide", "ÉLÉMENTS D'EUCLIDE") == 1.0


def test_hand_computed_jaccard():
    # A = {prove, sum, two, squares, even}  ("the", "of" are stop words)
    # B = {sum, squares, odd}               ("The", "is" stop words; case and "!" ignored)
    # |A ∩ B| = 2 (sum, squares), |A ∪ B| = 5 + 3 - 2 = 6
    a = "Prove the sum of two squares is even."
    b = "The SUM of squares is odd!"
    assert pair(a, b) == pytest.approx(2 / 6)
    # A = {pigeonhole, boxes}, B = {pigeonhole, colours, boxes, parity}: 2 / 4
    assert pair("Pigeonhole on the boxes", "pigeonhole: colours, boxes; parity") == 0.5


def test_identical_disjoint_empty_and_symmetry():
    assert pair("Apply AM-GM to the terms", "apply am gm to THE terms.") == 1.0
    assert tokenize("AM-GM on even terms") == {"am", "gm", "even", "terms"}  # math, not stop
    assert pair("induction on n", "angle chasing") == 0.0
    assert pair("", "") == 0.0
    assert pair("the of", "") == 0.0  # stop words only: both sets empty
    assert pair("", "angle chasing") == 0.0
    a, b = "Count pairs by parity of sums", "parity argument on the pairs of cells"
    # A = {count, pairs, parity, sums}, B = {parity, argument, pairs, cells}: 2 / (4 + 4 - 2)
    assert pair(a, b) == pair(b, a) == pytest.approx(2 / 6)


def test_unseen_query_tokens_count_in_the_union():
    docs = build_token_matrix(["modular arithmetic residues", None])
    # "inverse" and "fermat" are not in the docs' vocabulary: they have no column
    # but still make |q| = 4, so J = 2 / (4 + 3 - 2), not 2 / 3.
    queries = build_token_matrix(["Modular inverse via Fermat residues"], docs.vocabulary)
    assert queries.matrix.shape == (1, 3)
    assert queries.set_sizes.tolist() == [4]
    np.testing.assert_allclose(jaccard_one_vs_many(queries, docs), [2 / 5, 0.0], rtol=1e-6)
    np.testing.assert_allclose(jaccard_many_vs_many(queries, docs).toarray(), [[2 / 5, 0.0]])


def test_different_vocabularies_are_rejected():
    docs = build_token_matrix(["alpha beta"])
    queries = build_token_matrix(["beta gamma"])  # own vocabulary: another column space
    with pytest.raises(ValueError, match="vocabular"):
        jaccard_dense_block(queries, docs)
    with pytest.raises(ValueError, match="vocabulary"):
        build_token_matrix(["x"], vocabulary=pl.DataFrame({"token": ["x"]}))


def random_texts(rng: np.random.Generator, n: int) -> list[str | None]:
    words = ["Prime", "prime", "sum", "the", "OF", "Angle", "circle", "mod", "n2", "x",
             "Élan", "élan", "ﬁx", "is", "and", "parity", "3", "three", "can't", "gcd"]  # fmt: skip
    seps = [" ", ", ", "-", "; ", "(", ") ", "! ", "  "]
    texts: list[str | None] = []
    for _ in range(n):
        k = int(rng.integers(0, 9))
        if k == 0:
            texts.append(None if rng.random() < 0.5 else "")
            continue
        parts = [str(rng.choice(words)) + str(rng.choice(seps)) for _ in range(k)]
        texts.append("".join(parts))
    return texts


def test_vectorized_equals_brute_force_sets():
    rng = np.random.default_rng(7)
    docs_text, query_text = random_texts(rng, 300), random_texts(rng, 40)
    docs = build_token_matrix(docs_text)
    queries = build_token_matrix(pl.Series(query_text), vocabulary=docs.vocabulary)
    doc_sets = [reference_tokens(t) for t in docs_text]
    query_sets = [reference_tokens(t) for t in query_text]
    assert any(not s for s in doc_sets) and any(not s for s in query_sets)  # empties covered
    assert docs.set_sizes.tolist() == [len(s) for s in doc_sets]
    assert queries.set_sizes.tolist() == [len(s) for s in query_sets]
    vocab = docs.vocabulary["token"].to_list()
    assert [{vocab[c] for c in docs.matrix[i].indices} for i in range(300)] == doc_sets
    expected = np.array([[reference_jaccard(q, d) for d in doc_sets] for q in query_sets])
    dense = jaccard_dense_block(queries, docs)
    assert dense.dtype == np.float32 and dense.shape == (40, 300)
    np.testing.assert_allclose(dense, expected, rtol=1e-6, atol=0)
    sparse = jaccard_many_vs_many(queries, docs)
    assert sparse.nnz == np.count_nonzero(expected)  # only nonzero intersections stored
    np.testing.assert_allclose(sparse.toarray(), expected, rtol=1e-6, atol=0)
    for i in (0, 5, 39):
        np.testing.assert_array_equal(jaccard_one_vs_many(queries.rows(i), docs), dense[i])
    # a doc row against the whole corpus: its own score is 1 unless its set is empty
    self_scores = jaccard_one_vs_many(3, docs)
    reference = [reference_jaccard(doc_sets[3], d) for d in doc_sets]
    np.testing.assert_allclose(self_scores, reference, rtol=1e-6)
    assert jaccard_dense_block(docs, docs).diagonal().tolist() == [float(bool(s)) for s in doc_sets]


def test_tokenize_matches_bulk_rows():
    texts = ["Prime sums, mod 3", None, "the Angle of a circle"]
    matrix = build_token_matrix(texts)
    vocab = matrix.vocabulary["token"].to_list()
    for i, t in enumerate(texts):
        assert tokenize(t) == {vocab[c] for c in matrix.matrix[i].indices}


def test_stop_words_are_well_formed():
    assert len(STOP_WORDS) == len(set(STOP_WORDS))
    assert 120 <= len(STOP_WORDS) <= 180
    for word in STOP_WORDS:  # each is a single token that survives normalisation unchanged
        assert _REFERENCE_PATTERN.fullmatch(word)
        assert unicodedata.normalize("NFKC", word).lower() == word
    assert not {"sum", "prime", "triangle", "one", "two", "equal", "i", "x"} & set(STOP_WORDS)


def test_tokenizer_version_tracks_pattern_and_stop_list(monkeypatch):
    assert TOKENIZER_VERSION == text._tokenizer_version(text.TOKEN_PATTERN, STOP_WORDS)
    assert re.fullmatch(r"saber-jaccard-v1\+[0-9a-f]{8}", TOKENIZER_VERSION)
    assert text._tokenizer_version(text.TOKEN_PATTERN, (*STOP_WORDS, "sum")) != TOKENIZER_VERSION
    assert text._tokenizer_version(r"\w+", STOP_WORDS) != TOKENIZER_VERSION
    # the version is a function of the word set, not of how the tuple is ordered
    assert text._tokenizer_version(text.TOKEN_PATTERN, STOP_WORDS[::-1]) == TOKENIZER_VERSION
    # and the stop list really drives tokenization
    monkeypatch.setattr(text, "STOP_WORDS", (*STOP_WORDS, "sum"))
    assert tokenize("sum of squares") == {"squares"}


def test_pool_jaccard_equals_the_one_vs_many_values_at_the_pool_columns():
    from saber_core.signals.jaccard import pool_jaccard

    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(30)]
    texts = [" ".join(rng.choice(words, size=rng.integers(0, 9))) for _ in range(40)]
    tokens = build_token_matrix(texts)
    queries = np.array([0, 5, 7])
    pools = rng.integers(0, 40, size=(3, 6))
    out = pool_jaccard(tokens, queries, pools)
    for i, q in enumerate(queries):
        np.testing.assert_array_equal(out[i], jaccard_one_vs_many(int(q), tokens)[pools[i]])
