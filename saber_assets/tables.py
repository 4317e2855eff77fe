"""Stage tables read back as core objects (shared by the asset groups)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from saber_config import PlanReads
from saber_core.inputs.corpus import full_text_expr
from saber_core.ontology.dag import Ontology, build_ontology
from saber_core.rating.comparisons import PlayedRounds
from saber_store.database import DuckDBStore


def stored_ontology(store: DuckDBStore) -> Ontology:
    """The validated ontology rebuilt from the ``ontology`` table."""
    return build_ontology(store.read_table("ontology").select("node_id", "name", "parent_ids"))


def corpus_texts(corpus: pl.DataFrame) -> dict[str, str]:
    """doc_id → the full text (``Problem: …\\n\\nSolution: …``) every judge sees."""
    return dict(
        corpus.select("doc_id", full_text_expr(pl.col("problem"), pl.col("solution"))).rows()
    )


def pool_matrix(store: DuckDBStore, table: str = "candidate_pools") -> tuple[list[str], np.ndarray]:
    """Query ids and their (Q, n) candidate doc ids in pool position order."""
    pools = store.read_table(table).sort("query_id", "position")
    grouped = pools.group_by("query_id", maintain_order=True).agg("doc_id")
    return grouped["query_id"].to_list(), np.array(grouped["doc_id"].to_list(), dtype=object)


def played_rounds(
    store: DuckDBStore, tables: Sequence[str], query_ids: list[str], n_players: int
) -> PlayedRounds:
    """The judgments stored in ``tables`` (round tables, or ``judgments``), in order."""
    frames = [store.read_table(t) for t in tables]
    return PlayedRounds.from_frame(pl.concat(frames) if frames else None, query_ids, n_players)


def matrix_path(plan: PlanReads, name: str) -> Path:
    """Where a query × corpus score matrix ``name`` is stored."""
    return plan.paths.artifacts_dir / f"{name}.npy"


def stored_matrix(plan: PlanReads, name: str) -> np.ndarray:
    """The score matrix the asset ``name`` wrote, memory-mapped (read-only)."""
    return np.load(matrix_path(plan, name), mmap_mode="r")
