"""DuckDB storage: every intermediate table with lineage columns, plus a build manifest.

Each table written through ``DuckDBStore.write_table`` gets the lineage columns
``_run_id, _asset_key, _config_hash, _code_version, _created_at``. The ``_saber_manifest`` table
records, per asset, the fingerprint of everything that determined its output (config, code
version and upstream data versions) and the resulting data version, so a rebuild with nothing
changed reuses the stored table instead of recomputing it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import polars as pl
import pydantic

from saber_store.duckdb_files import duckdb_connection

MANIFEST = "_saber_manifest"
LINEAGE_COLUMNS = ("_run_id", "_asset_key", "_config_hash", "_code_version", "_created_at")


@dataclass(frozen=True)
class Lineage:
    """Who wrote a table: recorded on every row."""

    run_id: str
    asset_key: str
    config_hash: str
    code_version: str


def stable_hash(value: object) -> str:
    """sha256 (first 16 hex) of a JSON rendering with sorted keys: stable across runs."""
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def frame_hash(frame: pl.DataFrame) -> str:
    """Content hash of a frame (row order included, lineage columns excluded).

    Uses polars row hashes: stable for one polars version, which is all a data version needs.
    """
    data = frame.drop([c for c in LINEAGE_COLUMNS if c in frame.columns])
    hashes = data.hash_rows(seed=0).to_numpy().tobytes()
    schema = str([(c, str(t)) for c, t in data.schema.items()]).encode()
    return hashlib.sha256(schema + hashes).hexdigest()[:16]


class DuckDBStore(pydantic.BaseModel):
    """One DuckDB file under the SABER home holding every table of a build (plain data: the
    assets' resource is :class:`saber_assets.resources.StoreResource`, the same class with
    Dagster's resource base)."""

    model_config = pydantic.ConfigDict(frozen=True)

    database: str

    lock_timeout_s: float = 300.0

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short-lived connection, closed afterwards; waits up to ``lock_timeout_s`` while
        another process holds the file
        (:func:`saber_store.duckdb_files.duckdb_connection`),
        so operations of concurrent processes take turns."""
        with duckdb_connection(self.database, read_only, self.lock_timeout_s) as con:
            yield con

    def write_table(self, name: str, frame: pl.DataFrame, lineage: Lineage) -> str:
        """Replace table ``name`` with ``frame`` plus lineage columns; returns its data version."""
        version = frame_hash(frame)
        stamped = frame.with_columns(
            pl.lit(lineage.run_id).alias("_run_id"),
            pl.lit(lineage.asset_key).alias("_asset_key"),
            pl.lit(lineage.config_hash).alias("_config_hash"),
            pl.lit(lineage.code_version).alias("_code_version"),
            pl.lit(datetime.now(UTC)).alias("_created_at"),
        )
        with self.connect() as con:
            con.begin()
            con.register("_incoming", stamped.to_arrow())
            con.execute(f'CREATE OR REPLACE TABLE "{name}" AS SELECT * FROM _incoming')
            con.unregister("_incoming")
            con.commit()
        return version

    def read_table(self, name: str, lineage: bool = False) -> pl.DataFrame:
        """Read a whole table (without lineage columns unless asked)."""
        with self.connect(read_only=True) as con:
            frame = con.sql(f'SELECT * FROM "{name}"').pl()
        if not lineage:
            frame = frame.drop([c for c in LINEAGE_COLUMNS if c in frame.columns])
        return frame

    def query(self, sql: str, params: list | None = None) -> pl.DataFrame:
        """Run a read-only SQL query (``?`` placeholders bound to ``params``)."""
        with self.connect(read_only=True) as con:
            return con.sql(sql, params=params or None).pl()

    def has_table(self, name: str) -> bool:
        """Whether table ``name`` exists."""
        if not Path(self.database).exists():
            return False
        with self.connect(read_only=True) as con:
            found = con.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]
            ).fetchone()
        return bool(found and found[0])

    def manifest_entry(self, asset_key: str) -> dict | None:
        """The last recorded fingerprint/data version of an asset, if any."""
        if not self.has_table(MANIFEST):
            return None
        with self.connect(read_only=True) as con:
            row = con.execute(
                f"SELECT fingerprint, data_version, metadata FROM {MANIFEST} WHERE asset_key = ?",
                [asset_key],
            ).fetchone()
        if row is None:
            return None
        return {"fingerprint": row[0], "data_version": row[1], "metadata": json.loads(row[2])}

    def manifest_entries(self) -> dict[str, dict]:
        """Every recorded asset's fingerprint, data version and metadata, by asset key."""
        if not self.has_table(MANIFEST):
            return {}
        with self.connect(read_only=True) as con:
            rows = con.execute(
                f"SELECT asset_key, fingerprint, data_version, metadata FROM {MANIFEST}"
            ).fetchall()
        return {
            key: {"fingerprint": f, "data_version": v, "metadata": json.loads(m)}
            for key, f, v, m in rows
        }

    def figures_of(self, asset_key: str) -> dict:
        """The figures an asset recorded (its metadata), for a stage that reads them."""
        entry = self.manifest_entry(asset_key)
        if entry is None:
            raise RuntimeError(f"asset {asset_key!r} has not been materialized")
        return entry["metadata"]["figures"]

    def versions_of(self, assets: list[str]) -> dict[str, dict[str, str]]:
        """Each asset's recorded fingerprint and data version (for a stage that reads them)."""
        out = {}
        for asset in assets:
            entry = self.manifest_entry(asset)
            if entry is None:
                raise RuntimeError(f"asset {asset!r} has not been materialized")
            out[asset] = {
                "fingerprint": entry["fingerprint"],
                "data_version": entry["data_version"],
            }
        return out

    def record_manifest(
        self, asset_key: str, fingerprint: str, data_version: str, run_id: str, metadata: dict
    ) -> None:
        """Record (replace) an asset's fingerprint, data version and summary metadata."""
        with self.connect() as con:
            con.execute(
                f"CREATE TABLE IF NOT EXISTS {MANIFEST} (asset_key VARCHAR PRIMARY KEY, "
                "fingerprint VARCHAR, data_version VARCHAR, run_id VARCHAR, metadata VARCHAR, "
                "updated_at TIMESTAMPTZ)"
            )
            con.execute(
                f"INSERT OR REPLACE INTO {MANIFEST} VALUES (?, ?, ?, ?, ?, ?)",
                [
                    asset_key,
                    fingerprint,
                    data_version,
                    run_id,
                    json.dumps(metadata, default=str),
                    datetime.now(UTC),
                ],
            )
