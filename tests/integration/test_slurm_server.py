"""The allocation mode without a cluster: the LLM server loop over a local allocation folder,
its batch script, the streaming call cache, cost tables, and the judge's one batch per round."""

import json
import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from test_slurm_units import EchoBackend, _requests

from saber_compute.llm.interface import ChatMessage, LLMRequest, LLMResult
from saber_compute.llm_server import LLMServer, parse_slurm_duration
from saber_compute.llm_shard import (
    DELAY_ENV,
    FAIL_ENV,
    RESULTS,
    STATS,
    payload_version,
    requests_to_table,
    table_to_results,
)
from saber_llm.base import backend_spec
from saber_llm.cache import TABLE, CachedLLM
from saber_llm.judges import LLMJudge
from saber_slurm import (
    SlurmDispatch,
    model_key,
    sbatch_script,
    stage_costs,
    summarize_jobs,
)
from saber_slurm.dispatcher import COST_SCHEMA, COST_TABLE, Attempt
from saber_store.database import DuckDBStore

COUNTS: dict[str, list[int]] = {"loads": [], "calls": []}


class CountingEcho(EchoBackend):
    """EchoBackend that records model loads and generate calls in ``COUNTS`` (the server builds
    its own instance from the spec)."""

    def load(self) -> None:
        COUNTS["loads"].append(1)

    def generate(self, requests):
        COUNTS["calls"].append(len(requests))
        return super().generate(requests)


def _allocation(root: Path, shards: dict[str, int], **settings) -> tuple[Path, Path]:
    """An allocation folder with ``shards`` ({key: n requests}) queued in that order."""
    alloc, shard_root = root / "alloc", root / "shards"
    (alloc / "inbox").mkdir(parents=True)
    spec, config = backend_spec(CountingEcho(tag="srv"))
    server = {"backend_spec": spec, "backend_config": config, "idle_timeout": 0.3}
    server.update({"inbox_poll_seconds": 0.05, "payload_version": payload_version(), **settings})
    (alloc / "server.json").write_text(json.dumps(server))
    for i, (key, n) in enumerate(shards.items()):
        (shard_root / key).mkdir(parents=True)
        pq.write_table(
            requests_to_table((_requests() * 3)[:n]), shard_root / key / "requests.parquet"
        )
        (alloc / "inbox" / f"{i:04d}-000001-{key}").touch()
    return alloc, shard_root


def _status(alloc: Path, server: LLMServer) -> dict:
    return json.loads((alloc / "jobs" / f"{server.job}.json").read_text())


@pytest.fixture(autouse=True)
def _reset_counts(monkeypatch):
    COUNTS["loads"], COUNTS["calls"] = [], []
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv(FAIL_ENV, raising=False)
    monkeypatch.delenv(DELAY_ENV, raising=False)


def test_server_loads_once_and_answers_the_inbox_in_order(tmp_path):
    alloc, shards = _allocation(tmp_path, {"k1": 2, "k2": 3, "k3": 1})
    lines: list[str] = []
    server = LLMServer(alloc, shards, lines.append)
    assert server.serve() == "idle"
    assert len(COUNTS["loads"]) == 1
    status = _status(alloc, server)
    assert status["answered"] == ["k1", "k2", "k3"]
    assert (status["model_loads"], status["shards"], status["requests"]) == (1, 3, 6)
    assert status["state"] == "exited" and status["exit_reason"] == "idle"
    assert status["ready_at"] >= status["started_at"]
    for key, n in (("k1", 2), ("k2", 3), ("k3", 1)):
        results = table_to_results(pq.read_table(shards / key / RESULTS))
        expected = EchoBackend().generate((_requests() * 3)[:n])
        assert [r.text for r in results] == [r.text for r in expected]
        assert json.loads((shards / key / STATS).read_text())["n_requests"] == n
    assert not list((alloc / "inbox").iterdir()) and not list((alloc / "active").iterdir())
    assert sum("model load 1 of job" in line for line in lines) == 1


