"""The benchmark export writer (released schema, judgments, BEIR layout): used by the
``benchmark_export`` asset and by ``saber export``.

Files written to the export folder:

* ``queries.jsonl`` — one row per query: ``query_id, problem, solution, domain, domains,
  candidates, candidate_groups, relevance_scores (0–5), jaccard_scores, bma_scores,
  relevance_intervals, tags, idea, original_index``, lists in pool order (topic-only,
  summary-only, both);
* ``corpus.jsonl`` — every distinct candidate document: ``doc_id, problem, solution, summary,
  topics, generator_free`` (true when the summary is human-written, not LLM-generated),
  ``original_index``;
* ``judgments.parquet`` — the same columns for every judge (:data:`JUDGMENT_COLUMNS`):
  ``query_id, round, slot, pos_a, pos_b, cand_a, cand_b, winner (a|b|null), p_a, raw,
  drop_reason, call_keys, input_hash, seed, shown_first`` (``a`` is shown first; the rule), the
  judge's provenance ``judge_kind, judge_model, judge_model_hash, judge_backend, prompt_id,
  prompt_hash, sampling_params`` (null where not applicable) and the lineage columns;
* ``beir/`` — ``corpus.jsonl`` (``_id, title, text`` with text = the full
  ``Problem: …\\n\\nSolution: …``), ``queries.jsonl`` (``_id, text`` = the problem statement) and
  ``qrels/test.tsv`` with graded integer labels ``round_half_up(rating)`` in 0..5 for every
  candidate (BEIR/MTEB tools need integers; the float ratings stay in ``queries.jsonl``);
* ``manifest.json`` — counts, what made the build and every asset's fingerprint
  (written by the ``build_manifest`` asset, :func:`write_manifest`).
"""

import json
from pathlib import Path

import polars as pl

from saber_core.evaluation.metrics import integer_labels
from saber_core.inputs.corpus import full_text_expr
from saber_llm.judges import PROVENANCE_COLUMNS
from saber_store.database import LINEAGE_COLUMNS, DuckDBStore

JUDGMENT_SCHEMA = {
    "query_id": pl.String,
    "round": pl.Int64,
    "slot": pl.Int64,
    "pos_a": pl.Int64,
    "pos_b": pl.Int64,
    "cand_a": pl.String,
    "cand_b": pl.String,
    "winner": pl.String,
    "p_a": pl.Float64,
    "raw": pl.String,
    "drop_reason": pl.String,
    "call_keys": pl.String,
    "input_hash": pl.String,
    "seed": pl.Int64,
    "shown_first": pl.String,
    **dict.fromkeys(PROVENANCE_COLUMNS, pl.String),
}
JUDGMENT_COLUMNS = [*JUDGMENT_SCHEMA, *LINEAGE_COLUMNS]


def judgment_export(store: DuckDBStore) -> pl.DataFrame:
    """``judgments.parquet``: :data:`JUDGMENT_COLUMNS`, the same types for every judge."""
    table = store.read_table("judgments", lineage=True)
    return table.select(
        *[
            pl.col(c).cast(t) if c in table.columns else pl.lit(None, t).alias(c)
            for c, t in JUDGMENT_SCHEMA.items()
        ],
        *LINEAGE_COLUMNS,
    )


def doc_tags(store: DuckDBStore) -> pl.DataFrame:
    """``doc_id, topics``: every annotated document's topics in stored order."""
    table = store.read_table("topic_annotations")
    order = ["doc_id", "position"] if "position" in table.columns else ["doc_id"]
    return (
        table.sort(order, maintain_order=True)
        .group_by("doc_id", maintain_order=True)
        .agg(pl.col("topic_id").alias("topics"))
    )


def query_rows(store: DuckDBStore) -> pl.DataFrame:
    """The released per-query rows (lists in pool order), in the queries table's order."""
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
    queries = store.read_table("queries")
    if "domains" not in queries.columns:
        queries = queries.with_columns(pl.concat_list("domain").alias("domains"))
    own = corpus.select(pl.col("doc_id").alias("query_id"), "problem", "solution", "original_index")
    ideas = store.read_table("summaries").select(
        pl.col("doc_id").alias("query_id"), pl.col("summary").alias("idea")
    )
    tags = doc_tags(store).select(
        pl.col("doc_id").alias("query_id"), pl.col("topics").alias("tags")
    )
    return (
        queries.select("query_id", "domain", "domains")
        .join(pools, on="query_id", how="inner", maintain_order="left")
        .join(own, on="query_id", how="left", maintain_order="left")
        .join(ideas, on="query_id", how="left", maintain_order="left")
        .join(tags, on="query_id", how="left", maintain_order="left")
        .select(
            "query_id",
            "problem",
            "solution",
            "domain",
            "domains",
            "candidates",
            "candidate_groups",
            "relevance_scores",
            "jaccard_scores",
            "bma_scores",
            "relevance_intervals",
            "tags",
            "idea",
            "original_index",
        )
    )


def write_export(store: DuckDBStore, out: Path) -> dict[str, int]:
    """Write every export file into ``out``; returns the row count of each file."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "beir" / "qrels").mkdir(parents=True, exist_ok=True)
    queries = query_rows(store)
    candidates = queries.select(pl.col("candidates").explode().unique()).to_series()
    topics = doc_tags(store)
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
    judgments = judgment_export(store)
    queries.write_ndjson(out / "queries.jsonl")
    corpus.select(
        "doc_id", "problem", "solution", "summary", "topics", "generator_free", "original_index"
    ).write_ndjson(out / "corpus.jsonl")
    judgments.write_parquet(out / "judgments.parquet")
    corpus.select(
        pl.col("doc_id").alias("_id"),
        pl.lit("").alias("title"),
        full_text_expr(pl.col("problem"), pl.col("solution")).alias("text"),
    ).write_ndjson(out / "beir" / "corpus.jsonl")
    queries.select(pl.col("query_id").alias("_id"), pl.col("problem").alias("text")).write_ndjson(
        out / "beir" / "queries.jsonl"
    )
    qrels = queries.select(
        pl.col("query_id").alias("query-id"),
        pl.col("candidates").alias("corpus-id"),
        pl.col("relevance_scores").alias("score"),
    ).explode("corpus-id", "score")
    qrels = qrels.with_columns(pl.Series("score", integer_labels(qrels["score"].to_numpy())))
    qrels.write_csv(out / "beir" / "qrels" / "test.tsv", separator="\t")
    counts = {
        "queries.jsonl": queries.height,
        "corpus.jsonl": corpus.height,
        "judgments.parquet": judgments.height,
        "beir/qrels/test.tsv": qrels.height,
    }
    return counts


def write_manifest(out: Path, files: dict[str, int], build: dict, assets: dict) -> Path:
    """``manifest.json``: the export's files and row counts, what made the build
    (:func:`saber_lineage.provenance.build_manifest`) and every asset's fingerprint and data
    version (the tables behind the files)."""
    path = out / "manifest.json"
    payload = {"files": files, "build": build, "assets": assets}
    path.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str))
    return path
