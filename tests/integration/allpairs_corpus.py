"""A seeded corpus of tag paths and ideas for the all-pairs pass tests (imported by the test
and by the process it kills)."""

from __future__ import annotations

import numpy as np

from saber_core.discovery.pair_scorer import PairScorer
from saber_core.ontology.tag_paths import build_frequency_tree
from saber_core.signals.bma_published import bma_index
from saber_core.signals.jaccard_published import idea_tokens
from saber_core.signals.lin_published import lin_similarity

WORDS = [f"w{k}" for k in range(300)]


def scorer(n_docs: int = 900, seed: int = 0) -> PairScorer:
    """Documents with 1–6 tag paths under six areas and Zipf-like ideas."""
    rng = np.random.default_rng(seed)
    paths = sorted(
        {
            "/M/"
            + "/".join(f"{level}{rng.integers(0, 4)}" for level in "ABCD"[: rng.integers(1, 5)])
            for _ in range(400)
        }
    )
    rows = [list(rng.choice(paths, rng.integers(1, 7), replace=False)) for _ in range(n_docs)]
    tree = build_frequency_tree(rows)
    docs = [tree.node_ids(row) for row in rows]
    weights = 1.0 / np.arange(1, len(WORDS) + 1)
    ideas = [
        " ".join(rng.choice(WORDS, rng.integers(3, 12), p=weights / weights.sum()))
        for _ in range(n_docs)
    ]
    return PairScorer(bma_index(lin_similarity(tree), docs), idea_tokens(ideas))


def prefix_scorers(
    sizes: list[int], n_docs: int = 600, seed: int = 1, copy_idea: dict[int, int] | None = None
) -> list[PairScorer]:
    """The scorers of the first ``size`` documents of one corpus, for each size: one tag tree
    and IC for all (so a grown databank's old rows keep their pair values), a corpus growing by
    appended documents (``sizes`` ≤ ``n_docs``). ``copy_idea`` {k: m}: document k takes document
    m's idea."""
    if max(sizes) > n_docs:
        raise ValueError(f"sizes {sizes} exceed the corpus of {n_docs} documents")
    rng = np.random.default_rng(seed)
    paths = sorted(
        {"/M/" + "/".join(f"{lv}{rng.integers(0, 4)}" for lv in "ABC") for _ in range(60)}
    )
    rows = [list(rng.choice(paths, rng.integers(1, 5), replace=False)) for _ in range(n_docs)]
    tree = build_frequency_tree(rows)
    lin = lin_similarity(tree)
    weights = 1.0 / np.arange(1, len(WORDS) + 1)
    ideas = [
        " ".join(rng.choice(WORDS, rng.integers(3, 12), p=weights / weights.sum()))
        for _ in range(n_docs)
    ]
    for k, m in (copy_idea or {}).items():
        ideas[k] = ideas[m]
    docs = [tree.node_ids(row) for row in rows]
    return [PairScorer(bma_index(lin, docs[:n]), idea_tokens(ideas[:n])) for n in sizes]