def test_successor_requeues_the_abandoned_shard_and_skips_answered_ones(tmp_path):
    alloc, shards = _allocation(tmp_path, {"a1": 2, "a2": 2})
    (alloc / "active").mkdir()
    os.replace(alloc / "inbox" / "0000-000001-a1", alloc / "active" / "0000-000001-a1")
    (shards / "a2" / STATS).write_text(json.dumps({"n_requests": 2}))  # answered before
    server = LLMServer(alloc, shards, lambda _: None)
    assert server.serve() == "idle"
    assert _status(alloc, server)["answered"] == ["a1"]
    assert not (shards / "a2" / RESULTS).exists()  # not paid twice


def test_shard_error_is_written_and_the_server_goes_on(tmp_path, monkeypatch):
    alloc, shards = _allocation(tmp_path, {"e1": 1, "e2": 1})
    monkeypatch.setenv(FAIL_ENV, "once")  # each shard's first attempt fails
    server = LLMServer(alloc, shards, lambda _: None)
    assert server.serve() == "idle"
    for key in ("e1", "e2"):
        error = json.loads((shards / key / "error.json").read_text())
        assert "injected failure" in error["error"] and "Traceback" in error["traceback"]
        assert not (shards / key / RESULTS).exists()
    status = _status(alloc, server)
    assert status["answered"] == [] and status["shard_errors"] == 2
    assert len(COUNTS["loads"]) == 1  # a failing shard does not cost a model load
    (shards / "e1" / "error.json").unlink()  # what the client does before putting it back
    (alloc / "inbox" / "0005-000001-e1").touch()
    again = LLMServer(alloc, shards, lambda _: None)
    assert again.serve() == "idle"
    assert _status(alloc, again)["answered"] == ["e1"]


def test_shutdown_file_and_drain_end_the_server(tmp_path):
    alloc, shards = _allocation(tmp_path, {"s1": 1})
    (alloc / "shutdown").touch()
    server = LLMServer(alloc, shards, lambda _: None)
    assert server.serve() == "shutdown"
    assert _status(alloc, server)["shards"] == 0
    (alloc / "shutdown").unlink()
    drained = LLMServer(alloc, shards, lambda _: None)
    drained.drain_requested = True  # SLURM's pre-walltime USR1
    assert drained.serve() == "drained"
    assert list((alloc / "inbox").iterdir())  # left for a successor


def test_deadline_stops_taking_shards_but_finishes_the_current_one(tmp_path, monkeypatch):
    """Walltime relay inside the job: with 100 s left and a 30 s lead, the server takes shards
    until t = 70 s (a fake clock: each answered shard costs 40 s), finishes the one at hand and
    exits drained, leaving the rest in the inbox."""
    alloc, shards = _allocation(tmp_path, {"d1": 1, "d2": 1, "d3": 1}, signal_lead_seconds=30)
    now = [0.0]
    monkeypatch.setattr("saber_compute.llm_server.time_left_seconds", lambda job: 100.0)
    server = LLMServer(alloc, shards, lambda _: None, clock=lambda: now[0])
    answer = server.answer

    def slow_answer(entry, backend):
        answer(entry, backend)
        now[0] += 40.0

    server.answer = slow_answer
    assert server.serve() == "drained"
    assert _status(alloc, server)["answered"] == ["d1", "d2"]  # d2 started at 40 < 70
    assert [p.name.rsplit("-", 1)[-1] for p in (alloc / "inbox").iterdir()] == ["d3"]


def test_server_refuses_other_payload_code(tmp_path):
    alloc, shards = _allocation(tmp_path, {"v1": 1}, payload_version="0000000000000000")
    with pytest.raises(RuntimeError, match="runs different code"):
        LLMServer(alloc, shards, lambda _: None).serve()
    assert COUNTS["loads"] == []


