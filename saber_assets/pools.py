"""Stage: candidate pools (topic-only / summary-only / both) for every query."""

import dagster as dg
import numpy as np
import polars as pl

from saber_assets.runtime import StageOutput, check, materialize_stage
from saber_assets.similarity import matrix_path
from saber_core.discovery import pool_frames, select_pools
from saber_core.text import build_token_matrix
from saber_resources.config import BuildConfig
from saber_resources.storage import DuckDBStore


@dg.asset(
    group_name="discovery",
    deps=["corpus", "queries", "topic_similarity", "summary_similarity"],
    check_specs=[
        dg.AssetCheckSpec("pool_size_and_split", asset="candidate_pools"),
        dg.AssetCheckSpec("no_self_or_duplicate_candidates", asset="candidate_pools"),
    ],
)
def candidate_pools(
    context: dg.AssetExecutionContext, build: BuildConfig, store: DuckDBStore
) -> dg.MaterializeResult:
    """Per query: the pool in released order, with group, BMA, Jaccard and relaxed flag."""
    config = build.pool_config()

    def compute() -> StageOutput:
        corpus = store.read_table("corpus")
        doc_ids = corpus["doc_id"].to_numpy()
        query_table = store.read_table("queries")
        result = select_pools(
            query_table["doc_index"].to_numpy(),
            np.load(matrix_path(build, "topic_similarity"), mmap_mode="r"),
            np.load(matrix_path(build, "summary_similarity"), mmap_mode="r"),
            build_token_matrix(corpus["problem"]),
            config,
            build.seed,
            progress=lambda done, total: context.log.info(f"candidate_pools: {done}/{total}"),
        )
        pools, outcomes = pool_frames(result, query_table["query_id"].to_list(), doc_ids)
        if pools.height == 0:
            reasons = outcomes.group_by("reason").len().sort("len", descending=True)
            raise ValueError(
                f"no query got a pool of {config.pool_size}: "
                + "; ".join(f"{n} × {r}" for r, n in reasons.head(3).rows())
                + " (corpus too small for the configured pool sizes?)"
            )
        status = dict(outcomes.group_by("status").len().sort("status").rows())
        return StageOutput(
            {"candidate_pools": pools, "pool_outcomes": outcomes},
            figures={
                "pool_config": config.as_provenance(),
                "query_status": status,
                "n_relaxed_candidates": int(pools["relaxed"].sum()) if pools.height else 0,
                "n_queries_with_pools": int(outcomes.height - status.get("skipped", 0)),
            },
        )

    def checks(tables, figures):
        pools = tables["candidate_pools"]
        sizes = pools.group_by("query_id", "group").len()
        expected = config.sizes
        bad_split = sizes.filter(
            pl.col("len") != pl.col("group").replace_strict(expected, return_dtype=pl.Int64)
        )
        per_query = pools.group_by("query_id").len()
        bad_size = per_query.filter(pl.col("len") != config.pool_size)
        self_rows = pools.filter(pl.col("query_id") == pl.col("doc_id"))
        dup_rows = pools.filter(pl.struct("query_id", "doc_id").is_duplicated())
        return [
            check(
                "pool_size_and_split",
                bad_split.height == 0 and bad_size.height == 0,
                f"every pool has {config.pool_size} candidates split "
                f"{expected['topic']}/{expected['summary']}/{expected['both']}",
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

    return materialize_stage(
        context,
        store,
        settings={**config.as_provenance(), "seed": build.seed},
        upstream=["corpus", "queries", "topic_similarity", "summary_similarity"],
        compute=compute,
        checks=checks,
    )
