"""SLURM path without a cluster: shard (de)serialization, the payload, profiles, sensors."""

import json
import os
import time
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from saber_assets.automation import (
    build_schedules,
    build_sensors,
    evaluate_inputs,
    input_change_sensor,
    watched_inputs,
)
from saber_compute.llm.interface import ChatMessage, LLMRequest, LLMResult, build_engine
from saber_compute.llm_shard import (
    FAIL_ENV,
    REQUESTS,
    RESULTS,
    STATS,
    requests_to_table,
    results_to_table,
    run_shard,
    table_to_requests,
    table_to_results,
)
from saber_config import load_build_config
from saber_llm.base import LLMBackend, backend_spec
from saber_slurm import (
    CLUSTER_PROFILES,
    SbatchLauncher,
    SlurmDispatch,
    expand_env,
    load_cluster_profile,
    plan_shards,
    slurm_dispatch_from_build,
)


class EchoBackend(LLMBackend):
    """Answers with the last message reversed; choices get fixed log-probs."""

    tag: str = "echo"

    def identity(self) -> dict[str, str]:
        return {"backend": "echo", "model": self.tag}

    def generate(self, requests):
        return [
            LLMResult(
                text=r.messages[-1].content[::-1],
                response_id=f"{self.tag}-{r.input_hash}",
                choice_logprobs={c: -1.0 - i for i, c in enumerate(r.choices)}
                if r.choices
                else None,
                prompt_tokens=len(r.messages[-1].content),
                completion_tokens=1,
            )
            for r in requests
        ]


def _requests() -> list[LLMRequest]:
    return [
        LLMRequest(
            messages=(
                ChatMessage("system", "Judge."),
                ChatMessage("user", "Query: ∫ x² dx — 1 or 2?"),
            ),
            prompt_id="judge@v1",
            prompt_hash="abc",
            input_hash="i0",
            max_tokens=1,
            temperature=0.0,
            top_p=1.0,
            seed=3,
            choices=("1", "2"),
            logprobs=True,
        ),
        LLMRequest(
            messages=(ChatMessage("user", "Summarize: a proof by induction."),),
            prompt_id="summary@v2",
            prompt_hash="def",
            input_hash="i1",
            max_tokens=96,
            temperature=0.7,
            top_p=0.9,
            seed=1,
        ),
        LLMRequest(
            messages=(ChatMessage("user", ""),),
            prompt_id="topics@v1",
            prompt_hash="ghi",
            input_hash="i2",
            choices=(),
        ),
    ]


def test_requests_round_trip_through_parquet(tmp_path):
    requests = _requests()
    pq.write_table(requests_to_table(requests), tmp_path / REQUESTS)
    assert table_to_requests(pq.read_table(tmp_path / REQUESTS)) == requests


def test_results_round_trip_through_parquet(tmp_path):
    results = [
        LLMResult(
            text="\\boxed{1}",
            response_id="r1",
            choice_logprobs={"1": -0.123456789012345, "2": -2.5e-12},
            prompt_tokens=17,
            completion_tokens=0,
            extra={"slurm_job_id": "12", "nested": {"a": [1, 2]}},
        ),
        LLMResult(text="", error="backend error: timeout"),
        LLMResult(text="plain answer", prompt_tokens=None, completion_tokens=5),
    ]
    pq.write_table(results_to_table(results), tmp_path / RESULTS)
    assert table_to_results(pq.read_table(tmp_path / RESULTS)) == results


def test_backend_spec_rebuilds_the_same_engine_without_dagster():
    from saber_llm.embedded import EmbeddedBackend
    from saber_llm.vllm_backend import VLLMBackend

    for backend in (
        EmbeddedBackend(batch_size=4),
        VLLMBackend(model="openai/gpt-oss-20b", tensor_parallel_size=2, reasoning_effort="high"),
    ):
        spec, config = backend_spec(backend)
        json.dumps(config)
        rebuilt = build_engine(spec, config)
        assert type(rebuilt) is type(backend.engine())  # the Dagster-free engine
        assert "dagster" not in type(rebuilt).__module__ and spec.startswith("saber_compute.")
        assert rebuilt.identity() == backend.identity()
    with pytest.raises(TypeError):
        build_engine("saber_slurm:SlurmDispatch", {})


