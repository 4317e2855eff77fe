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
        return name in self.table_names()

    def table_names(self) -> set[str]:
        """The names of the tables in the file (none if there is no file yet)."""
        if not Path(self.database).exists():
            return set()
        with self.connect(read_only=True) as con:
            return _table_names(con)

    def manifest_entry(self, asset_key: str) -> dict | None:
        """The last recorded fingerprint/data version of an asset, if any."""
        return self.manifest_entries([asset_key]).get(asset_key)

    def manifest_entries(self, asset_keys: list[str] | None = None) -> dict[str, dict]:
        """The recorded fingerprint, data version and metadata of every asset (or of those in
        ``asset_keys``), by asset key: one connection, whatever the count."""
        if not Path(self.database).exists():
            return {}
        sql = f"SELECT asset_key, fingerprint, data_version, metadata FROM {MANIFEST}"
        with self.connect(read_only=True) as con:
            if MANIFEST not in _table_names(con):
                return {}
            if asset_keys is None:
                rows = con.execute(sql).fetchall()
            else:
                rows = con.execute(f"{sql} WHERE list_contains(?, asset_key)", [asset_keys])
                rows = rows.fetchall()
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
        entries = self.manifest_entries(assets)
        missing = [a for a in assets if a not in entries]
        if missing:
            raise RuntimeError(f"asset {missing[0]!r} has not been materialized")
        return {a: {k: entries[a][k] for k in ("fingerprint", "data_version")} for a in assets}

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


def _table_names(con: duckdb.DuckDBPyConnection) -> set[str]:
    rows = con.execute("SELECT table_name FROM information_schema.tables").fetchall()
    return {row[0] for row in rows}
