"""Documented input file formats (the only module of ``saber_core`` that touches files).

Ontology file — one record per node, in any of:

* CSV (``.csv``): columns ``node_id,name,parent_ids``; ``parent_ids`` holds the parent ids
  separated by ``|`` (empty for a root). Example row: ``C_amgm,AM-GM inequality,C_ineq|C_means``.
* JSON (``.json``: an array of objects, or ``.jsonl``: one object per line):
  ``{"node_id": "C_amgm", "name": "AM-GM inequality", "parent_ids": ["C_ineq", "C_means"]}``.
* Parquet (``.parquet``): ``node_id`` string, ``name`` string, ``parent_ids`` list of strings.

Several parents make a DAG; several roots get a virtual root (see ``saber_core.ontology.dag``).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from saber_core.ontology.dag import Ontology, OntologyError, build_ontology

PARENT_SEPARATOR = "|"


def read_ontology_frame(path: str | Path) -> pl.DataFrame:
    """Read an ontology file into a frame ``node_id, name, parent_ids (list[str])``; a file
    that cannot be parsed is an :class:`OntologyError` naming it and the parser's reason."""
    path = Path(path)
    try:
        return _read_ontology_frame(path)
    except (pl.exceptions.PolarsError, OSError, ValueError) as err:
        if isinstance(err, OntologyError):
            raise
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise OntologyError(f"{path}: cannot be read as {path.suffix} ({reason})") from err


def _read_ontology_frame(path: Path) -> pl.DataFrame:
    suffix = path.suffix.lower()
    if suffix == ".csv":
        frame = pl.read_csv(path, infer_schema_length=0)
        if "parent_ids" in frame.columns:
            frame = frame.with_columns(
                pl.col("parent_ids")
                .fill_null("")
                .str.split(PARENT_SEPARATOR)
                .list.eval(pl.element().str.strip_chars())
                .list.eval(pl.element().filter(pl.element() != ""))
            )
    elif suffix == ".json":
        frame = pl.read_json(path)
    elif suffix == ".jsonl":
        frame = pl.read_ndjson(path)
    elif suffix == ".parquet":
        frame = pl.read_parquet(path)
    else:
        raise OntologyError(
            f"{path}: unsupported ontology format {suffix!r} (use .csv, .json, .jsonl, .parquet)"
        )
    if "parent_ids" not in frame.columns:
        raise OntologyError(
            f"{path}: missing column 'parent_ids' (every node needs node_id, name, parent_ids; "
            f"its columns: {', '.join(frame.columns)})"
        )
    if frame["parent_ids"].dtype == pl.Null:
        frame = frame.with_columns(pl.col("parent_ids").cast(pl.List(pl.String)))
    return frame


def load_ontology(path: str | Path) -> Ontology:
    """Read and validate an ontology file (see the module docstring for the formats)."""
    return build_ontology(read_ontology_frame(path))


def write_ontology_frame(frame: pl.DataFrame, path: str | Path) -> None:
    """Write an ontology frame in the format chosen by the file suffix (inverse of the reader)."""
    path = Path(path)
    suffix = path.suffix.lower()
    frame = frame.select("node_id", "name", "parent_ids")
    if suffix == ".csv":
        frame.with_columns(pl.col("parent_ids").list.join(PARENT_SEPARATOR)).write_csv(path)
    elif suffix == ".json":
        frame.write_json(path)
    elif suffix == ".jsonl":
        frame.write_ndjson(path)
    elif suffix == ".parquet":
        frame.write_parquet(path)
    else:
        raise OntologyError(f"{path}: unsupported ontology format {suffix!r}")