def test_server_answers_shards_queued_while_it_runs(tmp_path, monkeypatch):
    monkeypatch.setenv(DELAY_ENV, "0.2")
    alloc, shards = _allocation(tmp_path, {"q1": 1}, idle_timeout=2.0)
    server = LLMServer(alloc, shards, lambda _: None)
    thread = threading.Thread(target=server.serve)
    thread.start()
    time.sleep(0.5)
    (shards / "q2").mkdir()
    pq.write_table(requests_to_table(_requests()[:2]), shards / "q2" / "requests.parquet")
    (alloc / "inbox" / "9999-000001-q2").touch()
    thread.join(timeout=30)
    assert not thread.is_alive()
    status = _status(alloc, server)
    assert status["answered"] == ["q1", "q2"] and status["model_loads"] == 1
    assert json.loads((shards / "q1" / STATS).read_text())["generate_s"] >= 0.2


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1:58", 118), ("59:59", 3599), ("1:00:00", 3600), ("2-03:00:05", 183605), ("2-03", 183600)],
)
def test_parse_slurm_duration(text, seconds):
    assert parse_slurm_duration(text) == seconds


@pytest.mark.parametrize("text", ["UNLIMITED", "NOT_SET", "", "INVALID", "1:2:3:4"])
def test_parse_slurm_duration_unknown(text):
    assert parse_slurm_duration(text) is None


def test_sbatch_script_carries_the_allocation_shape():
    settings = SlurmDispatch(
        partition="gpu",
        account="proj",
        qos="normal",
        time_limit="08:00:00",
        signal_lead_seconds=600,
        cpus=16,
        mem="128G",
        gpus_per_node=2,
        gpu_type="a100",
        sbatch_directives=["--constraint=a100_80gb"],
        env_path="/envs/saber",
        remote_base="/scratch/saber",
        payload_env={"HF_HOME": "/hf cache", "HF_HUB_OFFLINE": "1"},
    )
    script = sbatch_script(settings, "/scratch/saber/allocations/r1/k1", "k1abcdef0123")
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    for directive in (
        "--job-name=saber-llm-k1abcdef",
        "--chdir=/scratch/saber/allocations/r1/k1",
        "--output=/scratch/saber/allocations/r1/k1/jobs/slurm-%j.out",
        "--time=08:00:00",
        "--signal=B:USR1@600",
        "--partition=gpu",
        "--account=proj",
        "--qos=normal",
        "--cpus-per-task=16",
        "--mem=128G",
        "--gres=gpu:a100:2",
        "--constraint=a100_80gb",
    ):
        assert f"#SBATCH {directive}" in lines
    assert "export HF_HOME='/hf cache'" in lines
    assert lines[-1] == (
        "exec /envs/saber/env/bin/python -u -m saber_compute.llm_server "
        "--alloc /scratch/saber/allocations/r1/k1 --shards /scratch/saber/shards"
    )
    untyped = sbatch_script(SlurmDispatch(gpus_per_node=1, mem=""), "/a", "k")
    assert "#SBATCH --gres=gpu:1" in untyped and "--mem" not in untyped
    with pytest.raises(ValueError, match="not an environment variable"):
        sbatch_script(SlurmDispatch(payload_env={"BAD NAME": "x"}), "/a", "k")


def test_model_key_separates_models_and_configs():
    embedded = model_key("m:Embedded", {"batch_size": 8})
    assert embedded == model_key("m:Embedded", {"batch_size": 8})
    assert embedded != model_key("m:Embedded", {"batch_size": 4})
    assert embedded != model_key("m:VLLM", {"batch_size": 8})


