"""Small readers shared by the stage modules (rebuilding core objects from stored tables)."""

from __future__ import annotations

import hashlib
from importlib.metadata import version
from pathlib import Path

import polars as pl

from saber_core.ontology import Ontology, build_ontology
from saber_resources.storage import DuckDBStore


def source_fingerprint(spec: str, synth_scale: float = 1.0, seed: int = 0) -> str:
    """Identity of an input: the package version for ``champ``, the generator version and
    parameters for ``synthetic``, else the file's sha256."""
    if spec == "champ":
        return f"champ-dataset=={version('champ-dataset')}"
    if spec == "synthetic":
        from saber_core.synth import SYNTH_VERSION

        return f"synthetic:{SYNTH_VERSION}:scale={synth_scale}:seed={seed}"
    path = Path(spec)
    if not path.exists():
        raise FileNotFoundError(f"input file {spec} does not exist")
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def stored_ontology(store: DuckDBStore) -> Ontology:
    """The validated ontology rebuilt from the ``ontology`` table."""
    return build_ontology(store.read_table("ontology").select("node_id", "name", "parent_ids"))


def full_text(problem: pl.Expr, solution: pl.Expr) -> pl.Expr:
    """The "full" text of a problem: ``Problem: {problem}\\n\\nSolution: {solution}``."""
    return pl.format("Problem: {}\n\nSolution: {}", problem, solution)
