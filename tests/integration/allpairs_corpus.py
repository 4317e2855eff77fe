"""A seeded corpus of tag paths and ideas for the all-pairs pass tests (imported by the test
and by the process it kills)."""

from __future__ import annotations

import numpy as np

from saber_core.discovery.all_pairs import PairScorer
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