class ShardStream:
    """A streaming dispatch: answers shards of 2 with EchoBackend, fails after ``fail_after``."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.fail_after = fail_after
        self.seen: list[int] = []

    def stream(self, requests):
        for n, start in enumerate(range(0, len(requests), 2)):
            if self.fail_after is not None and n >= self.fail_after:
                raise RuntimeError("allocation lost")
            self.seen.append(len(requests))
            idx = list(range(start, min(start + 2, len(requests))))
            yield idx, EchoBackend().generate([requests[i] for i in idx])


def _plain(n: int) -> list[LLMRequest]:
    return [
        LLMRequest((ChatMessage("user", f"question {i}"),), "p", "h", f"in{i}") for i in range(n)
    ]


def test_cached_llm_stores_each_streamed_shard_as_it_arrives(tmp_path):
    store = DuckDBStore(database=str(tmp_path / "db.duckdb"))
    requests = _plain(5)
    broken = CachedLLM(EchoBackend(), store, "run1", dispatch=ShardStream(fail_after=2))
    with pytest.raises(RuntimeError, match="allocation lost"):
        broken.generate(requests)
    assert store.query(f"SELECT count(*) AS n FROM {TABLE}")["n"][0] == 4  # two shards kept
    stream = ShardStream()
    results, _, stats = CachedLLM(EchoBackend(), store, "run2", dispatch=stream).generate(requests)
    assert (stats.hits, stats.calls) == (4, 1)
    assert stream.seen == [1]  # one call with the one miss, not one call per chunk
    assert [r.text for r in results] == [r.text for r in EchoBackend().generate(requests)]


class RecordingJudgeBackend(EchoBackend):
    """Answers ``\\boxed{1}`` with log-probs and records every generate call's size."""

    def generate(self, requests):
        COUNTS["calls"].append(len(requests))
        return [
            LLMResult(text="\\boxed{1}", choice_logprobs={"1": -0.2, "2": -1.8}) for _ in requests
        ]


def test_llm_judge_sends_both_orders_in_one_batch(tmp_path):
    store = DuckDBStore(database=str(tmp_path / "db.duckdb"))
    judge = LLMJudge(backend=RecordingJudgeBackend(), both_orders=True)
    out = judge.judge(["q1", "q1", "q2"], ["a", "b", "c"], ["b", "c", "a"], store, "r")
    assert COUNTS["calls"] == [6]  # 3 pairs x 2 orders, one call
    assert np.isnan(out.p_first).all()  # always "1": pure position bias, a tie, dropped
    assert all(r == "tie across orders" for r in out.drop_reason)
    assert all(raw.startswith("[a,b] \\boxed{1} | [b,a]") for raw in out.raw)
    COUNTS["calls"] = []
    one = LLMJudge(backend=RecordingJudgeBackend(), both_orders=False, seed=5)
    one.judge(["q1", "q2"], ["a", "c"], ["b", "a"], store, "r")
    assert COUNTS["calls"] == [2]  # the published method: one order per pair


def _cost_row(run: str, stage: str, **values) -> dict:
    row = {
        "run_id": run, "stage": stage, "mode": "allocation", "model_key": "k", "allocation": "a",
        "job_ids": "[]", "n_requests": 0, "n_answered": 0, "n_shards": 0, "n_reused_shards": 0,
        "generate_s": 0.0, "prompt_tokens": 0, "completion_tokens": 0, "requests_per_s": 0.0,
        "tokens_per_s": 0.0, "waiting_s": 0.0, "wall_s": 0.0, "relays": 0, "created_at": None,
    }  # fmt: skip
    return {**row, **values}


def test_stage_costs_add_up_calls_per_stage(tmp_path):
    store = DuckDBStore(database=str(tmp_path / "db.duckdb"))
    rows = [
        _cost_row("r1", "round_01", n_requests=30, n_answered=30, n_shards=4, generate_s=6.0,
                  prompt_tokens=900, completion_tokens=0, job_ids='["7"]', waiting_s=20.0),
        _cost_row("r1", "round_01", n_requests=2, n_answered=2, n_shards=1, generate_s=2.0,
                  prompt_tokens=100, completion_tokens=0, job_ids='["7", "8"]', relays=1),
        _cost_row("r1", "round_02", n_requests=30, n_answered=10, n_shards=4, n_reused_shards=3,
                  generate_s=5.0, prompt_tokens=250, completion_tokens=50, job_ids='["8"]'),
        _cost_row("r2", "round_01", n_requests=99, n_answered=99, generate_s=1.0),
    ]  # fmt: skip
    with store.connect() as con:
        con.execute(COST_SCHEMA)
        for row in rows:
            con.execute(
                f"INSERT INTO {COST_TABLE} ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                list(row.values()),
            )
    costs = stage_costs(store, ["r1"]).sort("stage")
    first, second = costs.iter_rows(named=True)
    assert (first["n_requests"], first["n_shards"], first["relays"]) == (32, 5, 1)
    assert first["requests_per_s"] == pytest.approx(32 / 8.0)
    assert first["tokens_per_s"] == pytest.approx(1000 / 8.0)
    assert json.loads(first["job_ids"]) == ["7", "8"] and first["waiting_s"] == 20.0
    assert second["requests_per_s"] == pytest.approx(10 / 5.0)  # reused shards are not answers
    assert second["n_reused_shards"] == 3


