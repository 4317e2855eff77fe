"""The store's manifest reads (one connection for any number of assets) and the LLM call cache's
rows (stored in one insert per chunk), read back field by field."""

from collections.abc import Sequence

import duckdb
import pytest

from saber_compute.llm.interface import ChatMessage, LLMRequest, LLMResult
from saber_llm.base import LLMBackend
from saber_llm.cache import TABLE, CachedLLM
from saber_store.database import MANIFEST, DuckDBStore


def test_manifest_reads_answer_for_the_assets_asked_and_name_a_missing_one(tmp_path):
    store = DuckDBStore(database=str(tmp_path / "saber.duckdb"))
    assert store.manifest_entries() == {} and store.manifest_entry("a") is None
    assert store.table_names() == set() and not store.has_table(MANIFEST)
    store.record_manifest("a", "fa", "va", "run", {"figures": {"n": 1}})
    store.record_manifest("b", "fb", "vb", "run", {})
    store.record_manifest("b", "fb2", "vb2", "run", {})  # replaced, not added
    assert store.table_names() == {MANIFEST} and store.has_table(MANIFEST)
    assert set(store.manifest_entries()) == {"a", "b"}
    assert store.manifest_entries(["b", "never"]) == {
        "b": {"fingerprint": "fb2", "data_version": "vb2", "metadata": {}}
    }
    assert store.manifest_entries([]) == {} and store.manifest_entry("never") is None
    assert store.versions_of(["b", "a"]) == {
        "b": {"fingerprint": "fb2", "data_version": "vb2"},
        "a": {"fingerprint": "fa", "data_version": "va"},
    }
    with pytest.raises(RuntimeError, match="'never' has not been materialized"):
        store.versions_of(["a", "never"])
    assert store.figures_of("a") == {"n": 1}


class Numbered(LLMBackend):
    """Answers request i of each batch with its index; every other one with an error."""

    def identity(self) -> dict[str, str]:
        return {"backend": "numbered", "model": "m"}

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResult]:
        return [
            LLMResult(text=f"answer {i}", response_id=f"r{i}", prompt_tokens=10 + i,
                      completion_tokens=i or None, choice_logprobs={"1": -0.5} if i else None,
                      extra={"cached_tokens": i} if i else {})
            if i % 3 != 2 else LLMResult(text="", error="boom")
            for i, _ in enumerate(requests)
        ]  # fmt: skip


def _stored(store: DuckDBStore) -> set[tuple]:
    with duckdb.connect(str(store.database), read_only=True) as con:
        return set(
            con.execute(
                f"SELECT call_key, backend, prompt_id, input_hash, run_id, extra FROM {TABLE}"
            ).fetchall()
        )


def test_cached_calls_read_back_as_answered_and_errors_are_not_stored(tmp_path):
    store = DuckDBStore(database=str(tmp_path / "saber.duckdb"))
    requests = [
        LLMRequest((ChatMessage("user", f"q{i}"),), "judge@v1", "ph", f"in{i}") for i in range(6)
    ]
    first, keys, stats = CachedLLM(Numbered(), store, "run-1").generate(requests)
    assert (stats.calls, stats.errors, stats.hits) == (6, 2, 0)

    def row(i: int, run: str, extra: str | None) -> tuple:
        return keys[i], "numbered", "judge@v1", f"in{i}", run, extra

    good = [0, 1, 3, 4]
    paid = {row(i, "run-1", f'{{"cached_tokens": {i}}}' if i else None) for i in good}
    assert _stored(store) == paid  # the two errors (2 and 5) are not stored
    again, _, stats = CachedLLM(Numbered(), store, "run-2").generate(requests)
    assert (stats.hits, stats.calls, stats.errors) == (4, 2, 0)  # only the errors asked again
    assert _stored(store) == paid | {row(2, "run-2", None), row(5, "run-2", '{"cached_tokens": 1}')}

    def answer(r: LLMResult) -> tuple:
        return r.text, r.response_id, r.choice_logprobs, r.prompt_tokens, r.completion_tokens

    assert [answer(again[i]) for i in good] == [answer(first[i]) for i in good]
