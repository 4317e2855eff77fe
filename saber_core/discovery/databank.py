"""The databank the published all-pairs discovery runs over, and its pair scorer.

Rows: the corpus rows, in corpus order, whose cleaned tag list is non-empty and whose idea
(summary) is not blank (§2); the others are listed with the reason (nothing is dropped
silently). Each row carries its cleaned tags (in stored order: BMA sums in list order), its
idea, its ``original_index`` and its domain key — the sorted distinct domains of its
``domains`` column when the corpus has one, else of its tags' first level below the root
through the domain map (§9).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from saber_core.construction import Construction
from saber_core.discovery.final_sampler import tag_domains
from saber_core.discovery.pair_scorer import PairScorer
from saber_core.ontology.dag import seco_ic
from saber_core.ontology.tag_paths import FrequencyTree
from saber_core.signals.bma_published import bma_index
from saber_core.signals.jaccard import tokenize as platform_tokenize
from saber_core.signals.jaccard_published import idea_tokens
from saber_core.signals.lin_published import LinSimilarity, information_content


@dataclass(frozen=True)
class Databank:
    """Rows of the all-pairs matrices (module docstring) and the corpus rows left out."""

    doc_ids: np.ndarray
    original_index: np.ndarray
    tags: list[list[str]]
    ideas: list[str]
    domains: list[tuple[str, ...]]
    excluded: pl.DataFrame  # doc_id, reason

    @property
    def n_rows(self) -> int:
        """Rows (and columns) of the all-pairs matrices."""
        return len(self.doc_ids)


def build_databank(
    corpus: pl.DataFrame,
    topics: pl.DataFrame,
    domain_map: Iterable[tuple[str, str]],
) -> Databank:
    """The databank of ``corpus`` (``doc_id, original_index, summary, domains``) with the
    cleaned ``topics`` (``doc_id, topic_id, position``: tag paths in list order)."""
    lists = (
        topics.sort("doc_id", "position").group_by("doc_id", maintain_order=True).agg("topic_id")
    )
    rows = corpus.select("doc_id", "original_index", "summary", "domains").join(
        lists, on="doc_id", how="left", maintain_order="left"
    )
    no_tags = rows["topic_id"].is_null() | (rows["topic_id"].list.len() == 0)
    blank = rows["summary"].is_null() | (rows["summary"].str.strip_chars() == "")
    reason = pl.when(no_tags).then(pl.lit("no tags left after clean-up"))
    reason = reason.when(blank).then(pl.lit("blank idea (summary)"))
    rows = rows.with_columns(reason=reason.otherwise(None))
    kept = rows.filter(pl.col("reason").is_null())
    mapping = tuple(domain_map)
    domains = [
        tuple(sorted(set(given))) if given else tag_domains(tags, mapping)
        for given, tags in zip(kept["domains"].to_list(), kept["topic_id"].to_list(), strict=True)
    ]
    return Databank(
        doc_ids=kept["doc_id"].to_numpy().astype(object),
        original_index=kept["original_index"].to_numpy().astype(np.int64),
        tags=kept["topic_id"].to_list(),
        ideas=kept["summary"].to_list(),
        domains=domains,
        excluded=rows.filter(pl.col("reason").is_not_null()).select("doc_id", "reason"),
    )


def tree_ic(tree: FrequencyTree, kind: str) -> np.ndarray:
    """Information content of the tree's nodes: ``corpus_frequency`` (−ln max(p, 1e-12)) or
    ``seco`` (intrinsic, from descendant counts)."""
    if kind == "corpus_frequency":
        return information_content(tree.probabilities)
    descendants = np.zeros(tree.n_nodes, dtype=np.int64)
    for node in range(tree.n_nodes - 1, 0, -1):  # children have larger ids than parents
        descendants[tree.parents[node]] += descendants[node] + 1
    return seco_ic(descendants, tree.n_nodes)


def pair_scorer(
    databank: Databank, tree: FrequencyTree, ic: np.ndarray, plan: Construction
) -> PairScorer:
    """BMA (``plan.bma``, Lin on ``ic``, the root diagonal fix) and idea Jaccard
    (``plan.tokenizer``; J(∅, ∅) = 1 published, 0 with the fix or the platform tokenizer) over
    the databank rows."""
    lin = LinSimilarity(
        ic=np.asarray(ic, dtype=np.float64),
        ancestors=tree.ancestors,
        root_self_similarity=plan.has_fix("root_self_similarity"),
    )
    nodes = [tree.node_ids(tags) for tags in databank.tags]
    published = plan.tokenizer == "sabermath"
    tokens = idea_tokens(databank.ideas, None if published else platform_tokenize)
    return PairScorer(
        bma=bma_index(lin, nodes),
        ideas=tokens,
        pooled=plan.bma == "pooled",
        empty_idea_jaccard=plan.has_fix("empty_idea_jaccard") or not published,
    )


def domain_buckets(domains: Sequence[tuple[str, ...]]) -> dict[tuple[str, ...], int]:
    """How many rows have each domain key (for error messages and reports)."""
    counts: dict[tuple[str, ...], int] = {}
    for key in domains:
        counts[key] = counts.get(key, 0) + 1
    return counts
