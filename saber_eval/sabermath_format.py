"""The released SaberMath schema (``sabermath/SaberMath-queries``, ``…-documents``, split
``train``; ``docs/sabermath.md`` §12), written from — and read back into — a benchmark.

* ``documents``: ``id, problem, solution, tags, idea, original_index``, one row per distinct
  candidate, ordered by ``original_index``;
* ``queries``: ``id, problem, solution, candidates`` (row positions into ``documents``),
  ``relevance_scores`` (aligned, 0–5), ``domains`` (a list), ``tags, idea, original_index,
  bma_scores, jaccard_scores`` (the stored float16 values), in the queries' order.

Reading needs ``id, problem, solution, candidates, relevance_scores, domains`` of the queries
and ``id, problem, solution`` of the documents (``jaccard_scores`` when present); a table
without one of them is an error naming the table and every missing column.

:func:`write_sabermath` writes both as Hugging Face ``datasets`` folders (``save_to_disk``:
``queries/``, ``documents/``) and as ``queries.parquet`` / ``documents.parquet``;
:func:`read_sabermath` reads the parquet pair (or the two ``datasets`` folders) as a
:class:`~saber_eval.benchmark.Benchmark` (a multi-domain query counts in each of its domains).
:func:`load_hf_sabermath` reads the same tables from the Hugging Face hub
(``hf:NAME[:REVISION]``, :func:`hf_tables` maps NAME onto datasets, configs and splits) through
``datasets.load_dataset``, which with ``HF_HUB_OFFLINE`` set reads its local cache only.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from saber_eval.benchmark import Benchmark, Query

if TYPE_CHECKING:
    from datasets import Dataset

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
READ_COLUMNS = {
    "queries": ("id", "problem", "solution", "candidates", "relevance_scores", "domains"),
    "documents": ("id", "problem", "solution"),
}
HF_PREFIX = "hf:"
HF_SPLIT = "train"
PAIR_SUFFIXES = ("-queries", "-documents")
LAYOUT_HINT = (
    " (hf:NAME reads the configs queries and documents of one dataset; hf:OWNER/X-queries reads "
    "the released pair OWNER/X-queries + OWNER/X-documents)"
)


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


def _frame(path: Path, name: str) -> tuple[pl.DataFrame, str]:
    """A table of a released-schema folder and where it was read (for errors)."""
    if (path / f"{name}.parquet").exists():
        return pl.read_parquet(path / f"{name}.parquet"), str(path / f"{name}.parquet")
    from datasets import load_from_disk

    return pl.from_arrow(load_from_disk(str(path / name)).data.table), str(path / name)


def check_columns(frame: pl.DataFrame, table: str, where: str) -> None:
    """Raise naming ``where`` and every column of :data:`READ_COLUMNS` the table lacks."""
    missing = [c for c in READ_COLUMNS[table] if c not in frame.columns]
    if missing:
        raise ValueError(
            f"{where}: the {table} table lacks column(s) {', '.join(missing)} "
            f"(the released schema needs {', '.join(READ_COLUMNS[table])})"
        )


def read_sabermath(path: str | Path) -> Benchmark:
    """The released schema of a folder as a benchmark (:func:`sabermath_benchmark`)."""
    path = Path(path).resolve()
    (queries, q_where), (documents, d_where) = _frame(path, "queries"), _frame(path, "documents")
    check_columns(queries, "queries", q_where)
    check_columns(documents, "documents", d_where)
    return sabermath_benchmark(queries, documents, path, _content_hash(path))


def sabermath_benchmark(
    queries: pl.DataFrame, documents: pl.DataFrame, path: Path, content_hash: str
) -> Benchmark:
    """The released tables as a benchmark: documents by row position, ratings aligned;
    errors name the query and field."""
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
    return Benchmark(path=path, queries=tuple(out), corpus=corpus, hash=content_hash)


def _files_hash(files: Iterable[Path]) -> str:
    """sha256 (16 hex) of the files' names and bytes, in the given order."""
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def _content_hash(path: Path) -> str:
    """:func:`_files_hash` of the files that hold the data (parquet pair, else datasets
    folders)."""
    files = [path / "queries.parquet", path / "documents.parquet"]
    if not all(f.exists() for f in files):
        files = sorted(
            p for name in ("queries", "documents") for p in (path / name).rglob("*") if p.is_file()
        )
    return _files_hash(files)


