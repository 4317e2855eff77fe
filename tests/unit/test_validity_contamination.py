"""Two-way n-gram containment: hand examples, both directions, brute-force reference."""

from __future__ import annotations

import re
import unicodedata

import numpy as np
import pytest

from saber_core.validity.contamination import (
    DEFAULT_THRESHOLD,
    containment,
    ngram_sets,
    word_tokens,
)


def ref_grams(text: str, n: int) -> set[tuple[str, ...]]:
    tokens = re.findall(r"[^\W_]+", unicodedata.normalize("NFKC", text).lower())
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


def dense(c, nb: int, ne: int) -> tuple[np.ndarray, np.ndarray]:
    b_in_e, e_in_b = np.zeros((nb, ne)), np.zeros((nb, ne))
    b_in_e[c.bench, c.external] = c.bench_in_external
    e_in_b[c.bench, c.external] = c.external_in_bench
    return b_in_e, e_in_b


def test_hand_example_exact_fractions():
    c = containment(["a b c d e"], ["x a b c d y"], n=3)
    # G(A) = {abc, bcd, cde}, G(B) = {xab, abc, bcd, cdy}: 2 shared
    np.testing.assert_array_equal(c.shared, [2])
    np.testing.assert_allclose(c.bench_in_external, [2 / 3])
    np.testing.assert_allclose(c.external_in_bench, [2 / 4])
    np.testing.assert_allclose(c.score, [2 / 3])
    np.testing.assert_array_equal(c.bench_sizes, [3])
    np.testing.assert_array_equal(c.external_sizes, [4])


SHORT = "Find all positive integers n such that n squared plus one divides n factorial plus one"
LONG = (
    "Lecture notes on elementary number theory, chapter three, exercises with full solutions. "
    f"Exercise 7. {SHORT}. Solution: we first reduce modulo small primes and then apply "
    "Wilson's theorem to the remaining cases, which settles every case except finitely many "
    "that are checked by hand; the answer is the empty set apart from trivial values."
)


def test_short_text_inside_long_one_is_caught_from_either_side():
    forward = containment([SHORT], [LONG])  # benchmark query copied inside a training doc
    reverse = containment([LONG], [SHORT])  # training snippet copied inside a benchmark text
    assert forward.bench_in_external[0] == 1.0
    assert reverse.external_in_bench[0] == 1.0
    # the other direction is small: a one-sided gate would miss one of the two cases
    assert forward.external_in_bench[0] < DEFAULT_THRESHOLD
    assert reverse.bench_in_external[0] < DEFAULT_THRESHOLD
    # the gate takes the max of both directions, so both are flagged
    assert forward.score[0] == reverse.score[0] == 1.0
    assert len(forward.flagged()) == len(reverse.flagged()) == 1
    best, arg = reverse.max_per_bench()
    assert best[0] == 1.0 and arg[0] == 0


def test_normalisation_keeps_stop_words_and_order():
    # NFKC (full-width letters, ligature), case and punctuation do not matter
    c = containment(["ＴＨＥ ﬁnal Answer, is: x"], ["the final answer is x"], n=2)
    np.testing.assert_allclose(c.score, [1.0])
    # stop words are tokens: dropping them breaks the shared n-grams
    c = containment(["the sum of the roots"], ["sum roots"], n=2)
    assert len(c.score) == 0
    # word order matters
    assert len(containment(["a b c"], ["c b a"], n=2).score) == 0
    _, tokens = word_tokens(["Don't stop"])
    assert tokens == ["don", "t", "stop"]


def test_sets_deduplicate_and_short_texts_have_no_ngrams():
    s = ngram_sets(["a b a b a b", "one two", None, ""], n=2)
    np.testing.assert_array_equal(s.sizes, [2, 1, 0, 0])
    s8 = ngram_sets(["only five words in here"], n=8)
    assert s8.sizes[0] == 0
    c = containment(["only five words in here"], ["only five words in here"], n=8)
    assert len(c.score) == 0  # nothing to compare: containment 0 both ways


def test_matches_brute_force_on_random_texts():
    rng = np.random.default_rng(0)
    words = np.array(["alpha", "beta", "gamma", "delta", "x", "y", "2", "the"])
    bench = [" ".join(rng.choice(words, rng.integers(0, 25))) for _ in range(15)]
    ext = [" ".join(rng.choice(words, rng.integers(0, 40))) for _ in range(12)]
    for n in (2, 3):
        c = containment(bench, ext, n=n, block_rows=4)
        b_in_e, e_in_b = dense(c, 15, 12)
        for i, bt in enumerate(bench):
            gb = ref_grams(bt, n)
            for j, et in enumerate(ext):
                ge = ref_grams(et, n)
                shared = len(gb & ge)
                assert b_in_e[i, j] == pytest.approx(shared / len(gb) if gb else 0.0)
                assert e_in_b[i, j] == pytest.approx(shared / len(ge) if ge else 0.0)
        # blocks, prebuilt sets and min_score filtering agree
        same = containment(ngram_sets(bench, n), ngram_sets(ext, n), block_rows=100)
        np.testing.assert_array_equal(same.shared, c.shared)
        high = containment(bench, ext, n=n, min_score=0.35)
        np.testing.assert_array_equal(high.score, c.score[c.score >= 0.35])


def test_mismatched_n_and_bad_n():
    with pytest.raises(ValueError, match="n-gram lengths"):
        containment(ngram_sets(["a b c"], 2), ngram_sets(["a b c"], 3))
    with pytest.raises(ValueError, match="n must be"):
        ngram_sets(["a"], 0)


def test_contamination_flags_name_both_directions_and_the_queries():
    from saber_core.validity.contamination import contamination_flags

    story = " ".join(f"word{i}" for i in range(30))
    bench = ["q1", "d1", "d2"]
    texts = [story, "unrelated text about other things entirely here and now", story[:80]]
    external = ["e1", "e2"]
    tail = " ".join(f"tail{i}" for i in range(200))
    ext_texts = [f"prefix words then {story} and a long tail {tail}", "nothing shared"]
    flags = contamination_flags(bench, texts, {"q1"}, external, ext_texts, n=8, threshold=0.35)
    rows = {(r["doc_id"], r["external_id"]): r for r in flags.iter_rows(named=True)}
    assert set(rows) == {("q1", "e1"), ("d2", "e1")}
    assert rows[("q1", "e1")]["is_query"] and not rows[("d2", "e1")]["is_query"]
    assert rows[("q1", "e1")]["bench_in_external"] == 1.0  # the whole query is in e1
    assert rows[("q1", "e1")]["external_in_bench"] < 0.35  # …but e1 is mostly elsewhere
