"""Reuse or compute: the one mechanism every asset uses.

An asset's fingerprint hashes the settings it read from the build plan (recorded by its
:class:`~saber_config.reads.PlanReads` view: no stage lists its keys), what it depends
on outside the plan (``extra``: input files, prompt hashes, the LLM's identity), the code version
of its module (all the project code it runs, :mod:`saber_lineage.code_version`) and the data
versions of its upstream assets — the ``deps`` of its asset definition, declared once.

Reuse: the settings the stage read last time, looked up in today's plan, with today's code,
extra inputs and upstream versions, give the fingerprint it recorded (and the tables and files it
wrote still exist) → the stored tables are reused. Otherwise the stage computes, writes its
tables with lineage columns and records the new fingerprint with the settings it read this time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl

from saber_config.plan import BuildPlan
from saber_config.reads import PlanReads, values_at
from saber_lineage.code_version import code_version
from saber_runtime import dry_run
from saber_runtime.metadata import markdown_preview, metadata_value, png_markdown
from saber_store.database import DuckDBStore, Lineage, stable_hash


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


@dataclass(frozen=True)
class Fingerprint:
    """What decides a stage's tables: settings read, extra inputs, code, upstream versions."""

    asset: str
    reads: dict[str, Any]
    extra: dict[str, Any]
    code: str
    upstream: dict[str, str]

    @property
    def config_hash(self) -> str:
        """Hash of the settings and extra inputs (the ``_config_hash`` lineage column)."""
        return stable_hash({"reads": self.reads, "extra": self.extra})

    @property
    def value(self) -> str:
        """The fingerprint itself."""
        parts = {"asset": self.asset, "config": self.config_hash, "code": self.code}
        return stable_hash({**parts, "up": self.upstream})


CODE_VERSION_TAG = "dagster/code_version"  # the tag Dagster's staleness reads


def stage_version(code: str, reads: Mapping[str, Any]) -> str:
    """The code version Dagster shows for a stage: its code and the values of the settings it
    read, so the UI marks an asset stale when either changes (``asset_code_versions``)."""
    return stable_hash({"code": code, "reads": dict(reads)})[:12]


def asset_code_versions(
    store: DuckDBStore, plan: BuildPlan, modules: Mapping[str, str]
) -> dict[str, str]:
    """Per asset (``modules``: asset → module of its function) the :func:`stage_version` of its
    code and of today's values of the settings its last materialization read."""
    entries = store.manifest_entries() if Path(store.database).exists() else {}
    out = {}
    for asset, module in modules.items():
        reads = entries.get(asset, {}).get("metadata", {}).get("reads", {})
        out[asset] = stage_version(code_version(module), values_at(plan, reads))
    return out


def upstream_versions(store: DuckDBStore, asset: str, upstream: list[str]) -> dict[str, str]:
    """The recorded data version of each upstream asset (RuntimeError if one is missing; in a
    dry run, the version each upstream decision predicts)."""
    planned = dry_run.active()
    predicted = planned.predicted if planned is not None else {}
    recorded = store.manifest_entries([n for n in upstream if n not in predicted])
    versions = {}
    for name in upstream:
        if name in predicted:
            versions[name] = predicted[name]
        elif name in recorded:
            versions[name] = recorded[name]["data_version"]
        else:
            raise RuntimeError(f"asset {asset}: upstream asset {name!r} has not been materialized")
    return versions


def still_valid(previous: Mapping[str, Any] | None, now: Fingerprint, plan: PlanReads) -> bool:
    """Whether a recorded manifest entry still holds: the settings it read have today's values
    in ``plan`` and everything else is unchanged."""
    if previous is None or "reads" not in previous["metadata"]:
        return False
    reads = values_at(plan.plan, previous["metadata"]["reads"])
    return (
        previous["fingerprint"]
        == Fingerprint(now.asset, reads, now.extra, now.code, now.upstream).value
    )


def materialize_stage(
    context: dg.AssetExecutionContext,
    store: DuckDBStore,
    plan: PlanReads,
    *,
    compute: Callable[[], StageOutput],
    extra: Mapping[str, Any] | None = None,
    checks: CheckFn | None = None,
    track_upstream: bool = True,
    key: str | None = None,
) -> dg.MaterializeResult:
    """Reuse the stored output when the fingerprint still holds, else compute and store it.

    ``plan`` is the asset's recording view of the build plan: every setting the asset reads
    through it (before this call or inside ``compute``) is part of its fingerprint. ``extra``:
    what the tables depend on outside the plan (input file hashes, prompt hashes, the backend's
    identity). ``track_upstream=False`` is for a stage whose inputs are identified by ``extra``
    alone (the evaluation of an export folder: its content hash), so it runs without its deps.
    ``key`` names the manifest entry when it is not the asset's (a partition: ``asset[key]``).
    """
    asset = key or context.asset_key.to_user_string()
    up = upstream_versions(store, asset, upstream_of(context) if track_upstream else [])
    extra = {k: extra[k] for k in sorted(extra or {})}
    now = Fingerprint(asset, plan.reads, extra, code_version(compute.__module__), up)
    previous = store.manifest_entry(asset)
    there = previous is not None and _still_there(store, previous["metadata"])
    planned = dry_run.active()
    if planned is not None:
        module = compute.__module__
        decision = dry_run.decide(planned, asset, previous, plan, extra, module, up, there)
        metadata = {"dry_run": decision.action, "reasons": "; ".join(decision.reasons)}
        version = dg.DataVersion(planned.predicted.get(asset, "none"))
        unrun = [
            dg.AssetCheckResult(check_name=k.name, passed=True, metadata={"dry_run": "not run"})
            for k in context.assets_def.check_keys
        ]
        return dg.MaterializeResult(metadata=metadata, data_version=version, check_results=unrun)
    reused = still_valid(previous, now, plan) and there
    if reused:
        context.log.info(f"{asset}: inputs, settings and code unchanged; reusing stored tables")
        stored = previous["metadata"]
        tables = {name: store.read_table(name) for name in stored["tables"]}
        figures, plots = stored["figures"], {k: Path(v) for k, v in stored["plots"].items()}
        data_version, fingerprint = previous["data_version"], previous["fingerprint"]
        config_hash = Fingerprint(asset, stored["reads"], extra, now.code, up).config_hash
    else:
        started = time.monotonic()
        output = compute()
        compute_s = round(time.monotonic() - started, 3)
        now = Fingerprint(asset, plan.reads, extra, now.code, up)
        config_hash, fingerprint = now.config_hash, now.value
        lineage = Lineage(context.run.run_id, asset, config_hash, now.code)
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
                "reads": now.reads,
                "extra": extra,
                "code": now.code,
                "code_files": dry_run.code_files(compute.__module__),
                "upstream": up,
                "compute_s": compute_s,
            },
        )
    metadata: dict[str, Any] = {
        "reused": reused,
        "duckdb_database": dg.MetadataValue.path(store.database),
        "config_hash": config_hash,
        "code_version": now.code,
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
    reads = previous["metadata"]["reads"] if reused else now.reads
    tags = {CODE_VERSION_TAG: stage_version(now.code, values_at(plan.plan, reads))}
    return dg.MaterializeResult(
        metadata=metadata,
        check_results=check_results,
        data_version=dg.DataVersion(data_version),
        tags=tags,
    )


def _still_there(store: DuckDBStore, stored: Mapping[str, Any]) -> bool:
    return set(stored["tables"]) <= store.table_names() and all(
        Path(p).exists() for p in [*stored["files"], *stored["plots"].values()]
    )
