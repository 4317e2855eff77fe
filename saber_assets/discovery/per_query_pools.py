"""Group ``discovery``: queries, the two relevance signals (topic BMA-Lin, summary Jaccard) and
the candidate pools.

Queries are drawn first (balanced across domains, among documents with a summary and at least one
valid topic) so that each signal is computed as a query × corpus matrix. The full matrix is kept
as a float32 ``.npy`` artifact (memory-mapped by the pool stage); the DuckDB table keeps each
query's nearest ``neighbours_kept`` documents for inspection.
"""

from collections.abc import Callable

import dagster as dg
import numpy as np
import polars as pl

from saber_assets.resources import BuildResource, StoreResource
from saber_assets.tables import matrix_path, stored_matrix, stored_ontology
from saber_config import PlanReads
from saber_core.discovery.blocks import neighbour_frame, stream_rows
from saber_core.discovery.per_query import (
    bma_block,
    build_bma_index,
    doc_topic_sets,
    pool_frames,
    query_topics,
    select_pools,
)
from saber_core.discovery.pools import PoolConfig, sample_queries
from saber_core.signals.jaccard import TOKENIZER_VERSION, build_token_matrix, jaccard_dense_block
from saber_runtime.metadata import check
from saber_runtime.stage import StageOutput, materialize_stage
from saber_store.database import DuckDBStore


@dg.asset(group_name="discovery", deps=["corpus", "summaries", "topic_annotations"])
def queries(
    context: dg.AssetExecutionContext, build: BuildResource, store: StoreResource
) -> dg.MaterializeResult:
    """Queries drawn per domain (balanced, seeded) from documents with a summary and topics."""
    plan = build.reads()
    n_queries = plan.pools.n_queries

    def compute() -> StageOutput:
        corpus = store.read_table("corpus").with_row_index("doc_index")
        with_topics = store.read_table("topic_annotations")["doc_id"].unique()
        summary = pl.col("summary")
        written = store.read_table("summaries").filter(
            summary.is_not_null() & (summary.str.strip_chars() != "")
        )["doc_id"]
        eligible = corpus.filter(
            pl.col("doc_id").is_in(with_topics.implode())
            & pl.col("doc_id").is_in(written.implode())
        )
        stable = plan.pools.query_draw == "stable"
        keys = eligible["doc_id"].to_list() if stable else None
        picked = sample_queries(eligible["domain"].to_list(), n_queries, plan.seed, keys)
        table = (
            eligible[picked]
            .select(pl.col("doc_id").alias("query_id"), "doc_index", "domain")
            .with_row_index("query_index")
            .with_columns(pl.lit(plan.seed).alias("seed"))
        )
        return StageOutput(
            {"queries": table},
            figures={
                "n_queries": table.height,
                "n_eligible_documents": eligible.height,
                "per_domain": dict(table.group_by("domain").len().sort("domain").rows()),
            },
        )

    return materialize_stage(context, store, plan, compute=compute)


def score_matrix(
    context: dg.AssetExecutionContext,
    plan: PlanReads,
    store: DuckDBStore,
    score: str,
    block: Callable[[np.ndarray], np.ndarray],
    name: str | None = None,
) -> StageOutput:
    """Stream query blocks through ``block`` into the float32 artifact ``<name>.npy``
    (memory-mapped, never held whole) and keep each query's best documents as a table."""
    name = name or context.asset_key.to_user_string()
    doc_ids = store.read_table("corpus")["doc_id"].to_numpy()
    query_table = store.read_table("queries")
    rows = query_table["doc_index"].to_numpy()
    path = matrix_path(plan, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    shape = (len(rows), len(doc_ids))
    matrix = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=shape)
    streamed = stream_rows(
        matrix,
        rows,
        block,
        plan.pools.neighbours_kept,
        progress=lambda done, total: context.log.info(f"{name}: queries {done}/{total}"),
    )
    matrix.flush()
    del matrix
    table = neighbour_frame(streamed, query_table["query_id"].to_list(), doc_ids, score)
    figures = {"matrix_path": str(path), "shape": list(shape), f"mean_{score}": streamed.mean}
    return StageOutput({name: table}, figures=figures, files=[path])


@dg.asset(group_name="discovery", deps=["corpus", "ontology", "topic_annotations", "queries"])
def topic_similarity(
    context: dg.AssetExecutionContext, build: BuildResource, store: StoreResource
) -> dg.MaterializeResult:
    """BMA-Lin topic similarity of every query to every corpus document."""
    plan = build.reads()

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
        block = lambda rows: bma_block(onto, index, query_topics(sets, rows))  # noqa: E731
        return score_matrix(context, plan, store, "bma", block)

    return materialize_stage(context, store, plan, compute=compute)


@dg.asset(group_name="discovery", deps=["corpus", "summaries", "queries"])
def summary_similarity(
    context: dg.AssetExecutionContext, build: BuildResource, store: StoreResource
) -> dg.MaterializeResult:
    """Jaccard similarity of summary word sets, every query to every corpus document."""
    plan = build.reads()

    def compute() -> StageOutput:
        doc_ids = store.read_table("corpus")["doc_id"]
        summaries = pl.DataFrame({"doc_id": doc_ids}).join(
            store.read_table("summaries"), on="doc_id", how="left", maintain_order="left"
        )
        tokens = build_token_matrix(summaries["summary"])
        block = lambda rows: jaccard_dense_block(tokens.rows(rows), tokens)  # noqa: E731
        output = score_matrix(context, plan, store, "jaccard", block)
        output.figures["tokenizer_version"] = TOKENIZER_VERSION
        return output

    return materialize_stage(context, store, plan, compute=compute)


