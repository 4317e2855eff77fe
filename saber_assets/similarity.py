"""Stage: queries and the two relevance signals over the whole corpus (topic BMA, summary Jaccard).

Queries are drawn first (balanced across domains, among documents with a summary and at least one
valid topic) so that each signal is computed as a query × corpus matrix. The full matrix is kept
as a float32 ``.npy`` artifact (memory-mapped by the pool stage); the DuckDB table keeps each
query's nearest ``neighbours_kept`` documents for inspection.
"""

from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl

from saber_assets.common import stored_ontology
from saber_assets.runtime import StageOutput, materialize_stage
from saber_core.ontology import bma_one_vs_many, lin_rows, topic_sets
from saber_core.pools import sample_queries, top_k
from saber_core.text import TOKENIZER_VERSION, build_token_matrix, jaccard_dense_block
from saber_resources.config import BuildConfig
from saber_resources.storage import DuckDBStore

QUERY_BLOCK = 64


@dg.asset(group_name="discovery", deps=["corpus", "summaries", "topic_annotations"])
def queries(
    context: dg.AssetExecutionContext, build: BuildConfig, store: DuckDBStore
) -> dg.MaterializeResult:
    """Queries drawn per domain (balanced, seeded) from documents with a summary and topics."""

    def compute() -> StageOutput:
        corpus = store.read_table("corpus").with_row_index("doc_index")
        with_topics = store.read_table("topic_annotations")["doc_id"].unique()
        eligible = corpus.filter(
            pl.col("doc_id").is_in(with_topics.implode()) & pl.col("summary").is_not_null()
        )
        picked = sample_queries(eligible["domain"].to_list(), build.n_queries, build.seed)
        table = (
            eligible[picked]
            .select(pl.col("doc_id").alias("query_id"), "doc_index", "domain")
            .with_row_index("query_index")
            .with_columns(pl.lit(build.seed).alias("seed"))
        )
        return StageOutput(
            {"queries": table},
            figures={
                "n_queries": table.height,
                "n_eligible_documents": eligible.height,
                "per_domain": dict(table.group_by("domain").len().sort("domain").rows()),
            },
        )

    return materialize_stage(
        context,
        store,
        settings={"n_queries": build.n_queries, "seed": build.seed},
        upstream=["corpus", "summaries", "topic_annotations"],
        compute=compute,
    )


def matrix_path(build: BuildConfig, asset: str) -> Path:
    """Where a query × corpus score matrix of ``asset`` is stored."""
    return build.artifacts_dir / f"{asset}.npy"


def _neighbours(matrix: np.ndarray, query_ids: list[str], doc_ids: np.ndarray, k: int, score: str):
    rows = []
    for q, row in enumerate(matrix):
        best = top_k(row, np.ones(len(row), dtype=bool), k, np.zeros(len(row)))
        rows.append(
            pl.DataFrame(
                {
                    "query_id": query_ids[q],
                    "rank": np.arange(1, len(best) + 1),
                    "doc_id": doc_ids[best],
                    score: row[best],
                }
            )
        )
    return pl.concat(rows)


def _save(build: BuildConfig, asset: str, matrix: np.ndarray) -> Path:
    path = matrix_path(build, asset)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, matrix.astype(np.float32))
    return path


@dg.asset(group_name="discovery", deps=["ontology", "topic_annotations", "queries"])
def topic_similarity(
    context: dg.AssetExecutionContext, build: BuildConfig, store: DuckDBStore
) -> dg.MaterializeResult:
    """BMA-Lin topic similarity of every query to every corpus document."""

    def compute() -> StageOutput:
        onto = stored_ontology(store)
        doc_ids = store.read_table("corpus")["doc_id"]
        topics = store.read_table("topic_annotations").group_by("doc_id").agg("topic_id")
        lists = (
            pl.DataFrame({"doc_id": doc_ids})
            .join(topics, on="doc_id", how="left", maintain_order="left")["topic_id"]
            .to_list()
        )
        sets = topic_sets([onto.indices(t or []) for t in lists])
        query_table = store.read_table("queries")
        matrix = np.zeros((query_table.height, len(doc_ids)), dtype=np.float32)
        for q, doc_index in enumerate(query_table["doc_index"].to_list()):
            start, end = sets.ptr[doc_index], sets.ptr[doc_index + 1]
            query_topics = sets.used[sets.local[start:end]]
            matrix[q] = bma_one_vs_many(lin_rows(onto, query_topics, sets.used), sets)
            if q % 100 == 0:
                context.log.info(f"topic_similarity: query {q + 1}/{query_table.height}")
        path = _save(build, "topic_similarity", matrix)
        table = _neighbours(
            matrix,
            query_table["query_id"].to_list(),
            doc_ids.to_numpy(),
            build.neighbours_kept,
            "bma",
        )
        return StageOutput(
            {"topic_similarity": table},
            figures={
                "matrix_path": str(path),
                "shape": list(matrix.shape),
                "mean_bma": float(matrix.mean()),
            },
            files=[path],
        )

    return materialize_stage(
        context,
        store,
        settings={"k": build.neighbours_kept, "home": str(build.artifacts_dir)},
        upstream=["ontology", "topic_annotations", "queries"],
        compute=compute,
    )


@dg.asset(group_name="discovery", deps=["summaries", "queries"])
def summary_similarity(
    context: dg.AssetExecutionContext, build: BuildConfig, store: DuckDBStore
) -> dg.MaterializeResult:
    """Jaccard similarity of summary word sets, every query to every corpus document."""

    def compute() -> StageOutput:
        doc_ids = store.read_table("corpus")["doc_id"]
        summaries = pl.DataFrame({"doc_id": doc_ids}).join(
            store.read_table("summaries"), on="doc_id", how="left", maintain_order="left"
        )
        tokens = build_token_matrix(summaries["summary"])
        query_table = store.read_table("queries")
        rows = query_table["doc_index"].to_numpy()
        matrix = np.zeros((len(rows), len(doc_ids)), dtype=np.float32)
        for start in range(0, len(rows), QUERY_BLOCK):
            block = rows[start : start + QUERY_BLOCK]
            matrix[start : start + len(block)] = jaccard_dense_block(tokens.rows(block), tokens)
            context.log.info(f"summary_similarity: queries {start + len(block)}/{len(rows)}")
        path = _save(build, "summary_similarity", matrix)
        table = _neighbours(
            matrix,
            query_table["query_id"].to_list(),
            doc_ids.to_numpy(),
            build.neighbours_kept,
            "jaccard",
        )
        return StageOutput(
            {"summary_similarity": table},
            figures={
                "matrix_path": str(path),
                "shape": list(matrix.shape),
                "mean_jaccard": float(matrix.mean()),
                "tokenizer_version": TOKENIZER_VERSION,
            },
            files=[path],
        )

    return materialize_stage(
        context,
        store,
        settings={
            "k": build.neighbours_kept,
            "home": str(build.artifacts_dir),
            "tokenizer": TOKENIZER_VERSION,
        },
        upstream=["summaries", "queries"],
        compute=compute,
    )
