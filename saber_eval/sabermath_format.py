"""The released SaberMath schema (``sabermath/SaberMath-queries``, ``…-documents``, split
``train``; ``docs/sabermath.md`` §12), written from — and read back into — a benchmark.

* ``documents``: ``id, problem, solution, tags, idea, original_index``, one row per distinct
  candidate, ordered by ``original_index``;
* ``queries``: ``id, problem, solution, candidates`` (row positions into ``documents``),
  ``relevance_scores`` (aligned, 0–5), ``domains`` (a list), ``tags, idea, original_index,
  bma_scores, jaccard_scores`` (the stored float16 values), in the queries' order.

:func:`write_sabermath` writes both as Hugging Face ``datasets`` folders (``save_to_disk``:
``queries/``, ``documents/``) and as ``queries.parquet`` / ``documents.parquet``;
:func:`read_sabermath` reads the parquet pair (or the two ``datasets`` folders) as a
:class:`~saber_eval.benchmark.Benchmark` (a multi-domain query counts in each of its domains).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import polars as pl

from saber_eval.benchmark import Benchmark, Query

QUERY_COLUMNS = (
    "id",
    "problem",
    "solution",
    "candidates",
    "relevance_scores",
    "domains",
    "tags",
    "idea",
    "original_index",
    "bma_scores",
    "jaccard_scores",
)
DOCUMENT_COLUMNS = ("id", "problem", "solution", "tags", "idea", "original_index")


def sabermath_frames(export_dir: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(queries, documents) in the released schema, from a SABER export folder."""
    queries = pl.read_ndjson(Path(export_dir) / "queries.jsonl")
    corpus = pl.read_ndjson(Path(export_dir) / "corpus.jsonl")
    documents = corpus.select(
        pl.col("doc_id").alias("id"),
        "problem",
        "solution",
        pl.col("topics").alias("tags"),
        pl.col("summary").alias("idea"),
        "original_index",
    ).sort("original_index", "id")
    position = dict(zip(documents["id"].to_list(), range(documents.height), strict=True))
    rows = queries.with_columns(
        pl.col("candidates").map_elements(
            lambda ids: [position[i] for i in ids], return_dtype=pl.List(pl.Int64)
        )
    )
    return rows.select(pl.col("query_id").alias("id"), *QUERY_COLUMNS[1:]), documents


def write_sabermath(export_dir: Path, out: Path) -> dict[str, int]:
    """Write the released schema into ``out`` (module docstring); returns the row counts."""
    from datasets import Dataset

    queries, documents = sabermath_frames(export_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, frame in (("queries", queries), ("documents", documents)):
        frame.write_parquet(out / f"{name}.parquet")
        Dataset.from_polars(frame).save_to_disk(str(out / name))
    manifest = {
        "schema": "sabermath",
        "split": "train",
        "queries": queries.height,
        "documents": documents.height,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return {"queries": queries.height, "documents": documents.height}


def is_sabermath(path: Path) -> bool:
    """Whether ``path`` holds the released schema (parquet pair or datasets folders)."""
    path = Path(path)
    return (path / "queries.parquet").exists() or (path / "queries" / "dataset_info.json").exists()


def _frame(path: Path, name: str) -> pl.DataFrame:
    if (path / f"{name}.parquet").exists():
        return pl.read_parquet(path / f"{name}.parquet")
    from datasets import load_from_disk

    return pl.from_arrow(load_from_disk(str(path / name)).data.table)


def read_sabermath(path: str | Path) -> Benchmark:
    """The released schema as a benchmark: documents by row position, ratings aligned;
    errors name the query and field."""
    path = Path(path).resolve()
    queries, documents = _frame(path, "queries"), _frame(path, "documents")
    ids = [str(i) for i in documents["id"].to_list()]
    corpus = {
        i: (str(p or ""), str(s or ""))
        for i, p, s in zip(
            ids, documents["problem"].to_list(), documents["solution"].to_list(), strict=True
        )
    }
    out = []
    for row in queries.iter_rows(named=True):
        qid, positions = str(row["id"]), list(row["candidates"] or [])
        ratings = np.asarray(row["relevance_scores"] or [], dtype=np.float64)
        if not positions or len(positions) != len(ratings):
            raise ValueError(f"query {qid}: {len(positions)} candidates, {len(ratings)} scores")
        if min(positions) < 0 or max(positions) >= len(ids):
            raise ValueError(f"query {qid}: candidates must be row positions < {len(ids)}")
        domains = sorted({str(d) for d in row.get("domains") or []}) or ["unknown"]
        jaccard = row.get("jaccard_scores")
        out.append(
            Query(
                query_id=qid,
                problem=str(row["problem"]),
                solution=str(row["solution"] or ""),
                domain="|".join(domains),
                candidates=tuple(ids[p] for p in positions),
                relevance=ratings,
                jaccard=None if jaccard is None else np.asarray(jaccard, float),
            )
        )
    return Benchmark(path=path, queries=tuple(out), corpus=corpus, hash=_content_hash(path))


def _content_hash(path: Path) -> str:
    """sha256 (16 hex) of the files that hold the data (parquet pair, else datasets folders)."""
    files = [path / "queries.parquet", path / "documents.parquet"]
    if not all(f.exists() for f in files):
        files = sorted(
            p for name in ("queries", "documents") for p in (path / name).rglob("*") if p.is_file()
        )
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()[:16]
