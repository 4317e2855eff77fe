"""Corpus validation: every input row ends in the corpus or in the quarantine, with a reason.

Corpus schema (one row per problem):

=========== ======================= ==========================================================
column      type                    rule
=========== ======================= ==========================================================
doc_id      string, required        non-empty after stripping, unique (later copies quarantined)
problem     string, required        non-empty after stripping, at most ``max_chars`` characters
solution    string, required        non-empty after stripping, at most ``max_chars`` characters
source      string, optional        where the row comes from (default ``"user"``)
domain      string, optional        e.g. Algebra, Geometry, Number Theory, Combinatorics,
                                    Calculus (default ``"Unknown"``)
summary     string, optional        a human-written solution summary (generator-free); for the
                                    published construction, the core idea
topics      list of strings, opt.   topic annotations: ontology node ids, or full tag paths
                                    (``/Mathematics/Algebra/...``) as a tagger emits them, a
                                    tag's accepted ancestors listed too
tag_paths   list of strings, opt.   tag paths when ``topics`` holds node ids (both are kept;
                                    ``ontology_source: tag_paths`` reads this one first)
domains     list of strings, opt.   multi-label domains (default: ``[domain]``, or mapped from
                                    the tags' first level below the root)
=========== ======================= ==========================================================

Every row keeps ``original_index``, its 0-based position in the input (the published schema's
``original_index``).

A row that could not be read (invalid UTF-8 or JSON: a ``_read_error`` from the reader) is
quarantined with that error. A row whose problem text equals an earlier row's (after white
space folding and lower-casing) is quarantined as a duplicate text.
``len(corpus) + len(quarantine) == len(input)`` always holds; after :func:`limit_corpus` (a
seeded domain-balanced sample of the valid rows) ``len(corpus) + len(quarantine) + n_limited ==
len(input)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import polars as pl

from saber_core.discovery.pools import sample_queries
from saber_core.errors import InputError

REQUIRED = ("doc_id", "problem", "solution")
FULL_TEXT = "Problem: {}\n\nSolution: {}"
OPTIONAL_DEFAULTS = {"source": "user", "domain": "Unknown"}
DEFAULT_MAX_CHARS = 100_000


@dataclass(frozen=True)
class ValidatedCorpus:
    """Good rows and quarantined rows (``row``: 0-based input row, ``field``, ``reason``)."""

    corpus: pl.DataFrame
    quarantine: pl.DataFrame
    n_input: int
    n_limited: int = 0  # valid rows left out by a corpus_limit sample


def validate_corpus(frame: pl.DataFrame, max_chars: int = DEFAULT_MAX_CHARS) -> ValidatedCorpus:
    """Split an input frame into valid corpus rows and quarantined rows with reasons.

    Raises ValueError if a required column is missing altogether (a file-level error).
    """
    if "_read_error" not in frame.columns:
        frame = frame.with_columns(pl.lit(None, dtype=pl.String).alias("_read_error"))
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        present = [c for c in frame.columns if c != "_read_error"]
        raise InputError(
            f"the corpus has no column {', '.join(map(repr, missing))} (every row needs "
            f"{', '.join(REQUIRED)}; its columns: {', '.join(present) or 'none'})",
            count=frame.height,
            total=frame.height,
            fix="rename or add the column in the corpus file (inputs.corpus, SABER_CORPUS); "
            "schema: docs/data.md#inputs",
        )
    n_input = frame.height
    frame = frame.with_row_index("row")
    for column in ("topics", "tag_paths", "domains"):
        if column not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=pl.List(pl.String)).alias(column))
        frame = frame.with_columns(pl.col(column).cast(pl.List(pl.String)))
    if "domain" not in frame.columns:  # a multi-label corpus: its first domain
        frame = frame.with_columns(pl.col("domains").list.first().alias("domain"))
    for column, default in OPTIONAL_DEFAULTS.items():
        if column not in frame.columns:
            frame = frame.with_columns(pl.lit(default).alias(column))
    for column in ("summary",):
        if column not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=pl.String).alias(column))
    text_columns = ["doc_id", "problem", "solution", "source", "domain", "summary"]
    frame = frame.with_columns(
        [pl.col(c).cast(pl.String).str.strip_chars() for c in text_columns]
    ).with_columns(
        pl.col("source").fill_null(OPTIONAL_DEFAULTS["source"]),
        pl.col("domain").fill_null(OPTIONAL_DEFAULTS["domain"]),
    )

    checks: list[tuple[str, pl.Expr, str]] = [
        ("line", pl.col("_read_error").is_not_null(), "unreadable row")
    ]
    for column in REQUIRED:
        checks.append((column, pl.col(column).is_null(), f"missing {column}"))
        checks.append((column, pl.col(column) == "", f"empty {column}"))
    for column in ("problem", "solution"):
        checks.append(
            (
                column,
                pl.col(column).str.len_chars() > max_chars,
                f"{column} longer than {max_chars} characters",
            )
        )
    reason = pl.lit(None, dtype=pl.String)
    field = pl.lit(None, dtype=pl.String)
    for column, condition, message in reversed(checks):
        reason = pl.when(condition.fill_null(False)).then(pl.lit(message)).otherwise(reason)
        field = pl.when(condition.fill_null(False)).then(pl.lit(column)).otherwise(field)
    frame = frame.with_columns(
        reason=pl.when(pl.col("_read_error").is_not_null())
        .then(pl.col("_read_error"))
        .otherwise(reason),
        field=field,
    )

    # duplicates are judged among rows that passed the field checks, first occurrence wins
    text_key = pl.col("problem").str.to_lowercase().str.replace_all(r"\s+", " ")
    passed = (
        frame.filter(pl.col("reason").is_null())
        .with_columns(text_key.alias("text_key"))
        .with_columns(
            first_row=pl.col("row").min().over("doc_id"),
            first_text_row=pl.col("row").min().over("text_key"),
            first_text_doc=pl.col("doc_id").sort_by("row").first().over("text_key"),
        )
    )
    id_dup = pl.col("row") != pl.col("first_row")
    text_dup = pl.col("row") != pl.col("first_text_row")
    passed = passed.with_columns(
        reason=pl.when(id_dup)
        .then(pl.format("duplicate doc_id (first at row {})", pl.col("first_row")))
        .when(text_dup)
        .then(pl.format("duplicate problem text of doc_id {}", pl.col("first_text_doc"))),
        field=pl.when(id_dup).then(pl.lit("doc_id")).when(text_dup).then(pl.lit("problem")),
    ).drop("text_key", "first_row", "first_text_row", "first_text_doc")
    flagged = pl.concat([frame.filter(pl.col("reason").is_not_null()), passed], how="diagonal")
    good = flagged.filter(pl.col("reason").is_null()).sort("row")
    quarantine = flagged.filter(pl.col("reason").is_not_null()).sort("row")
    columns = [
        "doc_id",
        "problem",
        "solution",
        "source",
        "domain",
        "summary",
        "topics",
        "tag_paths",
        "domains",
    ]
    lists = ("topics", "tag_paths", "domains")
    result = ValidatedCorpus(
        corpus=good.select(*columns, pl.col("row").alias("original_index")),
        quarantine=quarantine.select(
            "row", "field", "reason", *[c for c in columns if c not in lists]
        ),
        n_input=n_input,
    )
    assert result.corpus.height + result.quarantine.height == n_input
    return result


def limit_corpus(validated: ValidatedCorpus, limit: int, seed: int) -> ValidatedCorpus:
    """Keep a seeded sample of ``limit`` valid rows balanced across domains
    (:func:`saber_core.discovery.pools.sample_queries`); ``limit`` ≤ 0 keeps every row. The rows
    left out
    are counted in ``n_limited``."""
    if limit <= 0:
        return validated
    keep = sample_queries(validated.corpus["domain"].to_list(), limit, seed)
    left_out = validated.n_limited + validated.corpus.height - len(keep)
    return replace(validated, corpus=validated.corpus[keep], n_limited=left_out)


def full_text(problem: str, solution: str) -> str:
    """The "full" text of a problem (SPEC): ``Problem: {problem}\\n\\nSolution: {solution}``."""
    return FULL_TEXT.format(problem, solution)


def full_text_expr(problem: pl.Expr, solution: pl.Expr) -> pl.Expr:
    """:func:`full_text` as a polars expression."""
    return pl.format(FULL_TEXT, problem, solution)