def test_payload_answers_a_shard_with_stats_and_provenance(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-node-7")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    requests = _requests()[:2]
    pq.write_table(requests_to_table(requests), tmp_path / REQUESTS)
    spec, config = backend_spec(EchoBackend(tag="t1"))
    lines: list[str] = []
    stats = run_shard(tmp_path, spec, config, progress_every=1, log=lines.append)
    results = table_to_results(pq.read_table(tmp_path / RESULTS))
    assert [r.text for r in results] == [r.text for r in EchoBackend().generate(requests)]
    assert all(r.extra["slurm_job_id"] == "4242" for r in results)
    assert results[0].extra["slurm_node"] == "gpu-node-7"
    assert results[0].extra["cuda_visible_devices"] == "0,1"
    assert stats["n_requests"] == 2 and stats["identity"] == EchoBackend(tag="t1").identity()
    assert {"requests_per_s", "tokens_per_s", "warmup_s"} <= set(stats)
    assert json.loads((tmp_path / STATS).read_text())["slurm_job_id"] == "4242"
    assert any("2/2 answered" in line for line in lines)


def test_payload_failure_injection(tmp_path, monkeypatch):
    pq.write_table(requests_to_table(_requests()[:1]), tmp_path / REQUESTS)
    spec, config = backend_spec(EchoBackend())
    monkeypatch.setenv(FAIL_ENV, "once")
    with pytest.raises(RuntimeError, match="injected failure"):
        run_shard(tmp_path, spec, config, log=lambda _: None)
    assert not (tmp_path / RESULTS).exists()
    run_shard(tmp_path, spec, config, log=lambda _: None)
    assert (tmp_path / RESULTS).exists()
    monkeypatch.setenv(FAIL_ENV, "always")
    for _ in range(2):
        with pytest.raises(RuntimeError, match="always"):
            run_shard(tmp_path, spec, config, log=lambda _: None)


def test_plan_shards_sorts_by_prompt_and_cuts_by_size():
    def request(text: str) -> LLMRequest:
        return LLMRequest((ChatMessage("user", text),), "p", "h", text)

    requests = [request(t) for t in ["q2 b", "q1 a", "q2 a", "q1 b", "q3"]]
    assert plan_shards(requests, 2, sort=True) == [[1, 3], [2, 0], [4]]
    assert plan_shards(requests, 2) == [[0, 1], [2, 3], [4]]
    assert plan_shards(requests, 0, sort=True) == [[i] for i in [1, 3, 2, 0, 4]]
    assert plan_shards([], 3) == []


def test_sbatch_directives_and_gpu_options():
    plan = SbatchLauncher(
        sbatch_directives=["--constraint=a100", "--comment=saber"]
    ).prepare_execution(
        payload_path="/w/p.py",
        python_executable="/env/env/bin/python",
        working_dir="/w",
        pipes_context={"DAGSTER_PIPES_CONTEXT": "x"},
        activation_script="/env/activate.sh",
    )
    assert plan.payload[:3] == [
        "#!/bin/bash",
        "#SBATCH --constraint=a100",
        "#SBATCH --comment=saber",
    ]
    typed = SlurmDispatch(gpus_per_node=2, gpu_type="a100", mem="64G")
    assert typed.extra_slurm_opts() == {"gpus_per_node": "a100:2", "mem": "64G"}
    assert SlurmDispatch(gpus_per_node=1, mem="").extra_slurm_opts() == {"gpus_per_node": 1}
    assert SlurmDispatch(gpus_per_node=0).extra_slurm_opts() == {}


def test_cluster_profiles_load_and_build_overrides(monkeypatch):
    names = sorted(p.stem for p in CLUSTER_PROFILES.glob("*.yaml"))
    assert {"dev", "a100", "h100-constraint"} <= set(names)
    for name in names:
        SlurmDispatch(**load_cluster_profile(name))
    monkeypatch.setenv("SABER_SLURM_DIR", "/tmp/elsewhere")
    assert load_cluster_profile("dev")["remote_base"] == "/tmp/elsewhere/work"
    assert expand_env("${NOPE_NOT_SET:-d}/${SABER_SLURM_DIR}") == "d//tmp/elsewhere"
    settings = dict(slurm_profile="a100", slurm_shard_size=0, slurm_max_retries=0,
                    slurm_partition="", llm_backend="vllm", llm_tensor_parallel=2)  # fmt: skip
    dispatch = slurm_dispatch_from_build(load_build_config("tiny", **settings))
    assert dispatch.shard_size == 20000 and dispatch.max_retries == 0
    assert dispatch.partition == "gpu" and dispatch.gpus_per_node == 2
    with pytest.raises(ValueError, match="tensor_parallel"):
        slurm_dispatch_from_build(
            load_build_config("tiny", **{**settings, "llm_tensor_parallel": 4})
        )
    with pytest.raises(ValueError, match="unknown SLURM cluster profile"):
        slurm_dispatch_from_build(load_build_config("tiny", slurm_profile="nope"))


def test_slurm_mode_and_orphan_interval_from_profile_env_and_build(monkeypatch):
    """``slurm_mode`` (flat name, ``SABER_SLURM_MODE``) picks the mode over the cluster
    profile's (allocation by default); ``slurm_orphan_poll_seconds`` sets the sensor's interval."""
    assert SlurmDispatch().mode == "allocation"
    assert load_cluster_profile("dev")["mode"] == "allocation"
    assert slurm_dispatch_from_build(load_build_config("dev-slurm")).mode == "allocation"
    monkeypatch.setenv("SABER_SLURM_MODE", "per_shard")
    build = load_build_config("dev-slurm")
    assert build.slurm.mode == "per_shard"
    assert slurm_dispatch_from_build(build).mode == "per_shard"
    monkeypatch.setenv("SABER_SLURM_MODE", "per_job")
    with pytest.raises(ValueError, match="mode"):
        load_build_config("dev-slurm")
    monkeypatch.delenv("SABER_SLURM_MODE")
    build = load_build_config("dev-slurm", slurm_orphan_poll_seconds=900)
    sensors = {s.name: s for s in build_sensors(build, slurm_dispatch_from_build(build))}
    assert sensors["saber_slurm_orphan_sensor"].minimum_interval_seconds == 900
    default = load_build_config("dev-slurm")
    sensors = {s.name: s for s in build_sensors(default, slurm_dispatch_from_build(default))}
    assert sensors["saber_slurm_orphan_sensor"].minimum_interval_seconds == 120


def test_dev_profile_jobs_import_this_checkout():
    """The dev cluster's jobs run the code of the checkout that submits them (worktrees too):
    ``${SABER_PROJECT}`` is this project's root."""
    project = Path(__file__).resolve().parents[2]
    assert load_cluster_profile("dev")["payload_env"]["PYTHONPATH"] == str(project)
    assert expand_env("${SABER_PROJECT}/x") == f"{project}/x"


def _touch(path: Path, text: str, mtime: float) -> None:
    path.write_text(text)
    os.utime(path, (mtime, mtime))


def test_input_cursor_baseline_touch_and_change(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    now = time.time()
    _touch(corpus, '{"doc_id": "a"}\n', now - 100)
    changed, cursor, missing = evaluate_inputs([corpus], None)
    assert changed == [] and missing == []
    assert evaluate_inputs([corpus], cursor)[:2] == ([], cursor)
    _touch(corpus, '{"doc_id": "a"}\n', now - 50)  # touched, same bytes: no rebuild
    changed, touched, _ = evaluate_inputs([corpus], cursor)
    assert changed == [] and touched != cursor
    _touch(corpus, '{"doc_id": "b"}\n', now - 50)  # same size and mtime, new content
    assert evaluate_inputs([corpus], touched)[0] == []  # stat unchanged: hash not recomputed
    _touch(corpus, '{"doc_id": "b"}\n', now)
    changed, _, _ = evaluate_inputs([corpus], touched)
    assert changed == [str(corpus)]
    corpus.unlink()
    changed, kept, missing = evaluate_inputs([corpus], touched)
    assert changed == [] and missing == [str(corpus)] and kept == touched


def test_input_change_sensor_requests_a_build_on_change(tmp_path):
    corpus = tmp_path / "corpus.parquet"
    _touch(corpus, "v1", time.time() - 10)
    build = load_build_config("tiny", corpus=str(corpus), watch_inputs=True)
    sensor = input_change_sensor(build)
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    instance = dg.DagsterInstance.ephemeral()
    first = sensor.evaluate_tick(dg.build_sensor_context(instance=instance))
    assert not first.run_requests and first.cursor
    same = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, cursor=first.cursor))
    assert not same.run_requests
    _touch(corpus, "v2 longer", time.time())
    change = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, cursor=first.cursor))
    assert len(change.run_requests) == 1
    assert change.run_requests[0].tags["saber/trigger"] == "input-change"
    assert change.run_requests[0].job_name in (None, "refresh_benchmark")
    assert sensor.job_name == "refresh_benchmark"  # the rebuild refreshes the leaderboard
    builtin = input_change_sensor(load_build_config("tiny"))
    assert builtin.default_status == dg.DefaultSensorStatus.STOPPED


