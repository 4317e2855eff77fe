"""Reuse or compute: the one mechanism every asset uses.

An asset's fingerprint hashes its settings, the code version of its module (all the project code
it runs, :mod:`saber_resources.code_version`) and the data versions of its upstream assets — the
``deps`` of its asset definition, declared once. If the manifest already holds that fingerprint
(and the tables and files it wrote still exist), the stored tables are reused and nothing is
recomputed; otherwise the stage computes, writes its tables with lineage columns and records the
new fingerprint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl

from saber_resources.code_version import code_version
from saber_resources.store.database import DuckDBStore, Lineage, stable_hash
from saber_runtime.metadata import markdown_preview, metadata_value, png_markdown


@dataclass
class StageOutput:
    """What a stage produced: tables (the first is the asset's main table), figures, files."""

    tables: dict[str, pl.DataFrame]
    figures: dict[str, Any] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    plots: dict[str, Path] = field(default_factory=dict)


CheckFn = Callable[[dict[str, pl.DataFrame], dict[str, Any]], list[dg.AssetCheckResult]]


def upstream_of(context: dg.AssetExecutionContext) -> list[str]:
    """The asset's declared ``deps`` (its upstream assets), in declaration order."""
    spec = context.assets_def.specs_by_key[context.asset_key]
    return [dep.asset_key.to_user_string() for dep in spec.deps]


def materialize_stage(
    context: dg.AssetExecutionContext,
    store: DuckDBStore,
    *,
    settings: Mapping[str, Any],
    compute: Callable[[], StageOutput],
    checks: CheckFn | None = None,
    track_upstream: bool = True,
) -> dg.MaterializeResult:
    """Reuse the stored output when the fingerprint matches, else compute and store it.

    ``track_upstream=False`` is for a stage whose inputs are identified by ``settings`` alone
    (the evaluation of an export folder: its content hash), so it runs without its deps.
    """
    asset = context.asset_key.to_user_string()
    upstream_versions = {}
    for name in upstream_of(context) if track_upstream else []:
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
    metadata.update({k: metadata_value(v) for k, v in figures.items()})
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
