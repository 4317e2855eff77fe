"""Stage: the benchmark export (released schema, judgments, BEIR layout) and its writer.

Files written to the export folder:

* ``queries.jsonl`` — one row per query: ``query_id, problem, solution, domain, candidates,
  candidate_groups, relevance_scores (0–5), jaccard_scores, bma_scores``, lists in pool order
  (topic-only, summary-only, both);
* ``corpus.jsonl`` — every distinct candidate document: ``doc_id, problem, solution, summary,
  topics, generator_free`` (true when the summary is human-written, not LLM-generated);
* ``judgments.parquet`` — ``query_id, round, cand_a, cand_b, winner (a|b|null), p_a`` and the
  judge's provenance columns;
* ``beir/`` — ``corpus.jsonl`` (``_id, title, text`` with text = the full
  ``Problem: …\\n\\nSolution: …``), ``queries.jsonl`` (``_id, text`` = the problem statement) and
  ``qrels/test.tsv`` with graded integer labels ``round_half_up(rating)`` in 0..5 for every
  candidate (BEIR/MTEB tools need integers; the float ratings stay in ``queries.jsonl``);
* ``manifest.json`` — counts and the build's provenance.
"""

import json
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl

from saber_assets.common import full_text
from saber_assets.runtime import StageOutput, materialize_stage
from saber_resources.config import BuildConfig
from saber_resources.storage import DuckDBStore

EXPORT_UPSTREAM = [
    "corpus",
    "queries",
    "candidate_pools",
    "bt_ratings",
    "judgments",
    "rating_intervals",
    "summaries",
    "topic_annotations",
]


def query_rows(store: DuckDBStore) -> pl.DataFrame:
    """The released per-query rows (lists in pool order)."""
    corpus = store.read_table("corpus")
    ratings = store.read_table("bt_ratings").select("query_id", "doc_id", "rating")
    intervals = store.read_table("rating_intervals").select(
        "query_id", "doc_id", pl.concat_list("rating_lower", "rating_upper").alias("interval")
    )
    pools = (
        store.read_table("candidate_pools")
        .join(ratings, on=["query_id", "doc_id"], how="left")
        .join(intervals, on=["query_id", "doc_id"], how="left")
        .sort("query_id", "position")
        .group_by("query_id", maintain_order=True)
        .agg(
            pl.col("doc_id").alias("candidates"),
            pl.col("group").alias("candidate_groups"),
            pl.col("rating").alias("relevance_scores"),
            pl.col("jaccard").alias("jaccard_scores"),
            pl.col("bma").alias("bma_scores"),
            pl.col("interval").alias("relevance_intervals"),
        )
    )
    return (
        store.read_table("queries")
        .select("query_id", "domain")
        .join(pools, on="query_id", how="inner", maintain_order="left")
        .join(
            corpus.select(pl.col("doc_id").alias("query_id"), "problem", "solution"),
            on="query_id",
        )
        .select(
            "query_id",
            "problem",
            "solution",
            "domain",
            "candidates",
            "candidate_groups",
            "relevance_scores",
            "jaccard_scores",
            "bma_scores",
            "relevance_intervals",
        )
    )


def write_export(store: DuckDBStore, out: Path) -> dict[str, int]:
    """Write every export file into ``out``; returns the row count of each file."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "beir" / "qrels").mkdir(parents=True, exist_ok=True)
    queries = query_rows(store)
    candidates = queries.select(pl.col("candidates").explode().unique()).to_series()
    topics = (
        store.read_table("topic_annotations")
        .group_by("doc_id")
        .agg(pl.col("topic_id").alias("topics"))
    )
    corpus = (
        store.read_table("corpus")
        .filter(pl.col("doc_id").is_in(candidates.implode()))
        .drop("summary", "topics")
        .join(
            store.read_table("summaries").select(
                "doc_id", "summary", (pl.col("summary_origin") == "human").alias("generator_free")
            ),
            on="doc_id",
            how="left",
        )
        .join(topics, on="doc_id", how="left")
        .sort("doc_id")
    )
    judgments = store.read_table("judgments", lineage=True).drop("outcome")
    queries.write_ndjson(out / "queries.jsonl")
    corpus.select(
        "doc_id", "problem", "solution", "summary", "topics", "generator_free"
    ).write_ndjson(out / "corpus.jsonl")
    judgments.write_parquet(out / "judgments.parquet")
    corpus.select(
        pl.col("doc_id").alias("_id"),
        pl.lit("").alias("title"),
        full_text(pl.col("problem"), pl.col("solution")).alias("text"),
    ).write_ndjson(out / "beir" / "corpus.jsonl")
    queries.select(pl.col("query_id").alias("_id"), pl.col("problem").alias("text")).write_ndjson(
        out / "beir" / "queries.jsonl"
    )
    qrels = queries.select(
        pl.col("query_id").alias("query-id"),
        pl.col("candidates").alias("corpus-id"),
        pl.col("relevance_scores").alias("score"),
    ).explode("corpus-id", "score")
    qrels = qrels.with_columns(
        pl.Series("score", np.floor(qrels["score"].to_numpy() + 0.5).astype(np.int64))
    )
    qrels.write_csv(out / "beir" / "qrels" / "test.tsv", separator="\t")
    counts = {
        "queries.jsonl": queries.height,
        "corpus.jsonl": corpus.height,
        "judgments.parquet": judgments.height,
        "beir/qrels/test.tsv": qrels.height,
    }
    (out / "manifest.json").write_text(json.dumps({"files": counts}, indent=2))
    return counts


@dg.asset(group_name="export", deps=EXPORT_UPSTREAM, kinds={"json", "parquet"})
def benchmark_export(
    context: dg.AssetExecutionContext, build: BuildConfig, store: DuckDBStore
) -> dg.MaterializeResult:
    """The released benchmark files under ``$SABER_HOME/export``."""

    def compute() -> StageOutput:
        out = build.export_dir
        counts = write_export(store, out)
        files = pl.DataFrame({"file": list(counts), "rows": list(counts.values())})
        return StageOutput(
            {"benchmark_export": files.with_columns(pl.lit(str(out)).alias("folder"))},
            figures={"export_dir": str(out), **{f"rows/{k}": v for k, v in counts.items()}},
            files=[out / f for f in counts],
        )

    return materialize_stage(
        context,
        store,
        settings={"out": str(build.export_dir)},
        upstream=EXPORT_UPSTREAM,
        compute=compute,
    )
