"""The one mechanism every asset uses: fingerprint, reuse or compute, write tables, report.

An asset's fingerprint hashes its settings, the code version and the data versions of its
upstream assets. If the manifest already holds that fingerprint (and the tables and files it
wrote still exist), the stored tables are reused and nothing is recomputed; otherwise the stage
computes, writes its tables with lineage columns and records the new fingerprint.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl

from saber_resources.storage import DuckDBStore, Lineage, stable_hash

SHARED_SOURCES = (
    "saber_core",
    "saber_resources",
    "saber_assets/runtime.py",
    "saber_assets/common.py",
)


@lru_cache(maxsize=64)
def code_version(module: str) -> str:
    """Hash of the code an asset runs: the core, the resources, this runtime and its own module.

    Editing one stage's module makes only that stage (and what depends on its data) rebuild.
    """
    root = Path(__file__).resolve().parents[1]
    paths = [root / "saber_assets" / f"{module.rsplit('.', 1)[-1]}.py"]
    for source in SHARED_SOURCES:
        location = root / source
        paths += sorted(location.rglob("*.py")) if location.is_dir() else [location]
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


@dataclass
class StageOutput:
    """What a stage produced: tables (the first is the asset's main table), figures, files."""

    tables: dict[str, pl.DataFrame]
    figures: dict[str, Any] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    plots: dict[str, Path] = field(default_factory=dict)


CheckFn = Callable[[dict[str, pl.DataFrame], dict[str, Any]], list[dg.AssetCheckResult]]


def materialize_stage(
    context: dg.AssetExecutionContext,
    store: DuckDBStore,
    *,
    settings: Mapping[str, Any],
    upstream: Sequence[str],
    compute: Callable[[], StageOutput],
    checks: CheckFn | None = None,
) -> dg.MaterializeResult:
    """Reuse the stored output when the fingerprint matches, else compute and store it."""
    asset = context.asset_key.to_user_string()
    upstream_versions = {}
    for name in upstream:
        entry = store.manifest_entry(name)
        if entry is None:
            raise RuntimeError(f"asset {asset}: upstream asset {name!r} has not been materialized")
        upstream_versions[name] = entry["data_version"]
    config_hash = stable_hash(dict(settings))
    code = code_version(compute.__module__)
    fingerprint = stable_hash(
        {"asset": asset, "config": config_hash, "code": code, "up": upstream_versions}
    )
    previous = store.manifest_entry(asset)
    reused = (
        previous is not None
        and previous["fingerprint"] == fingerprint
        and _still_there(store, previous["metadata"])
    )
    if reused:
        context.log.info(f"{asset}: inputs, config and code unchanged; reusing stored tables")
        stored = previous["metadata"]
        tables = {name: store.read_table(name) for name in stored["tables"]}
        figures, plots = stored["figures"], {k: Path(v) for k, v in stored["plots"].items()}
        data_version = previous["data_version"]
    else:
        output = compute()
        lineage = Lineage(context.run.run_id, asset, config_hash, code)
        versions = {}
        for name, frame in output.tables.items():
            versions[name] = store.write_table(name, frame, lineage)
            context.log.info(f"{asset}: wrote table {name} ({frame.height} rows)")
        tables, figures, plots = output.tables, output.figures, output.plots
        data_version = stable_hash(versions)
        store.record_manifest(
            asset,
            fingerprint,
            data_version,
            context.run.run_id,
            {
                "tables": list(tables),
                "figures": figures,
                "files": [str(p) for p in output.files],
                "plots": {k: str(v) for k, v in plots.items()},
            },
        )
    metadata: dict[str, Any] = {
        "reused": reused,
        "duckdb_database": dg.MetadataValue.path(store.database),
        "config_hash": config_hash,
        "code_version": code,
        "fingerprint": fingerprint,
    }
    for name, frame in tables.items():
        metadata[f"{name}/table"] = name
        metadata[f"{name}/row_count"] = frame.height
        metadata[f"{name}/preview"] = dg.MetadataValue.md(markdown_preview(frame))
    metadata.update({k: _metadata_value(v) for k, v in figures.items()})
    for name, path in plots.items():
        metadata[f"plot/{name}"] = dg.MetadataValue.md(png_markdown(path))
    check_results = checks(tables, figures) if checks else None
    return dg.MaterializeResult(
        metadata=metadata, check_results=check_results, data_version=dg.DataVersion(data_version)
    )


def _still_there(store: DuckDBStore, stored: Mapping[str, Any]) -> bool:
    return all(store.has_table(t) for t in stored["tables"]) and all(
        Path(p).exists() for p in [*stored["files"], *stored["plots"].values()]
    )


def _metadata_value(value: Any) -> Any:
    if isinstance(value, dict | list):
        return dg.MetadataValue.json(value)
    return value


def markdown_preview(frame: pl.DataFrame, rows: int = 5, width: int = 60) -> str:
    """The first rows of a frame as a Markdown table (long cells shortened)."""
    head = frame.head(rows)
    columns = [c for c in head.columns if not c.startswith("_")]

    def cell(value: Any) -> str:
        text = str(value).replace("|", "\\|").replace("\n", " ")
        return text if len(text) <= width else text[: width - 1] + "…"

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in head.select(columns).rows()]
    return "\n".join(lines)


def png_markdown(path: Path) -> str:
    """A PNG inlined as a Markdown image (the Dagster UI renders it in the metadata panel)."""
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f"![{Path(path).stem}](data:image/png;base64,{data})"


def check(name: str, passed: bool, description: str, **metadata: Any) -> dg.AssetCheckResult:
    """An asset check result with a readable description and metadata."""
    return dg.AssetCheckResult(
        check_name=name,
        passed=bool(passed),
        description=description,
        metadata={k: _metadata_value(v) for k, v in metadata.items()},
    )


class BackendUnavailableError(RuntimeError):
    """LLM calls failed after the backend's own retries (server down, timeouts, 5xx)."""


def fail_on_backend_errors(stage: str, errors: int, calls: int, cached: int) -> None:
    """Stop a stage whose LLM calls failed, asking Dagster to retry it (transient errors only).

    Answers received so far are already in the call cache, so the retry pays only for the rest.
    """
    if errors == 0:
        return
    cause = BackendUnavailableError(
        f"{stage}: {errors} of {calls} LLM calls failed after the backend's retries "
        f"({cached} answers are cached; a retry pays only for the rest)"
    )
    raise dg.RetryRequested(max_retries=2, seconds_to_wait=10) from cause
