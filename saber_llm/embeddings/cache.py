"""The embedding cache: one vector per (model, exact text sent), in DuckDB under SABER_HOME
(Dagster-free: used by the embedding judge and by ``saber_eval``).

Table ``embeddings``: ``model, text_sha256, dim, vector (float32 bytes), encode_s, created_at``,
primary key ``(model, text_sha256)`` where ``text_sha256`` hashes the text *after* the input
envelope. So re-running a retriever, or adding a setting that shares texts with one already
run, encodes nothing twice. ``encode_s`` is the wall-clock encoding time of the text's batch
divided by its size (its amortised cost), used to charge cache hits in latency (see
``saber_eval.runner``). ``encoded``/``hits`` count texts encoded/served in this process.
Several processes may use the file at once (Dagster's multiprocess executor): every access
waits for the others' locks (:func:`saber_store.duckdb_files.duckdb_connection`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import numpy as np
import polars as pl

from saber_store.duckdb_files import duckdb_connection

TABLE = "embeddings"
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    model VARCHAR, text_sha256 VARCHAR, dim INTEGER, vector BLOB, encode_s DOUBLE,
    created_at TIMESTAMPTZ, PRIMARY KEY (model, text_sha256)
)"""

Encoder = Callable[[list[str]], np.ndarray]


def text_key(text: str) -> str:
    """sha256 hex of the exact text sent to the model."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingCache:
    """Embeddings by (model, text hash): in memory, backed by a DuckDB file (``None`` = memory)."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        self._memory: dict[tuple[str, str], tuple[np.ndarray, float]] = {}
        self._pending: list[tuple[str, str, np.ndarray, float]] = []
        self.encoded = 0
        self.hits = 0

    def preload(self, model: str, texts: Sequence[str]) -> int:
        """Load the stored vectors of ``texts`` into memory; returns how many were found."""
        keys = {text_key(t) for t in texts} - {k for m, k in self._memory if m == model}
        if not keys or self.path is None or not self.path.exists():
            return 0
        with duckdb_connection(self.path, read_only=True) as con:
            exists = con.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [TABLE]
            ).fetchall()
            if not exists[0][0]:
                return 0
            con.register("_keys", pl.DataFrame({"text_sha256": sorted(keys)}).to_arrow())
            rows = con.execute(
                f"SELECT text_sha256, vector, encode_s FROM {TABLE} JOIN _keys USING "
                "(text_sha256) WHERE model = ?",
                [model],
            ).fetchall()
        for key, blob, cost in rows:
            self._memory[(model, key)] = (np.frombuffer(blob, dtype=np.float32), float(cost))
        return len(rows)

    def has(self, model: str, text: str) -> bool:
        """Whether the vector of ``text`` is in memory (after ``preload``)."""
        return (model, text_key(text)) in self._memory

    def embed(self, model: str, texts: Sequence[str], encode: Encoder) -> tuple[np.ndarray, float]:
        """(vectors (n, d), seconds charged for cache hits): misses are encoded in one batch.

        The charge is Σ ``encode_s`` over the distinct texts served from the cache, i.e. what
        encoding them cost when they were first embedded.
        """
        keys = [text_key(t) for t in texts]
        missing: dict[str, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if (model, key) not in self._memory and key not in missing:
                missing[key] = text
        hit_keys = set(keys) - set(missing)
        charged = sum(self._memory[(model, k)][1] for k in hit_keys)
        self.hits += len(hit_keys)
        if missing:
            start = time.perf_counter()
            vectors = np.asarray(encode(list(missing.values())), dtype=np.float32)
            cost = (time.perf_counter() - start) / len(missing)
            if vectors.shape[0] != len(missing):
                raise ValueError(f"encoder returned {vectors.shape[0]} vectors for {len(missing)}")
            for key, vector in zip(missing, vectors, strict=True):
                self._memory[(model, key)] = (vector, cost)
                self._pending.append((model, key, vector, cost))
            self.encoded += len(missing)
        if not keys:
            return np.zeros((0, 0), dtype=np.float32), 0.0
        return np.stack([self._memory[(model, k)][0] for k in keys]), charged

    def flush(self) -> int:
        """Write the vectors encoded since the last flush; returns how many rows were written."""
        rows, self._pending = self._pending, []
        if not rows or self.path is None:
            return 0
        now = datetime.now(UTC)
        values = [[m, k, len(v), v.astype(np.float32).tobytes(), c, now] for m, k, v, c in rows]
        with duckdb_connection(self.path) as con:
            con.execute(SCHEMA)
            con.begin()
            con.executemany(f"INSERT OR IGNORE INTO {TABLE} VALUES (?, ?, ?, ?, ?, ?)", values)
            con.commit()
        return len(rows)

    def stored_count(self, model: str | None = None) -> int:
        """Rows stored in the DuckDB file (for one model, or all)."""
        if self.path is None or not self.path.exists():
            return 0
        with duckdb_connection(self.path, read_only=True) as con:
            sql = f"SELECT count(*) FROM {TABLE}" + (" WHERE model = ?" if model else "")
            try:
                row = con.execute(sql, [model] if model else []).fetchone()
            except duckdb.CatalogException:
                return 0
        return int(row[0]) if row else 0
