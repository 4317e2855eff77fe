"""Stage: queries and the two relevance signals over the whole corpus (topic BMA, summary Jaccard).

Queries are drawn first (balanced across domains, among documents with a summary and at least one
valid topic) so that each signal is computed as a query × corpus matrix. The full matrix is kept
as a float32 ``.npy`` artifact (memory-mapped by the pool stage); the DuckDB table keeps each
query's nearest ``neighbours_kept`` documents for inspection.
"""

from collections.abc import Callable
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl

from saber_assets.common import stored_ontology
from saber_assets.runtime import StageOutput, materialize_stage
from saber_core.discovery import (
    bma_block,
    build_bma_index,
    doc_topic_sets,
    query_topics,
    top_neighbours,
)
from saber_core.pools import sample_queries
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


def _score_matrix(
    context: dg.AssetExecutionContext,
    build: BuildConfig,
    store: DuckDBStore,
    score: str,
    block: Callable[[np.ndarray], np.ndarray],
) -> StageOutput:
    """Stream query blocks through ``block`` into a float32 ``.npy`` (memory-mapped, never held
    whole) and keep each query's ``neighbours_kept`` best documents as a table."""
    asset = context.asset_key.to_user_string()
    doc_ids = store.read_table("corpus")["doc_id"].to_numpy()
    query_table = store.read_table("queries")
    rows = query_table["doc_index"].to_numpy()
    path = matrix_path(build, asset)
    path.parent.mkdir(parents=True, exist_ok=True)
    matrix = np.lib.format.open_memmap(
        path, mode="w+", dtype=np.float32, shape=(len(rows), len(doc_ids))
    )
    neighbour_rows, neighbour_scores = [], []
    for start in range(0, len(rows), QUERY_BLOCK):
        values = block(rows[start : start + QUERY_BLOCK])
        matrix[start : start + len(values)] = values
        idx, val = top_neighbours(values, min(build.neighbours_kept, len(doc_ids)))
        neighbour_rows.append(idx)
        neighbour_scores.append(val)
        context.log.info(f"{asset}: queries {start + len(values)}/{len(rows)}")
    mean = float(matrix.mean()) if matrix.size else 0.0
    matrix.flush()
    del matrix
    idx, val = np.concatenate(neighbour_rows), np.concatenate(neighbour_scores)
    k = idx.shape[1]
    keep = idx.ravel() >= 0
    table = pl.DataFrame(
        {
            "query_id": np.repeat(query_table["query_id"].to_numpy(), k)[keep],
            "rank": np.tile(np.arange(1, k + 1), len(rows))[keep],
            "doc_id": doc_ids[idx.ravel()[keep]],
            score: val.ravel()[keep],
        }
    )
    return StageOutput(
        {asset: table},
        figures={
            "matrix_path": str(path),
            "shape": [len(rows), len(doc_ids)],
            f"mean_{score}": mean,
        },
        files=[path],
    )


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
        sets = doc_topic_sets(onto, lists)
        index = build_bma_index(onto, sets)
        return _score_matrix(
            context,
            build,
            store,
            "bma",
            lambda rows: bma_block(onto, index, query_topics(sets, rows)),
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
        output = _score_matrix(
            context,
            build,
            store,
            "jaccard",
            lambda rows: jaccard_dense_block(tokens.rows(rows), tokens),
        )
        output.figures["tokenizer_version"] = TOKENIZER_VERSION
        return output

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