def parse_hf(reference: str) -> tuple[str, str | None]:
    """``hf:NAME[:REVISION]`` → (NAME, REVISION or None); NAME is ``owner/name`` or ``name``."""
    name, _, revision = reference.removeprefix(HF_PREFIX).partition(":")
    if not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name):
        raise ValueError(f"{reference}: use hf:NAME[:REVISION] with NAME = owner/dataset")
    return name, revision or None


def hf_tables(name: str) -> dict[str, tuple[str, str | None]]:
    """Where the two tables of ``hf:NAME`` live, as (dataset, config), both split ``train``:
    NAME ending in ``-queries`` is the released pair (``sabermath/SaberMath-queries`` and
    ``sabermath/SaberMath-documents``, default config); any other NAME is one dataset with the
    configs ``queries`` and ``documents`` (``saber export --format sabermath`` pushed as one)."""
    queries, documents = PAIR_SUFFIXES
    if name.endswith(queries):
        return {
            "queries": (name, None),
            "documents": (name.removesuffix(queries) + documents, None),
        }
    return {"queries": (name, "queries"), "documents": (name, "documents")}


def _load_hf_table(
    reference: str, dataset: str, config: str | None, revision: str | None
) -> Dataset:
    """``load_dataset(dataset, config, split=train, revision=revision)``; a failure is one line
    naming the reference and the dataset (and, offline, that only the cache was looked at)."""
    from datasets import config as hf_config
    from datasets import load_dataset

    where = _hf_where(reference, dataset, config)
    layout = "" if config is None else LAYOUT_HINT
    try:
        table = load_dataset(dataset, config, split=HF_SPLIT, revision=revision)
    except ConnectionError as exc:
        cache = hf_config.HF_DATASETS_CACHE
        if hf_config.HF_HUB_OFFLINE:
            raise FileNotFoundError(
                f"{reference}: {dataset} is not in the Hugging Face datasets cache ({cache}) and "
                "HF_HUB_OFFLINE (or HF_DATASETS_OFFLINE) is set, so it is not downloaded; load it "
                f"once online or point HF_DATASETS_CACHE / HF_HOME at a cache that holds it{layout}"
            ) from exc
        raise FileNotFoundError(
            f"{where}: the hub is unreachable and the datasets cache ({cache}) lacks it "
            f"({' '.join(str(exc).split())}){layout}"
        ) from exc
    except (FileNotFoundError, ValueError) as exc:
        raise ValueError(f"{where}: {' '.join(str(exc).split())}{layout}") from exc
    commit = Path(table.cache_files[0]["filename"]).parent.name if table.cache_files else ""
    if revision and _is_sha(revision) and _is_sha(commit) and commit != revision:
        raise ValueError(
            f"{where}: the cache holds commit {commit}, not the requested {revision} (offline, "
            "datasets loads the cached copy)"
        )
    return table


def _hf_where(reference: str, dataset: str, config: str | None) -> str:
    return f"{reference}: {dataset} (config {config or 'default'}, split {HF_SPLIT})"


def _is_sha(text: str) -> bool:
    return re.fullmatch(r"[0-9a-f]{40}", text) is not None


def load_hf_sabermath(reference: str) -> Benchmark:
    """``hf:NAME[:REVISION]`` (:func:`hf_tables`) as a benchmark: columns checked per table,
    hash over the datasets' cached Arrow files, path ``hf:NAME``."""
    name, revision = parse_hf(reference)
    frames: dict[str, pl.DataFrame] = {}
    files: list[Path] = []
    for table, (dataset, config) in hf_tables(name).items():
        loaded = _load_hf_table(reference, dataset, config, revision)
        frames[table] = pl.from_arrow(loaded.data.table)
        check_columns(frames[table], table, _hf_where(reference, dataset, config))
        files += [Path(f["filename"]) for f in loaded.cache_files]
    path = Path(HF_PREFIX + name)
    return sabermath_benchmark(frames["queries"], frames["documents"], path, _files_hash(files))