def test_summarize_jobs_counts_allocations_loads_and_gpu_hours():
    jobs = pl.DataFrame(
        {
            "run_id": ["r1", "r1", "r1", "r1"],
            "kind": ["llm-server", "llm-server", "llm-server", "per-shard"],
            "model_key": ["judge", "judge", "annotator", ""],
            "model_loads": [1, 1, 1, 1],
            "gpu_hours": [0.5, 0.25, 0.1, 0.05],
            "queue_wait_s": [100.0, 30.0, None, 5.0],
            "load_s": [60.0, 55.0, 20.0, None],
        }
    )
    totals = summarize_jobs(jobs)
    assert totals["allocations"] == 3 and totals["slurm_jobs"] == 4
    assert totals["model_loads"] == 4 and totals["gpu_hours"] == pytest.approx(0.9)
    assert totals["queue_wait_s"] == 135.0 and totals["load_s"] == 135.0
    assert totals["relays"] == 1  # the judge's allocation was relayed once


def test_cost_rows_count_each_dispatch_call_once(tmp_path):
    """A stage that dispatches twice (a judge's retry, the topics' second ask) gets one row per
    call, each with only its own shards, time and relays; the asset metadata adds them up (no
    cluster: the bookkeeping alone, with a key file that only has to exist)."""
    import dagster as dg

    from saber_slurm import ShardDispatch, ShardRecord

    key = tmp_path / "id_ed25519"
    key.write_text("not used: nothing connects\n")
    context = SimpleNamespace(run=SimpleNamespace(run_id="r1"), asset_key=dg.AssetKey("topics"))
    dispatch = ShardDispatch(SlurmDispatch(ssh_key_path=str(key)), context, EchoBackend())

    def answered(key: str, n: int, seconds: float, job: str) -> ShardRecord:
        stats = {"n_requests": n, "generate_s": seconds, "prompt_tokens": 10 * n,
                 "completion_tokens": n}  # fmt: skip
        record = ShardRecord(key=key, n_requests=n, stats=stats)
        record.attempts.append(Attempt(job_id=job, state="COMPLETED"))
        return record

    dispatch.begin_call()
    dispatch.records += [answered("a", 8, 2.0, "7"), answered("b", 4, 1.0, "7")]
    dispatch.waiting_s += 30.0
    first = dispatch.cost_row(12, 40.0)
    dispatch.begin_call()
    reused = ShardRecord(key="c", n_requests=8, reused=True, stats={"n_requests": 8})
    dispatch.records += [answered("d", 2, 0.5, "9"), reused]
    dispatch.relays += 1
    second = dispatch.cost_row(10, 5.0)
    assert (first["n_requests"], first["n_answered"], first["n_shards"]) == (12, 12, 2)
    assert first["generate_s"] == 3.0 and first["requests_per_s"] == 4.0
    assert (first["waiting_s"], first["relays"], json.loads(first["job_ids"])) == (30.0, 0, ["7"])
    assert (second["n_requests"], second["n_answered"], second["n_shards"]) == (10, 2, 2)
    assert second["n_reused_shards"] == 1 and second["generate_s"] == 0.5
    assert (second["waiting_s"], second["relays"], json.loads(second["job_ids"])) == (0.0, 1, ["9"])
    assert dispatch.metadata()["slurm_n_shards"] == 4  # the stage's metadata: both calls
