"""docs/sabermath.md §6: tokenizer and Jaccard against a character-loop reference
(sabermath_reference.py) and
scikit-learn's own stop-word list."""

from __future__ import annotations

import numpy as np
import pytest
import sabermath_reference as ref
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from saber_core.signals import jaccard_published as jaccard_module
from saber_core.signals.jaccard_published import STOP_WORDS, idea_tokens, jaccard_block, tokenize

REFERENCE_STOP_WORDS = frozenset(ENGLISH_STOP_WORDS) | frozenset(ref.MATH_WORDS)

IDEAS = [
    "Use the substitution x^2 = t and bound a_n by induction.",
    "Apply \\frac{a}{b} \\leq 1 with AM-GM on a_n, then telescope.",
    "Let it be found; thus, hence, therefore.",  # stop words only
    "",
    "Naïve café façade: non-ASCII splits tokens; İstanbul ǅ Kelvin K.",
    "Consider x^2 and a_n; telescope the sum 2^{n} x_1.",
    "so if and or but then",  # stop words only
    "INDUCTION on N, bound A_N by Telescoping",
]


def test_stop_words_are_sklearns_318_plus_the_math_words():
    assert len(ENGLISH_STOP_WORDS) == 318
    assert len(ref.MATH_WORDS) == 30
    assert len(ENGLISH_STOP_WORDS & frozenset(ref.MATH_WORDS)) == 11
    assert STOP_WORDS == REFERENCE_STOP_WORDS
    assert len(STOP_WORDS) == 337


def test_tokenizer_keeps_powers_and_subscripts_and_splits_latex_and_non_ascii():
    assert set(tokenize(IDEAS[0])) == {
        "use",
        "substitution",
        "x^2",
        "t",
        "bound",
        "a_n",
        "induction",
    }
    assert tokenize("\\frac{a}{b} \\leq c") == ["frac", "b", "leq", "c"]  # "a" is a stop word
    assert tokenize("naïve café") == ["na", "ve", "caf"]
    assert tokenize("x^2 x^2") == ["x^2", "x^2"]  # a list; the set is taken later
    assert tokenize("Let Theorem LEMMA hold") == ["hold"]


@pytest.mark.parametrize("text", IDEAS)
def test_tokenizer_equals_the_character_loop_reference(text):
    assert set(tokenize(text)) == ref.tokens(text, REFERENCE_STOP_WORDS)


def random_idea(rng: np.random.Generator) -> str:
    words = ["x^2", "a_n", "sum", "the", "and", "bound", "Ünion", "\\alpha", "prime", "so", "2"]
    return " ".join(str(rng.choice(words)) for _ in range(rng.integers(0, 6)))


@pytest.mark.parametrize("empty_fix", [False, True])
@pytest.mark.parametrize("chunk_elements", [7, 300, 2_000_000])  # 1, 6 or all documents
def test_jaccard_block_is_bit_identical_to_the_reference(empty_fix, chunk_elements, monkeypatch):
    monkeypatch.setattr(jaccard_module, "_CHUNK_ELEMENTS", chunk_elements)
    rng = np.random.default_rng(5)
    ideas = IDEAS + [random_idea(rng) for _ in range(40)]
    sets = [ref.tokens(text, REFERENCE_STOP_WORDS) for text in ideas]
    expected = np.array([[ref.jaccard(a, b, empty_fix) for b in sets] for a in sets], np.float16)
    tokens = idea_tokens(ideas)
    got = jaccard_block(tokens, np.arange(len(ideas)), empty_idea_jaccard=empty_fix)
    assert got.dtype == np.float16
    assert np.array_equal(got.view(np.uint16), expected.view(np.uint16))
    rows = np.array([6, 2, 9, 0])
    assert np.array_equal(
        jaccard_block(tokens, rows, empty_idea_jaccard=empty_fix).view(np.uint16),
        expected[rows].view(np.uint16),
    )


def test_two_stop_word_ideas_score_one_as_published_and_zero_with_the_fix():
    tokens = idea_tokens([IDEAS[2], IDEAS[6], IDEAS[0]])
    published = jaccard_block(tokens, np.arange(3)).astype(float)
    fixed = jaccard_block(tokens, np.arange(3), empty_idea_jaccard=True).astype(float)
    assert published[0, 1] == published[1, 0] == published[0, 0] == 1.0
    assert published[0, 2] == published[2, 0] == 0.0
    assert fixed[0, 1] == fixed[0, 0] == 0.0
    assert fixed[2, 2] == published[2, 2] == 1.0
