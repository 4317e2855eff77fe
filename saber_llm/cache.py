"""The LLM call cache: every call stored in DuckDB by its key, so no call is paid for twice.

Table ``llm_calls`` (one row per call key): backend, model, prompt id and hash, sampling params,
input hash, the answer (text, per-choice log-probs, response id, token usage), the run that paid
for it and when. Results are committed in small transactions as they arrive, so a killed run
keeps every answer it received.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import polars as pl

from saber_compute.llm.interface import LLMRequest, LLMResult, call_key
from saber_llm.base import LLMBackend
from saber_store.database import DuckDBStore

TABLE = "llm_calls"
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    call_key VARCHAR PRIMARY KEY, backend VARCHAR, model VARCHAR, identity VARCHAR,
    prompt_id VARCHAR, prompt_hash VARCHAR, sampling VARCHAR, input_hash VARCHAR,
    text VARCHAR, choice_logprobs VARCHAR, response_id VARCHAR, prompt_tokens BIGINT,
    completion_tokens BIGINT, run_id VARCHAR, created_at TIMESTAMPTZ, extra VARCHAR
)"""
ROW = {  # the columns a call is stored with, in order
    **dict.fromkeys(
        ("call_key", "backend", "model", "identity", "prompt_id", "prompt_hash", "sampling",
         "input_hash", "text", "choice_logprobs", "response_id"),
        pl.String,
    ),
    "prompt_tokens": pl.Int64, "completion_tokens": pl.Int64, "run_id": pl.String,
    "created_at": pl.Datetime("us", "UTC"), "extra": pl.String,
}  # fmt: skip
COLUMNS = ", ".join(ROW)


@dataclass
class CallStats:
    """What one batch cost: cache hits, backend calls and errors (not cached); over the calls
    whose engine reports it (vLLM), prompt tokens and those found in its prefix cache."""

    hits: int = 0
    calls: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0

    def add(self, other: CallStats) -> None:
        """Add ``other``'s figures to these."""
        for name in ("hits", "calls", "errors", "prompt_tokens", "cached_tokens"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def prefix_cache(self) -> dict[str, float | int]:
        """``llm_prefix_cache_hit_rate`` = cached / prompt tokens of the paid calls whose engine
        reports its prefix cache (with both counts); ``{}`` when none does."""
        if not self.prompt_tokens:
            return {}
        return {
            "llm_prompt_tokens": self.prompt_tokens,
            "llm_cached_prompt_tokens": self.cached_tokens,
            "llm_prefix_cache_hit_rate": round(self.cached_tokens / self.prompt_tokens, 4),
        }


Dispatch = Callable[[list[LLMRequest]], list[LLMResult]]


@dataclass
class CachedLLM:
    """A backend behind the DuckDB call cache, for one run.

    Cache misses go to ``dispatch`` when given (e.g. SLURM jobs running the backend on GPU
    nodes), else to ``backend.generate`` in-process; either way they are stored as they arrive.
    """

    backend: LLMBackend
    store: DuckDBStore
    run_id: str
    chunk_size: int = 64
    dispatch: Dispatch | None = None

    def generate(
        self,
        requests: Sequence[LLMRequest],
        progress: Callable[[int, int], None] | None = None,
    ) -> tuple[list[LLMResult], list[str], CallStats]:
        """Answers (cached or fresh), their call keys and the batch's cost.

        A ``dispatch`` with a ``stream`` method (the SLURM allocation) gets every miss at once
        and hands back results shard by shard, each stored as it arrives; otherwise misses go
        out in chunks of ``dispatch.chunk_size`` (or ``chunk_size``)."""
        identity = self.backend.identity()
        keys = [call_key(identity, r) for r in requests]
        cached = self.lookup(keys)
        stats = CallStats(hits=sum(k in cached for k in keys))
        missing = list(dict.fromkeys(k for k in keys if k not in cached))
        by_key = {k: r for k, r in zip(keys, requests, strict=True)}
        stream = getattr(self.dispatch, "stream", None)
        if stream is not None and missing:
            done = 0
            for indices, results in stream([by_key[k] for k in missing]):
                self._take(identity, [missing[i] for i in indices], results, by_key, cached, stats)
                done += len(indices)
                if progress:
                    progress(done, len(missing))
            return [cached[k] for k in keys], keys, stats
        size = getattr(self.dispatch, "chunk_size", None) or self.chunk_size
        for start in range(0, len(missing), size):
            chunk = missing[start : start + size]
            results = (self.dispatch or self.backend.generate)([by_key[k] for k in chunk])
            self._take(identity, chunk, results, by_key, cached, stats)
            if progress:
                progress(min(start + size, len(missing)), len(missing))
        return [cached[k] for k in keys], keys, stats

    def _take(
        self,
        identity: dict,
        chunk: list[str],
        results: list[LLMResult],
        by_key: dict[str, LLMRequest],
        cached: dict[str, LLMResult],
        stats: CallStats,
    ) -> None:
        """Store a chunk's good answers at once; count calls and errors (errors not cached)."""
        stats.calls += len(chunk)
        good = [(k, r) for k, r in zip(chunk, results, strict=True) if r.error is None]
        stats.errors += len(chunk) - len(good)
        reported = [r for _, r in good if "cached_tokens" in r.extra and r.prompt_tokens]
        stats.prompt_tokens += sum(r.prompt_tokens or 0 for r in reported)
        stats.cached_tokens += sum(int(r.extra["cached_tokens"]) for r in reported)
        self._store(identity, [(k, by_key[k], r) for k, r in good])
        cached.update(good)
        cached.update((k, r) for k, r in zip(chunk, results, strict=True) if r.error)

    def lookup(self, keys: Sequence[str]) -> dict[str, LLMResult]:
        """Stored answers for the given keys."""
        if not keys or not self.store.has_table(TABLE):
            return {}
        with self.store.connect(read_only=True) as con:
            con.register("_keys", pl.DataFrame({"call_key": list(set(keys))}).to_arrow())
            rows = con.sql(
                f"SELECT call_key, text, response_id, choice_logprobs, prompt_tokens, "
                f"completion_tokens FROM {TABLE} JOIN _keys USING (call_key)"
            ).fetchall()
        return {
            key: LLMResult(
                text=text,
                response_id=response_id,
                choice_logprobs=json.loads(logprobs) if logprobs else None,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
            )
            for key, text, response_id, logprobs, prompt_tokens, completion_tokens in rows
        }

    def _store(self, identity: dict, rows: list[tuple[str, LLMRequest, LLMResult]]) -> None:
        if not rows:
            return
        now = datetime.now(UTC)
        values = [
            [key, identity.get("backend", ""), identity.get("model", ""),
             json.dumps(identity, sort_keys=True), req.prompt_id, req.prompt_hash,
             json.dumps(req.sampling(), sort_keys=True), req.input_hash, res.text,
             json.dumps(res.choice_logprobs) if res.choice_logprobs is not None else None,
             res.response_id, res.prompt_tokens, res.completion_tokens, self.run_id, now,
             json.dumps(res.extra, sort_keys=True, default=str) if res.extra else None]
            for key, req, res in rows
        ]  # fmt: skip
        incoming = pl.DataFrame(values, schema=ROW, orient="row").to_arrow()
        with self.store.connect() as con:
            con.execute(SCHEMA)
            con.execute(f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS extra VARCHAR")
            con.begin()
            con.register("_incoming", incoming)
            con.execute(
                f"INSERT OR IGNORE INTO {TABLE} ({COLUMNS}) SELECT {COLUMNS} FROM _incoming"
            )
            con.unregister("_incoming")
            con.commit()
