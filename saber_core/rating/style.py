"""Style features of the texts a judge sees — the covariates of style-controlled Bradley–Terry
(:mod:`saber_core.rating.bradley_terry_style`). Pure numpy.

Per text (the judge's candidate text ``Problem: …\\n\\nSolution: …``):

* ``length``: ``log(1 + characters)`` (log: lengths are right-skewed, and a judge's taste for
  length is about relative, not absolute, length);
* ``latex_density``: the share of characters inside math delimiters — ``$…$``, ``$$…$$``,
  ``\\(…\\)``, ``\\[…\\]`` — delimiters included;
* ``steps``: displayed steps — non-blank lines starting with a step marker (``1.``, ``2)``,
  ``(3)``, ``Step 4``, ``-``, ``*``, ``•``) plus display-math blocks (``$$…$$``, ``\\[…\\]``);
* ``ngram_style``: how LLM-like the text reads (:class:`NgramStyle`: multinomial naive Bayes on
  character 3-grams, the mean per-3-gram log-likelihood ratio LLM vs human).

:func:`standardize` turns the columns into z-scores over all rated candidates.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

BASIC_FEATURES = ("length", "latex_density", "steps")

_MATH = re.compile(r"\$\$.+?\$\$|\\\[.+?\\\]|\\\(.+?\\\)|\$[^$]+?\$", re.DOTALL)
_DISPLAY = re.compile(r"\$\$.+?\$\$|\\\[.+?\\\]", re.DOTALL)
_STEP = re.compile(r"^\s*(?:\(?\d+[.)]\s|step\s+\d+|[-*•]\s)", re.IGNORECASE | re.MULTILINE)


def latex_density(text: str) -> float:
    """Share of the characters of ``text`` inside math delimiters (0 for an empty text)."""
    return sum(len(m.group()) for m in _MATH.finditer(text)) / len(text) if text else 0.0


def displayed_steps(text: str) -> int:
    """Lines starting with a step marker plus display-math blocks (module docstring)."""
    return len(_STEP.findall(text)) + len(_DISPLAY.findall(text))


def basic_features(texts: Sequence[str]) -> np.ndarray:
    """(len(texts), 3): ``log(1 + chars)``, LaTeX density, displayed steps
    (:data:`BASIC_FEATURES`)."""
    return np.array(
        [[np.log1p(len(t)), latex_density(t), displayed_steps(t)] for t in texts], dtype=float
    ).reshape(len(texts), len(BASIC_FEATURES))


def standardize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Columns of ``x`` (m, K) as z-scores ``(x − mean) / sd``; also which columns vary (a
    constant column carries no style and comes back all 0, marked False)."""
    x = np.asarray(x, dtype=float)
    sd = x.std(axis=0)
    varies = sd > 1e-12 * np.maximum(1.0, np.abs(x).max(axis=0, initial=0.0))
    z = np.where(varies, (x - x.mean(axis=0)) / np.where(varies, sd, 1.0), 0.0)
    return z, varies


def char_ngrams(text: str, n: int = 3) -> Counter:
    """Counts of the character ``n``-grams of the lower-cased text, whitespace runs as one space."""
    t = " ".join(text.lower().split())
    return Counter(t[i : i + n] for i in range(len(t) - n + 1))


def _counts(texts: Sequence[str], vocab: dict[str, int], n: int) -> np.ndarray:
    out = np.zeros((len(texts), len(vocab)))
    for row, text in enumerate(texts):
        for gram, k in char_ngrams(text, n).items():
            col = vocab.get(gram)
            if col is not None:
                out[row, col] = k
    return out


@dataclass(frozen=True)
class NgramStyle:
    """Multinomial naive Bayes on character ``n``-grams, LLM- vs human-written.

    Per vocabulary gram ``g``: ``w_g = log p(g | LLM) − log p(g | human)`` with Laplace
    (add-one) smoothing. A text's score is ``Σ_g c_g w_g / Σ_g c_g`` (``c_g`` its counts; 0 if it
    has none): the mean log-likelihood ratio per gram, > 0 reads LLM-like. Dividing by the count
    keeps length out of the score (length is its own feature).
    """

    vocab: dict[str, int]
    weights: np.ndarray
    n: int

    @classmethod
    def fit(
        cls, llm: Sequence[str], human: Sequence[str], n: int = 3, max_vocab: int = 5000
    ) -> NgramStyle:
        """Fit on the two sets of texts; the vocabulary is the ``max_vocab`` most frequent
        grams of both (ties by the gram, so the fit is deterministic)."""
        total: Counter = Counter()
        for text in (*llm, *human):
            total.update(char_ngrams(text, n))
        ranked = sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))[:max_vocab]
        vocab = {g: i for i, (g, _) in enumerate(ranked)}
        sums = [_counts(texts, vocab, n).sum(axis=0) + 1.0 for texts in (llm, human)]
        weights = np.log(sums[0] / sums[0].sum()) - np.log(sums[1] / sums[1].sum())
        return cls(vocab, weights, n)

    def score(self, texts: Sequence[str]) -> np.ndarray:
        """Mean per-gram log-likelihood ratio of each text (class docstring)."""
        c = _counts(texts, self.vocab, self.n)
        total = c.sum(axis=1)
        return np.where(total > 0, c @ self.weights / np.maximum(total, 1.0), 0.0)


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve: P(score of a positive > score of a negative), ties ½
    (the Mann–Whitney statistic over average ranks)."""
    scores, labels = np.asarray(scores, dtype=float), np.asarray(labels, dtype=bool)
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    for value in np.unique(scores):  # average ranks of ties
        tie = scores == value
        ranks[tie] = ranks[tie].mean()
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def cross_validated_auc(
    llm: Sequence[str], human: Sequence[str], seed: int, folds: int = 5, n: int = 3
) -> float:
    """AUC of :class:`NgramStyle` on held-out texts: the texts split into ``folds`` seeded
    random folds (``default_rng(seed)``), each scored by the model fitted on the others; the AUC
    of all held-out scores."""
    texts = [*llm, *human]
    labels = np.r_[np.ones(len(llm), dtype=bool), np.zeros(len(human), dtype=bool)]
    fold = np.random.default_rng(seed).permutation(len(texts)) % folds
    scores = np.zeros(len(texts))
    for k in range(folds):
        train = np.flatnonzero(fold != k)
        model = NgramStyle.fit(
            [texts[i] for i in train if labels[i]], [texts[i] for i in train if not labels[i]], n
        )
        test = np.flatnonzero(fold == k)
        scores[test] = model.score([texts[i] for i in test])
    return auc(scores, labels)
