"""docs/sabermath.md §6: core-idea Jaccard
(``build_benchmark/similarities/compute/{jaccard.py,stop_words.py}``).

Tokenizer: ``str.lower()`` (Python's Unicode lower-casing), then the runs of ``[a-zA-Z0-9^_]+``
(so ``x^2`` and ``a_n`` stay whole, LaTeX loses its backslashes, any non-ASCII character splits a
token), minus :data:`STOP_WORDS`, as a set.

``J(A, B) = |A ∩ B| / |A ∪ B|``; two empty sets give 1.0 (published: two ideas made only of stop
words score 1) — fix ``empty_idea_jaccard``: 0.0. One empty set gives 0. Stored as float16.

Block form: the token sets are the rows of a binary sparse matrix ``X``; a block's intersections
are ``X · X[rows]ᵀ`` (sparse times a small dense block, in chunks of documents) and
``|A ∪ B| = |A| + |B| − |A ∩ B|``; exact integer counts, one float64 division (the same
correctly rounded value as Python's ``len(A & B) / len(A | B)``), then float16.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

TOKEN_PATTERN = re.compile(r"[a-zA-Z0-9^_]+")
_CHUNK_ELEMENTS = 2_000_000  # (documents × rows) float64 work arrays per step

# scikit-learn's ENGLISH_STOP_WORDS (sklearn.feature_extraction._stop_words), all 318 words.
SKLEARN_STOP_WORDS = frozenset((
    "a", "about", "above", "across", "after", "afterwards", "again", "against", "all", "almost",
    "alone", "along", "already", "also", "although", "always", "am", "among", "amongst", "amoungst",
    "amount", "an", "and", "another", "any", "anyhow", "anyone", "anything", "anyway", "anywhere",
    "are", "around", "as", "at", "back", "be", "became", "because", "become", "becomes", "becoming",
    "been", "before", "beforehand", "behind", "being", "below", "beside", "besides", "between",
    "beyond", "bill", "both", "bottom", "but", "by", "call", "can", "cannot", "cant", "co", "con",
    "could", "couldnt", "cry", "de", "describe", "detail", "do", "done", "down", "due", "during",
    "each", "eg", "eight", "either", "eleven", "else", "elsewhere", "empty", "enough", "etc",
    "even", "ever", "every", "everyone", "everything", "everywhere", "except", "few", "fifteen",
    "fifty", "fill", "find", "fire", "first", "five", "for", "former", "formerly", "forty", "found",
    "four", "from", "front", "full", "further", "get", "give", "go", "had", "has", "hasnt", "have",
    "he", "hence", "her", "here", "hereafter", "hereby", "herein", "hereupon", "hers", "herself",
    "him", "himself", "his", "how", "however", "hundred", "i", "ie", "if", "in", "inc", "indeed",
    "interest", "into", "is", "it", "its", "itself", "keep", "last", "latter", "latterly", "least",
    "less", "ltd", "made", "many", "may", "me", "meanwhile", "might", "mill", "mine", "more",
    "moreover", "most", "mostly", "move", "much", "must", "my", "myself", "name", "namely",
    "neither", "never", "nevertheless", "next", "nine", "no", "nobody", "none", "noone", "nor",
    "not", "nothing", "now", "nowhere", "of", "off", "often", "on", "once", "one", "only", "onto",
    "or", "other", "others", "otherwise", "our", "ours", "ourselves", "out", "over", "own", "part",
    "per", "perhaps", "please", "put", "rather", "re", "same", "see", "seem", "seemed", "seeming",
    "seems", "serious", "several", "she", "should", "show", "side", "since", "sincere", "six",
    "sixty", "so", "some", "somehow", "someone", "something", "sometime", "sometimes", "somewhere",
    "still", "such", "system", "take", "ten", "than", "that", "the", "their", "them", "themselves",
    "then", "thence", "there", "thereafter", "thereby", "therefore", "therein", "thereupon",
    "these", "they", "thick", "thin", "third", "this", "those", "though", "three", "through",
    "throughout", "thru", "thus", "to", "together", "too", "top", "toward", "towards", "twelve",
    "twenty", "two", "un", "under", "until", "up", "upon", "us", "very", "via", "was", "we", "well",
    "were", "what", "whatever", "when", "whence", "whenever", "where", "whereafter", "whereas",
    "whereby", "wherein", "whereupon", "wherever", "whether", "which", "while", "whither", "who",
    "whoever", "whole", "whom", "whose", "why", "will", "with", "within", "without", "would", "yet",
    "you", "your", "yours", "yourself", "yourselves",
))  # fmt: skip

# The 30 mathematical words the authors add (11 of them are already in scikit-learn's list).
MATH_STOP_WORDS = frozenset((
    "let", "assume", "consider", "given", "suppose", "find", "compute", "solve", "show",
    "determine", "value", "expression", "equation", "result", "step", "term", "method",
    "approach", "solution", "thus", "hence", "therefore", "so", "then", "if", "and", "or", "but",
    "theorem", "lemma",
))  # fmt: skip

STOP_WORDS = SKLEARN_STOP_WORDS | MATH_STOP_WORDS  # 337 words


def tokenize(text: str) -> list[str]:
    """The idea's tokens in text order, repeats kept (the published ``tokenize``)."""
    return [t for t in TOKEN_PATTERN.findall(text.lower()) if t not in STOP_WORDS]