def test_the_input_sensor_watches_every_input_file_and_every_prompt(tmp_path):
    """A prompt is an input: editing the judge prompt is a change the sensor sees, as is the
    contamination corpus or a recipe-summaries file."""
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    for name in ("judge", "summary", "topics"):
        _touch(prompts / f"{name}.md", f"{name} v1", time.time() - 10)
    external = tmp_path / "train.jsonl"
    _touch(external, "rows", time.time() - 10)
    build = load_build_config(
        "tiny",
        prompts_dir=str(prompts),
        contamination_corpus=str(external),
        watch_inputs=True,
    )
    watched = {p.name for p in watched_inputs(build)}
    assert watched == {"judge.md", "summary.md", "topics.md", "train.jsonl"}
    assert {p.name for p in watched_inputs(load_build_config("tiny"))} >= {"judge.md"}
    sensor = input_change_sensor(build)
    instance = dg.DagsterInstance.ephemeral()
    first = sensor.evaluate_tick(dg.build_sensor_context(instance=instance))
    _touch(prompts / "judge.md", "judge v2, edited", time.time())
    change = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, cursor=first.cursor))
    assert len(change.run_requests) == 1
    assert "judge.md" in change.run_requests[0].tags["saber/changed"]


def test_schedule_and_sensors_load_with_the_definitions():
    from saber_assets.definitions import build_definitions

    build = load_build_config("tiny")
    assert build_schedules(build) == []
    weekly = load_build_config("cluster", rebuild_cron="0 3 * * 1")
    (schedule,) = build_schedules(weekly)
    assert schedule.cron_schedule == "0 3 * * 1" and schedule.job_name == "refresh_benchmark"
    sensors = build_sensors(build, SlurmDispatch(ssh_key_path="/nonexistent/key"))
    names = {s.name for s in sensors}
    assert names == {"saber_input_change_sensor", "saber_slurm_orphan_sensor"}
    # the single Definitions carries them: the schedule when a cron is set, the orphan sensor
    # when the build dispatches to SLURM
    local = build_definitions(load_build_config("tiny", rebuild_cron="0 3 * * 1"))
    repo = local.get_repository_def()
    assert repo.has_schedule_def("saber_rebuild_schedule")
    refresh = local.resolve_job_def("refresh_benchmark").asset_layer.executable_asset_keys
    assert {dg.AssetKey("leaderboard"), dg.AssetKey("bt_ratings")} <= set(refresh)
    assert repo.has_sensor_def("saber_input_change_sensor")
    assert not repo.has_sensor_def("saber_slurm_orphan_sensor")
    cluster = build_definitions(load_build_config("dev-slurm")).get_repository_def()
    assert cluster.has_sensor_def("saber_slurm_orphan_sensor")


def test_dagster_slurm_pin_and_the_private_calls_the_adapter_uses():
    """The adapter reaches into two private methods of dagster-slurm's Pipes client: the pin in
    pyproject.toml, the installed version and their signatures must agree before the pin moves."""
    import inspect
    import tomllib

    from dagster_slurm.pipes_clients.slurm_pipes_client import SlurmPipesClient

    from saber_slurm.adapter import PINNED_VERSION, PRIVATE_CALLS, installed_version

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert f"dagster-slurm=={PINNED_VERSION}" in pyproject["project"]["dependencies"]
    assert installed_version() == PINNED_VERSION
    signatures = {
        name: list(inspect.signature(getattr(SlurmPipesClient, name)).parameters)
        for name in PRIVATE_CALLS
    }
    assert signatures == {
        "_get_remote_base": ["self", "run_id", "ssh_pool"],
        "_get_remote_run_dir": ["self", "remote_base", "run_id", "op_context"],
    }
