"""What a build reports of an engine's prefix cache: per-call cached prompt tokens (vLLM's
``num_cached_tokens``, the server's ``usage.prompt_tokens_details.cached_tokens``) summed over
the calls a stage paid, and the build's per-prompt line."""

from collections.abc import Sequence

from saber_cli.build import llm_summary
from saber_compute.llm.interface import ChatMessage, LLMRequest, LLMResult
from saber_llm.base import LLMBackend
from saber_llm.cache import CachedLLM, CallStats
from saber_store.database import DuckDBStore


class PrefixEngine(LLMBackend):
    """Reports 100 prompt tokens per call, 40 of them cached when its query was seen before
    (a prefix cache keyed on the query), none without ``reports``."""

    reports: bool = True

    def identity(self) -> dict[str, str]:
        return {"backend": "prefix", "model": "m"}

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResult]:
        seen: set[str] = getattr(self, "_seen", set())
        object.__setattr__(self, "_seen", seen)
        out = []
        for r in requests:
            query = r.messages[-1].content.split("|")[0]
            extra = {"cached_tokens": 40 if query in seen else 0} if self.reports else {}
            seen.add(query)
            out.append(LLMResult(text="\\boxed{1}", prompt_tokens=100, extra=extra))
        return out


def _req(query: str, pair: str, prompt_id: str = "judge") -> LLMRequest:
    return LLMRequest(
        messages=(ChatMessage("user", f"{query}|{pair}"),),
        prompt_id=prompt_id,
        prompt_hash="h",
        input_hash=f"{query}-{pair}",
    )


def test_paid_calls_carry_the_prefix_cache_rate_and_cache_hits_do_not(tmp_path):
    store = DuckDBStore(database=str(tmp_path / "db.duckdb"))
    cached = CachedLLM(PrefixEngine(), store, "run-1")
    requests = [_req("q1", "a"), _req("q1", "b"), _req("q1", "c"), _req("q2", "a")]
    _, _, stats = cached.generate(requests)
    # 4 paid calls × 100 tokens; q1's 2nd and 3rd calls found 40 tokens each
    assert (stats.calls, stats.prompt_tokens, stats.cached_tokens) == (4, 400, 80)
    assert stats.prefix_cache()["llm_prefix_cache_hit_rate"] == 0.2
    _, _, again = cached.generate(requests)
    assert (again.hits, again.calls, again.prefix_cache()) == (4, 0, {})
    total = CallStats()
    total.add(stats)
    total.add(again)
    assert (total.hits, total.calls, total.cached_tokens) == (4, 4, 80)


def test_engines_without_the_counter_report_no_rate(tmp_path):
    store = DuckDBStore(database=str(tmp_path / "db.duckdb"))
    _, _, stats = CachedLLM(PrefixEngine(reports=False), store, "run").generate([_req("q", "a")])
    assert stats.calls == 1 and stats.prefix_cache() == {}


def test_build_line_per_prompt_of_the_run_only(tmp_path):
    store = DuckDBStore(database=str(tmp_path / "db.duckdb"))
    engine = PrefixEngine()
    CachedLLM(engine, store, "old").generate([_req("q0", "x")])
    CachedLLM(engine, store, "run").generate(
        [_req("q1", "a"), _req("q1", "b"), _req("s", "d", prompt_id="summary")]
    )
    line = llm_summary(store, "run")
    assert line is not None
    assert "judge 2 (prefix-cache hit 20.0%)" in line  # 40 of 200 tokens; the old run left out
    assert "summary 1 (prefix-cache hit 0.0%)" in line
    assert llm_summary(store, "no-such-run") is None
    plain = DuckDBStore(database=str(tmp_path / "plain.duckdb"))
    CachedLLM(PrefixEngine(reports=False), plain, "run").generate([_req("q", "a")])
    assert llm_summary(plain, "run").endswith("judge 1")