def pool_checks(config: PoolConfig, pools: pl.DataFrame) -> list[dg.AssetCheckResult]:
    """Every pool has its size and 1/3 split; no query is its own candidate; no duplicates."""
    sizes = pools.group_by("query_id", "group").len()
    expected = config.sizes
    bad_split = sizes.filter(
        pl.col("len") != pl.col("group").replace_strict(expected, return_dtype=pl.Int64)
    )
    bad_size = pools.group_by("query_id").len().filter(pl.col("len") != config.pool_size)
    self_rows = pools.filter(pl.col("query_id") == pl.col("doc_id"))
    dup_rows = pools.filter(pl.struct("query_id", "doc_id").is_duplicated())
    split = "/".join(str(expected[g]) for g in ("topic", "summary", "both"))
    return [
        check(
            "pool_size_and_split",
            bad_split.height == 0 and bad_size.height == 0,
            f"every pool has {config.pool_size} candidates split {split}",
            n_bad_queries=bad_size.height,
            n_bad_groups=bad_split.height,
        ),
        check(
            "no_self_or_duplicate_candidates",
            self_rows.height == 0 and dup_rows.height == 0,
            "no query is its own candidate and no candidate appears twice in a pool",
            n_self=self_rows.height,
            n_duplicates=dup_rows.height,
        ),
    ]


def _no_pools_error(config: PoolConfig, outcomes: pl.DataFrame) -> ValueError:
    reasons = outcomes.group_by("reason").len().sort("len", descending=True)
    return ValueError(
        f"no query got a pool of {config.pool_size}: "
        + "; ".join(f"{n} × {r}" for r, n in reasons.head(3).rows())
        + " (corpus too small for the configured pool sizes?)"
    )


@dg.asset(
    group_name="discovery",
    deps=["corpus", "queries", "topic_similarity", "summary_similarity"],
    check_specs=[
        dg.AssetCheckSpec("pool_size_and_split", asset="candidate_pools"),
        dg.AssetCheckSpec("no_self_or_duplicate_candidates", asset="candidate_pools"),
    ],
)
def candidate_pools(
    context: dg.AssetExecutionContext, build: BuildResource, store: StoreResource
) -> dg.MaterializeResult:
    """Per query: the pool in released order, with group, BMA, Jaccard and relaxed flag."""
    plan = build.reads()
    config = plan.pools.config

    def compute() -> StageOutput:
        corpus, query_table = store.read_table("corpus"), store.read_table("queries")
        result = select_pools(
            query_table["doc_index"].to_numpy(),
            stored_matrix(plan, "topic_similarity"),
            stored_matrix(plan, "summary_similarity"),
            build_token_matrix(corpus["problem"]),
            config,
            plan.seed,
            progress=lambda done, total: context.log.info(f"candidate_pools: {done}/{total}"),
        )
        pools, outcomes = pool_frames(result, query_table["query_id"].to_list(), corpus["doc_id"])
        if pools.height == 0:
            raise _no_pools_error(config, outcomes)
        status = dict(outcomes.group_by("status").len().sort("status").rows())
        return StageOutput(
            {"candidate_pools": pools, "pool_outcomes": outcomes},
            figures={
                "pool_config": config.as_provenance(),
                "query_status": status,
                "n_relaxed_candidates": int(pools["relaxed"].sum()),
                "n_queries_with_pools": int(outcomes.height - status.get("skipped", 0)),
            },
        )

    return materialize_stage(
        context,
        store,
        plan,
        compute=compute,
        checks=lambda tables, _: pool_checks(config, tables["candidate_pools"]),
    )


def alternative_pools(
    context, plan: PlanReads, store, corpus, alternative
) -> tuple[pl.DataFrame, int]:
    """Pools selected from the other recipe's summaries (same topic similarity, thresholds and
    seed); the number of documents without an alternative summary."""
    aligned = corpus.select("doc_id").join(alternative, on="doc_id", how="left")
    tokens = build_token_matrix(aligned["summary"])
    score_matrix(
        context,
        plan,
        store,
        "jaccard",
        lambda rows: jaccard_dense_block(tokens.rows(rows), tokens),
        name="recipe_summary_similarity",
    )
    queries = store.read_table("queries")
    found = select_pools(
        queries["doc_index"].to_numpy(),
        stored_matrix(plan, "topic_similarity"),
        stored_matrix(plan, "recipe_summary_similarity"),
        build_token_matrix(corpus["problem"]),
        plan.pools.config,
        plan.seed,
    )
    pools, _ = pool_frames(found, queries["query_id"].to_list(), corpus["doc_id"])
    return pools, int(aligned["summary"].null_count())


PER_QUERY_ASSETS = [queries, topic_similarity, summary_similarity, candidate_pools]