@dataclass(frozen=True)
class IdeaTokens:
    """Token sets as a binary CSR matrix (n_docs, vocabulary) and the set sizes (n_docs,)."""

    matrix: sp.csr_matrix
    sizes: np.ndarray

    @property
    def n_docs(self) -> int:
        """Number of documents."""
        return self.matrix.shape[0]


def idea_tokens(
    ideas: Sequence[str], tokenizer: Callable[[str], Iterable[str]] | None = None
) -> IdeaTokens:
    """The token set of every idea (:func:`tokenize`, or ``tokenizer``, as a set) as an
    :class:`IdeaTokens`."""
    split = tokenizer or tokenize
    vocabulary: dict[str, int] = {}
    indptr = [0]
    indices: list[int] = []
    for idea in ideas:
        ids = {vocabulary.setdefault(t, len(vocabulary)) for t in split(idea)}
        indices.extend(sorted(ids))
        indptr.append(len(indices))
    matrix = sp.csr_matrix(
        (np.ones(len(indices), dtype=np.int32), np.array(indices, dtype=np.int64), indptr),
        shape=(len(ideas), len(vocabulary)),
    )
    return IdeaTokens(matrix=matrix, sizes=np.diff(matrix.indptr).astype(np.int64))


def jaccard_block(
    tokens: IdeaTokens, rows: np.ndarray, *, empty_idea_jaccard: bool = False
) -> np.ndarray:
    """float16 ``J(idea[rows[i]], idea[j])`` for every document ``j``, (len(rows), n_docs).

    Two empty sets give 1.0, or 0.0 with the ``empty_idea_jaccard`` fix (module docstring).
    """
    rows = np.asarray(rows, dtype=np.int64)
    block = tokens.matrix[rows].T.toarray()  # (vocabulary, rows) int32, small
    row_sizes = tokens.sizes[rows].astype(np.float64)
    out = np.empty((len(rows), tokens.n_docs), dtype=np.float16)
    chunk = max(1, _CHUNK_ELEMENTS // max(1, len(rows)))
    for start in range(0, tokens.n_docs, chunk):
        docs = slice(start, start + chunk)
        # (docs, rows): exact counts in float64
        shared = (tokens.matrix[docs] @ block).astype(np.float64)
        union = tokens.sizes[docs, None].astype(np.float64) + row_sizes[None, :]
        union -= shared
        both_empty = union == 0.0
        union[both_empty] = 1.0  # shared is 0 there
        shared /= union
        shared[both_empty] = 0.0 if empty_idea_jaccard else 1.0
        out[:, docs] = shared.T
    return out
