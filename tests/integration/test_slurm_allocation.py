"""The allocation mode on the real dev SLURM cluster (`make slurm-up`): one LLM-server job per
model and run, stages fed through its inbox, walltime relay, preemption, clean stops, SSH
connection counts and `make slurm-down`.

Skipped like ``test_slurm.py`` when the cluster is down (``SABER_REQUIRE_SLURM=1`` fails instead).
Build-level tests run ``saber build`` in a subprocess on a small judge-only profile (LLM judge on
the embedded model, human summaries and topics) against a private sshd on another port (its own
log, LogLevel VERBOSE, its own ControlMaster socket), so SSH connections are counted exactly even
when other developers use the dev cluster's sshd. Every build has its own remote work folder, so
no shard is reused across builds unless a test means it.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
import yaml
from test_slurm import (
    JOB_TIMEOUT_S,
    _error_text,
    _jobs_under,
    _slurm_conf,
    _timed,
    judge_requests_for,
    usable_dev_profile,
)
from triage_counts import PAIR, band_decided, paid_judge_calls, tournament_judge_calls

from saber_compute.llm.interface import LLMRequest, LLMResult
from saber_core.validity.triage_round import TRIAGE_JUDGE_KIND
from saber_slurm import (
    SlurmDispatch,
    plan_shards,
    release_run,
    run_costs,
)
from saber_store.build_lock import Holder
from saber_store.database import DuckDBStore

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
SABER = str(Path(sys.executable).with_name("saber"))
BUILD_TIMEOUT_S = 1800
# P(yes) cut-offs for the embedded 270M model, which says "yes" to nearly everything: its float32
# grades of this profile's 12 pool candidates lie in 0.906-0.994, the nearest 0.004 from a cut-off;
# the band decides 4 of the 18 pairs (a judge that discriminates would take 0.1 / 0.4)
TRIAGE_BAND = (0.95, 0.982)
JUDGE_PROFILE = {
    "corpus": "champ",
    "ontology": "champ",
    "corpus_limit": 24,
    "summaries": "corpus",
    "topics": "corpus",
    "judge": "llm",
    "llm_backend": "embedded",
    "judge_mode": "choice",
    "judge_both_orders": True,
    "seed": 0,
    "n_queries": 2,
    "n_topic_only": 2,
    "n_summary_only": 2,
    "n_both": 2,
    "topic_high": 0.7,
    "summary_high": 0.7,
    "rounds": 3,
    "execution": "slurm",
    "validity_rr_queries": 1,
    "recipe_summaries": "none",
}


def _env() -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": _slurm_conf()}


def _sh(*args: str, timeout: float = 30) -> str:
    return subprocess.run(
        list(args), capture_output=True, text=True, timeout=timeout, env=_env()
    ).stdout


def _settings(profile: dict, remote_base: str, **overrides) -> SlurmDispatch:
    values = {**profile, "remote_base": remote_base, "poll_timeout": JOB_TIMEOUT_S}
    return SlurmDispatch(**{**values, "mode": "allocation", **overrides})


def _alloc_status(remote_base: str) -> dict[str, dict]:
    """{job id: status} of every LLM-server job under ``remote_base`` (the dev FS is local)."""
    found = {}
    for path in Path(remote_base).glob("allocations/*/*/jobs/*.json"):
        found[path.stem] = json.loads(path.read_text())
    return found


def _answered(remote_base: str) -> list[str]:
    """Every shard answered by any LLM-server job under ``remote_base`` (duplicates kept)."""
    return [k for s in _alloc_status(remote_base).values() for k in s.get("answered", [])]


def _our_queue(remote_base: str) -> list[str]:
    lines = _sh("squeue", "-h", "-o", "%i|%T|%Z").splitlines()
    return [line for line in lines if f"|{remote_base}/" in line]


class Stages:
    """Materializes one run of several assets (stages), each sending its requests through the
    run's allocation, like the LLM stages of a build."""

    def __init__(self, settings: SlurmDispatch) -> None:
        self.settings = settings
        self.results: dict[str, list[LLMResult]] = {}
        self.dispatchers: dict[str, object] = {}

    def run(self, stages: dict[str, list[LLMRequest]]) -> dg.ExecuteInProcessResult:
        assets, previous = [], []
        for name, requests in stages.items():
            assets.append(self._stage(name, requests, previous[-1:]))
            previous.append(name)
        instance = dg.DagsterInstance.ephemeral()
        result = dg.materialize(assets, instance=instance, raise_on_error=False)
        release_run(self.settings, [result.run_id])
        return result

    def _stage(self, name: str, requests: list[LLMRequest], deps: list[str]):
        from saber_llm.embedded import EmbeddedBackend
        from saber_slurm import open_dispatch

        probe = self

        @dg.asset(name=name, deps=deps)
        def stage(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
            dispatcher = open_dispatch(probe.settings, context, EmbeddedBackend())
            probe.dispatchers[name] = dispatcher
            probe.results[name] = dispatcher(requests)
            return dg.MaterializeResult(metadata={"n_results": len(probe.results[name])})

        return stage


@pytest.fixture(scope="module")
def dev() -> dict:
    """The dev cluster's settings (skip or fail when it is down, as in test_slurm.py)."""
    return usable_dev_profile()


@pytest.fixture
def workspace(dev) -> Iterator[str]:
    folder = f"{dev['remote_base']}/test-{uuid.uuid4().hex[:8]}"
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _in_process(requests: list[LLMRequest], size: int) -> list[LLMResult]:
    """The embedded backend's answers for the same batches the shards make."""
    from saber_llm.embedded import EmbeddedBackend

    backend, out = EmbeddedBackend(), [None] * len(requests)
    for shard in plan_shards(requests, size):
        for i, result in zip(shard, backend.generate([requests[i] for i in shard]), strict=True):
            out[i] = result
    return out


# -- dispatcher level ------------------------------------------------------------------------
def test_stages_of_a_run_share_one_allocation_and_one_model_load(dev, workspace):
    settings = _settings(dev, workspace, shard_size=3)
    first = judge_requests_for([(0, 3, 1), (1, 2, 0), (2, 1, 3)])
    second = judge_requests_for([(3, 0, 2)])
    probe = Stages(settings)
    result = _timed("2 stages, one allocation", lambda: probe.run({"s1": first, "s2": second}))
    assert result.success, _error_text(result)
    accounting = _jobs_under(workspace)
    assert len(accounting) == 1 and set(accounting.values()) == {"COMPLETED"}, accounting
    (job,) = accounting
    (status,) = _alloc_status(workspace).values()
    assert status["job"] == job and status["model_loads"] == 1
    assert status["exit_reason"] == "shutdown"  # released at the run's end, not cancelled
    assert status["shards"] == 3 and status["requests"] == len(first) + len(second)
    log = next(Path(workspace).glob("allocations/*/*/jobs/slurm-*.out")).read_text()
    assert log.count("model load 1 of job") == 1 and "loading" in log
    for stage, requests in (("s1", first), ("s2", second)):
        got = probe.results[stage]
        expected = _in_process(requests, settings.shard_size)  # the same batches: bit-equal
        assert [(r.text, r.choice_logprobs) for r in got] == [
            (r.text, r.choice_logprobs) for r in expected
        ]
        assert {r.extra["slurm_job_id"] for r in got} == {job}
        assert {r.extra["slurm_node"] for r in got} == {"localhost"}
        assert {r.extra["gpu"] for r in got} == {"gres:fake"}
    (m1,) = result.asset_materializations_for_node("s1")
    assert m1.metadata["slurm_mode"].value == "allocation"
    assert m1.metadata["slurm_job_ids"].data == [job]
    assert m1.metadata["slurm_jobs_submitted"].data == [job]
    assert m1.metadata["slurm_n_shards"].value == 2 and m1.metadata["slurm_relays"].value == 0
    (m2,) = result.asset_materializations_for_node("s2")
    assert m2.metadata["slurm_jobs_submitted"].data == []  # found the server, fed it
    costs = run_costs(settings, [result.run_id])
    assert (costs["allocations"], costs["slurm_jobs"], costs["model_loads"]) == (1, 1, 1)
    assert costs["gpu_hours"] > 0 and costs["jobs"][0]["gpus"] == 1
    # a new run with the same requests: every shard reused, no job submitted
    again = Stages(settings)
    rerun = _timed("rerun, all shards reused", lambda: again.run({"s1": first}))
    assert rerun.success, _error_text(rerun)
    assert _jobs_under(workspace) == accounting
    assert all(r.reused for r in again.dispatchers["s1"].records)
    assert [r.text for r in again.results["s1"]] == [r.text for r in probe.results["s1"]]


def test_failed_shard_is_retried_in_the_allocation(dev, workspace):
    settings = _settings(
        dev, workspace, max_retries=1, payload_env={
            **dev.get("payload_env", {}), "SABER_PAYLOAD_FAIL": "once"
        },
    )  # fmt: skip
    probe = Stages(settings)
    requests = judge_requests_for([(0, 1, 2)])
    result = _timed("shard fails once, retried", lambda: probe.run({"s": requests}))
    assert result.success, _error_text(result)
    (record,) = probe.dispatchers["s"].records
    assert [a.state for a in record.attempts] == ["ERROR", "COMPLETED"]
    assert "injected failure" in record.attempts[0].error
    assert len(_jobs_under(workspace)) == 1  # the server kept running: no new model load
    (status,) = _alloc_status(workspace).values()
    assert (status["shard_errors"], status["shards"], status["model_loads"]) == (1, 1, 1)


def test_always_failing_shard_fails_the_stage_with_the_error(dev, workspace):
    settings = _settings(
        dev, workspace, max_retries=1, payload_env={
            **dev.get("payload_env", {}), "SABER_PAYLOAD_FAIL": "always"
        },
    )  # fmt: skip
    probe = Stages(settings)
    requests = judge_requests_for([(0, 1, 2)])
    result = _timed("always failing shard", lambda: probe.run({"s": requests}))
    assert not result.success
    message = _error_text(result)
    assert "SlurmShardError" in message and "failed 2 time(s) in allocation" in message
    assert "injected failure (SABER_PAYLOAD_FAIL=always)" in message  # the traceback's tail
    assert set(_jobs_under(workspace).values()) == {"COMPLETED"}  # released at the run's end
    assert not _our_queue(workspace)


def test_preempted_server_hands_its_shards_to_a_successor(dev, workspace):
    """SIGTERM to the server mid-shard (what preemption or scancel does): the shard at hand is
    abandoned unwritten, a successor loads the model once and answers the rest; every shard is
    answered exactly once and the answers are the in-process ones."""
    env = {**dev.get("payload_env", {}), "SABER_PAYLOAD_DELAY_S": "6"}
    settings = _settings(dev, workspace, shard_size=2, payload_env=env)
    requests = judge_requests_for([(0, 1, 2), (1, 2, 3), (2, 3, 0)])
    cancelled: list[str] = []

    def preempt() -> None:
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while time.monotonic() < deadline:
            for job, status in _alloc_status(workspace).items():
                if status.get("shards", 0) >= 1 and status.get("state") == "serving":
                    time.sleep(2)  # into the next shard
                    _sh("scancel", job)
                    cancelled.append(job)
                    return
            time.sleep(0.5)

    watcher = threading.Thread(target=preempt, daemon=True)
    watcher.start()
    probe = Stages(settings)
    result = _timed("server preempted mid-shard", lambda: probe.run({"s": requests}))
    watcher.join(timeout=5)
    assert result.success, _error_text(result)
    assert len(cancelled) == 1
    accounting = _jobs_under(workspace)
    assert accounting[cancelled[0]].startswith("CANCELLED") and len(accounting) == 2, accounting
    statuses = _alloc_status(workspace)
    assert statuses[cancelled[0]]["exit_reason"] == "terminated"
    assert all(s["model_loads"] == 1 for s in statuses.values())
    answered = _answered(workspace)
    assert sorted(answered) == sorted({r.key for r in probe.dispatchers["s"].records})
    assert probe.dispatchers["s"].relays == 1
    expected = _in_process(requests, 2)
    assert [r.text for r in probe.results["s"]] == [r.text for r in expected]


# -- build level: a private sshd to count connections ----------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateSshd:
    """A second sshd for the dev cluster on its own port and log (LogLevel VERBOSE): every
    connection ("Accepted publickey") and every command ("Starting session") is counted."""

    def __init__(self, dev: dict, folder: Path) -> None:
        self.port, self.folder = _free_port(), folder
        self.log, self.pid = folder / "sshd.log", folder / "sshd.pid"
        config = Path(dev["ssh_key_path"]).with_name("sshd_config").read_text().splitlines()
        keep = [line for line in config if not line.startswith(("Port ", "PidFile ", "LogLevel"))]
        (folder / "sshd_config").write_text(
            "\n".join([f"Port {self.port}", f"PidFile {self.pid}", "LogLevel VERBOSE", *keep])
            + "\n"
        )
        subprocess.run(
            ["/usr/sbin/sshd", "-f", str(folder / "sshd_config"), "-E", str(self.log)], check=True
        )
        self.known_hosts = folder / "known_hosts"
        for _ in range(60):
            scan = subprocess.run(
                ["ssh-keyscan", "-p", str(self.port), "127.0.0.1"], capture_output=True, text=True
            )
            if scan.stdout.strip():
                self.known_hosts.write_text(scan.stdout)
                break
            time.sleep(0.25)
        self.control_dir = tempfile.mkdtemp(prefix="cm-", dir="/tmp")

    def connections(self) -> int:
        return self.log.read_text().count("Accepted publickey") if self.log.exists() else 0

    def sessions(self) -> int:
        return self.log.read_text().count("Starting session") if self.log.exists() else 0

    def close_master(self) -> None:
        """End the shared ControlMaster, so the next SSH use has to connect."""
        for sock in Path(self.control_dir).glob("cm-*"):
            subprocess.run(
                ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "root@127.0.0.1"],
                capture_output=True,
                timeout=10,
            )
            sock.unlink(missing_ok=True)

    def stop(self) -> None:
        self.close_master()
        if self.pid.exists():
            os.kill(int(self.pid.read_text().strip()), signal.SIGTERM)
        shutil.rmtree(self.control_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def sshd(dev, tmp_path_factory) -> Iterator[PrivateSshd]:
    server = PrivateSshd(dev, tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


class Build:
    """One judge-only ``saber build`` in a subprocess with its own SABER home, remote work
    folder and cluster profile (dev + overrides), through the private sshd."""

    def __init__(self, dev: dict, sshd: PrivateSshd, folder: Path, **cluster) -> None:
        self.home = folder / "home"
        self.remote_base = f"{dev['remote_base']}/test-{uuid.uuid4().hex[:8]}"
        values = {
            **dev,
            "ssh_port": sshd.port,
            "known_hosts_file": str(sshd.known_hosts),
            "remote_base": self.remote_base,
            "shard_size": 8,
            **cluster,
        }
        (folder / "cluster.yaml").write_text(yaml.safe_dump(values))
        profile = {**JUDGE_PROFILE, "slurm_profile": str(folder / "cluster.yaml")}
        (folder / "build.yaml").write_text(yaml.safe_dump(profile))
        self.env = {
            **os.environ,
            "SABER_HOME": str(self.home),
            "SABER_PROFILE": str(folder / "build.yaml"),
            "DAGSTER_SLURM_SSH_CONTROL_DIR": sshd.control_dir,
        }
        self.env.pop("DAGSTER_HOME", None)
        self.settings = SlurmDispatch(**values)
        self.sshd = sshd

    def start(self, *args: str) -> subprocess.Popen:
        """``saber build [args]`` in a session of its own (as a terminal starts it)."""
        return subprocess.Popen(
            [SABER, "build", *args], env=self.env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip

    def run(self, *args: str) -> str:
        proc = self.start(*args)
        out, _ = proc.communicate(timeout=BUILD_TIMEOUT_S)
        assert proc.returncode == 0, out[-5000:]
        return out

    @property
    def store(self) -> DuckDBStore:
        return DuckDBStore(database=str(self.home / "saber.duckdb"))

    def table(self, name: str) -> pl.DataFrame:
        return self.store.read_table(name)

    def cleanup(self) -> None:
        shutil.rmtree(self.remote_base, ignore_errors=True)


def _outcomes(build: Build) -> tuple[pl.DataFrame, pl.DataFrame]:
    cols = ["query_id", "round", "cand_a", "cand_b", "winner", "p_a"]
    judgments = build.table("judgments").select(cols).sort("query_id", "round", "cand_a")
    ratings = build.table("bt_ratings").select("query_id", "doc_id", "rating")
    return judgments, ratings.sort("query_id", "doc_id")


@pytest.fixture(scope="module")
def reference(dev, sshd, tmp_path_factory) -> Iterator[tuple[Build, dict]]:
    """An uninterrupted build (the reference of the relay and stop tests), with its SSH
    connection count (the ControlMaster closed before: the build has to open its own)."""
    build = Build(dev, sshd, tmp_path_factory.mktemp("reference"))
    sshd.close_master()
    before = (sshd.connections(), sshd.sessions())
    started = time.monotonic()
    out = build.run()
    counts = {
        "wall_s": time.monotonic() - started,
        "connections": sshd.connections() - before[0],
        "sessions": sshd.sessions() - before[1],
        "output": out,
    }
    shown = {k: v for k, v in counts.items() if k != "output"}
    print(f"[timing] reference judge-only build: {counts['wall_s']:.0f}s, {shown}")
    yield build, counts
    build.cleanup()


def test_build_uses_one_allocation_one_model_load_and_one_ssh_connection(reference):
    build, counts = reference
    jobs = _jobs_under(build.remote_base)
    assert len(jobs) == 1 and set(jobs.values()) == {"COMPLETED"}, jobs
    (job,) = jobs
    (status,) = _alloc_status(build.remote_base).values()
    assert (status["job"], status["model_loads"], status["exit_reason"]) == (job, 1, "shutdown")
    log = next(Path(build.remote_base).glob("allocations/*/*/jobs/slurm-*.out")).read_text()
    assert log.count("model load 1 of job") == 1
    stages = build.table("slurm_stage_costs")
    llm_stages = set(stages["stage"])
    assert {"tournament_round_01", "tournament_round_02", "tournament_round_03"} <= llm_stages
    assert {j for text in stages["job_ids"] for j in json.loads(text)} == {job}
    run_jobs = build.table("slurm_run_costs")
    assert run_jobs.height == 1 and run_jobs["model_loads"][0] == 1
    assert run_jobs["gpu_hours"][0] > 0 and run_jobs["queue_wait_s"][0] >= 0
    calls = build.table("llm_calls")
    assert calls.height == status["requests"]  # every call answered once, by the one job
    assert all(json.loads(e)["slurm_job_id"] == job for e in calls["extra"])
    # cost visible in the build report and printed at the end of the build
    report = (build.home / "export" / "report.md").read_text()
    assert "## Slurm" in report and "| allocations | 1 |" in report
    assert "| model loads | 1 |" in report and "stage tournament_round_01" in report
    assert (
        "slurm:      1 allocation(s) for 1 model(s), 1 SLURM job(s), 1 model load(s)"
        in counts["output"]
    )
    # SSH: one connection for the whole build; every command multiplexed over it
    assert counts["connections"] == 1, counts
    assert counts["sessions"] > 20
    # a rerun submits nothing, pays nothing and sends not one SSH command
    before, sessions = dict(jobs), build.sshd.sessions()
    build.run()
    assert _jobs_under(build.remote_base) == before
    assert build.table("llm_calls").height == calls.height
    assert build.sshd.sessions() == sessions


@pytest.mark.vllm
def test_vllm_build_serves_every_llm_stage_from_one_allocation_and_one_load(dev, sshd, tmp_path):
    """``SABER_LLM_BACKEND=vllm`` on the dev cluster: the allocation's server job runs from the
    profile's ``vllm_env_path`` (the project's .venv-vllm) and loads vLLM once for the summaries,
    the topics and every judge stage of the build."""
    python = Path(dev.get("vllm_env_path") or "/nonexistent") / "env" / "bin" / "python"
    if not python.exists():
        reason = f"{python} is missing: run `make vllm-env`, then `make slurm-up`"
        if os.environ.get("SABER_REQUIRE_VLLM"):
            pytest.fail(reason)
        pytest.skip(reason)
    build = Build(dev, sshd, tmp_path, shard_size=256)
    # small budgets: the test is about where the calls run, not what the 270M model writes
    build.env.update(SABER_LLM_BACKEND="vllm", SABER_SUMMARIES="llm", SABER_TOPICS="llm",
                     SABER_CORPUS_LIMIT="8", SABER_N_QUERIES="1", SABER_ROUNDS="2",
                     SABER_SUMMARY_MAX_TOKENS="32", SABER_TOPICS_MAX_TOKENS="24",
                     SABER_TOPIC_SHORTLIST="6", SABER_VALIDITY_RR_QUERIES="0")  # fmt: skip
    try:
        out = build.run()
        jobs = _jobs_under(build.remote_base)
        assert len(jobs) == 1, jobs
        (status,) = _alloc_status(build.remote_base).values()
        assert status["model_loads"] == 1 and status["identity"]["backend"] == "vllm"
        assert status["identity"]["engine_version"] == "0.32.0"
        sbatch = next(Path(build.remote_base).glob("allocations/*/*/server.sbatch")).read_text()
        assert "payload-env-vllm/env/bin/python" in sbatch
        stages = set(build.table("slurm_stage_costs")["stage"])
        llm_stages = {
            "summaries",
            "topic_annotations",
            "tournament_round_01",
            "tournament_round_02",
        }
        assert llm_stages <= stages
        calls = build.table("llm_calls")
        assert set(calls["backend"]) == {"vllm"} and calls.height == status["requests"]
        assert "1 SLURM job(s), 1 model load(s)" in out
    finally:
        build.cleanup()


def test_walltime_relay_mid_tournament_equals_the_uninterrupted_build(
    dev,
    sshd,
    reference,
    tmp_path,
):
    """A 2-minute walltime with a 30 s lead and 20 s of simulated compute per shard: the
    allocation drains before its limit and successors take over (each loading the model once);
    nothing is answered twice and the judgments and ratings equal the uninterrupted build's."""
    env = {**dev.get("payload_env", {}), "SABER_PAYLOAD_DELAY_S": "20"}
    build = Build(
        dev, sshd, tmp_path, time_limit="00:02:00", signal_lead_seconds=30,
        max_retries=3, payload_env=env,
    )  # fmt: skip
    try:
        _timed("relay build", build.run)
        statuses = _alloc_status(build.remote_base)
        assert len(statuses) >= 2, statuses
        assert all(s["model_loads"] == 1 for s in statuses.values())
        ordered = sorted(statuses.values(), key=lambda s: int(s["job"]))
        assert ordered[0]["exit_reason"] == "drained" and ordered[0]["shards"] > 0
        answered = _answered(build.remote_base)
        assert len(answered) == len(set(answered)), "a shard was answered twice"
        stages = build.table("slurm_stage_costs").filter(
            pl.col("stage").str.starts_with("tournament_round")
        )
        tournament_jobs = {j for text in stages["job_ids"] for j in json.loads(text)}
        assert len(tournament_jobs) >= 2, "the relay did not happen mid-tournament"
        reference_judgments, reference_ratings = _outcomes(reference[0])
        judgments, ratings = _outcomes(build)
        assert judgments.equals(reference_judgments)
        assert ratings.equals(reference_ratings)
        assert build.table("llm_calls").height == sum(s["requests"] for s in statuses.values())
    finally:
        build.cleanup()


def _mid_tournament(build: Build) -> tuple[subprocess.Popen, list[str]]:
    """A build started and left running until round 1 is stored and round 2's shards are with
    the allocation's server."""
    proc = build.start()
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + BUILD_TIMEOUT_S
    while not any(line.startswith("  tournament_round_01 ") for line in lines):
        assert proc.poll() is None, "".join(lines)[-5000:]
        assert time.monotonic() < deadline, "".join(lines)[-5000:]
        time.sleep(0.2)
    time.sleep(3)  # round 2's shards are queued and the server is on them
    assert _our_queue(build.remote_base), "no server job running mid-tournament"
    return proc, lines


def _queue_drains(build: Build, timeout: float) -> float:
    """Seconds until no job of the build is left in squeue (COMPLETING → gone)."""
    started = time.monotonic()
    while _our_queue(build.remote_base):
        assert time.monotonic() - started < timeout, _our_queue(build.remote_base)
        time.sleep(0.5)
    return time.monotonic() - started


def _resumed_equals_reference(build: Build, reference: Build) -> None:
    """The rerun pays for no shard twice and equals the uninterrupted build."""
    assert any(s.startswith("CANCELLED") for s in _jobs_under(build.remote_base).values())
    paid_before = build.table("llm_calls").height
    _timed("rerun after the stop", build.run)
    answered = _answered(build.remote_base)
    assert len(answered) == len(set(answered)), "a shard was answered twice"
    shard_sizes = {
        k: json.loads((Path(build.remote_base) / "shards" / k / "stats.json").read_text())[
            "n_requests"
        ]
        for k in answered
    }
    calls = build.table("llm_calls")
    assert calls.height == sum(shard_sizes.values())  # every call paid exactly once
    assert calls.height > paid_before > 0
    judgments, ratings = _outcomes(build)
    reference_judgments, reference_ratings = _outcomes(reference)
    assert judgments.equals(reference_judgments), _differing(judgments, reference_judgments)
    assert ratings.equals(reference_ratings)


def _differing(judgments: pl.DataFrame, reference: pl.DataFrame) -> str:
    """The judgments that differ from the reference's, row by row (to diagnose a failure)."""
    key = ["query_id", "round", "cand_a", "cand_b"]
    both = judgments.join(reference, on=key, how="full", suffix="_ref", coalesce=True)
    changed = both.filter(
        pl.col("winner").ne_missing(pl.col("winner_ref"))
        | pl.col("p_a").ne_missing(pl.col("p_a_ref"))
    )
    with pl.Config(tbl_rows=-1, tbl_cols=-1, fmt_float="full"):
        return f"{changed.height} of {judgments.height} judgments differ:\n{changed}"


def test_sigterm_mid_tournament_stops_cancels_and_resumes(dev, sshd, reference, tmp_path):
    env = {**dev.get("payload_env", {}), "SABER_PAYLOAD_DELAY_S": "4"}
    build = Build(dev, sshd, tmp_path, payload_env=env)
    try:
        proc, lines = _mid_tournament(build)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        elapsed = time.monotonic() - sent
        print(f"[timing] SIGTERM to exit: {elapsed:.1f}s")
        assert code == 128 + signal.SIGTERM, "".join(lines)[-5000:]
        assert elapsed < 10, f"exited {elapsed:.1f}s after SIGTERM"
        stop_lines = [line for line in lines if line.startswith("saber build:")]
        queue = _our_queue(build.remote_base)
        assert not [line for line in queue if "|RUNNING|" in line], (queue, stop_lines)
        _queue_drains(build, timeout=20)
        _resumed_equals_reference(build, reference[0])
    finally:
        build.cleanup()


def test_sigkill_of_the_supervisor_mid_tournament_cancels_and_resumes(
    dev, sshd, reference, tmp_path
):
    """``kill -9`` of the supervisor's process group (a dropped terminal): the worker stops at
    once, the reaper it starts cancels the run's server job, and a rerun pays for nothing twice
    and equals the uninterrupted build."""
    env = {**dev.get("payload_env", {}), "SABER_PAYLOAD_DELAY_S": "4"}
    build = Build(dev, sshd, tmp_path, payload_env=env)
    try:
        proc, _ = _mid_tournament(build)
        worker = Holder.parse((build.home / "build.lock").read_text())
        killed = time.monotonic()
        os.killpg(proc.pid, signal.SIGKILL)
        while worker.state() != "gone":
            assert time.monotonic() - killed < 5, "the worker outlived its supervisor"
            time.sleep(0.01)
        gone = time.monotonic() - killed
        drained = _queue_drains(build, timeout=60)
        print(f"[timing] SIGKILL: worker gone {gone * 1000:.0f} ms, SLURM queue empty "
              f"{gone + drained:.1f}s after the kill")  # fmt: skip
        (log,) = (build.home / "logs").glob("build-*.log")
        # the reaper prints once its scancel is confirmed (it waits for the queue too, over SSH):
        # the queue can look empty here a moment before that line is written
        deadline = time.monotonic() + 30
        while "saber build: cancelled SLURM jobs" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        _resumed_equals_reference(build, reference[0])
    finally:
        build.cleanup()


def test_triage_grades_and_judges_in_the_builds_one_allocation(reference, dev, sshd, tmp_path):
    """``yesno:build`` grades the pools on the build's own model in the run's one allocation
    (one job, one model load), the band rule on P(yes) decides the confident pairs, the judge
    plays only the others, and the report and the agreement with the full build say so."""
    full, _ = reference
    build = Build(dev, sshd, tmp_path)
    low, high = TRIAGE_BAND
    build.env.update(SABER_POINTWISE_JUDGE="yesno:build", SABER_TRIAGE="band",
                     SABER_TRIAGE_LOW=str(low), SABER_TRIAGE_HIGH=str(high))  # fmt: skip
    try:
        out = build.run("--reference-home", str(full.home))
        jobs = _jobs_under(build.remote_base)
        assert len(jobs) == 1 and set(jobs.values()) == {"COMPLETED"}, jobs
        (status,) = _alloc_status(build.remote_base).values()
        assert status["model_loads"] == 1
        stages = set(build.table("slurm_stage_costs")["stage"])
        assert {"pointwise_grades", "tournament_round_01"} <= stages
        calls = build.table("llm_calls")
        assert calls.height == status["requests"]  # grades and verdicts, all from the one job
        grades = build.table("pointwise_grades")
        assert grades.height == build.table("candidate_pools").height
        yesno = calls.filter(pl.col("prompt_id").str.starts_with("yesno"))
        assert yesno.height == grades.height
        judgments = build.table("judgments")
        decided = judgments.filter(pl.col("judge_kind") == TRIAGE_JUDGE_KIND)
        assert decided.height > 0
        assert band_decided(judgments, grades, low, high) == set(decided.select(PAIR).rows())
        assert judgments.height == full.table("judgments").height
        saved = 2 * decided.height  # both orders: two judge calls per pair
        assert tournament_judge_calls(full.store) == 2 * judgments.height
        assert tournament_judge_calls(build.store) == 2 * (judgments.height - decided.height)
        assert paid_judge_calls(build.store) < paid_judge_calls(full.store)
        report = (build.home / "export" / "report.md").read_text()
        assert f"| pairs decided by triage | {decided.height} |" in report
        assert f"| judge calls saved | {saved} (" in report
        assert "agreement with the reference build" in out
        print(f"[triage] {decided.height} of {judgments.height} pairs decided, {saved} judge "
              f"calls saved, {calls.height} calls from job {next(iter(jobs))}")  # fmt: skip
    finally:
        build.cleanup()


def test_orphan_sensor_reuses_one_connection_per_sensor_hour(dev, sshd):
    """30 ticks (an hour at the default 120 s interval) open one SSH connection in all."""
    from saber_assets.automation import slurm_orphan_sensor

    settings = SlurmDispatch(
        **{**dev, "ssh_port": sshd.port, "known_hosts_file": str(sshd.known_hosts)}
    )
    os.environ["DAGSTER_SLURM_SSH_CONTROL_DIR"] = sshd.control_dir
    try:
        sensor = slurm_orphan_sensor(settings, interval_seconds=120)
        instance = dg.DagsterInstance.ephemeral()
        sshd.close_master()
        before = (sshd.connections(), sshd.sessions())
        for _ in range(30):
            tick = sensor.evaluate_tick(dg.build_sensor_context(instance=instance))
            assert not tick.run_requests
        connections = sshd.connections() - before[0]
        sessions = sshd.sessions() - before[1]
        print(f"[ssh] 30 sensor ticks: {connections} connection(s), {sessions} command(s)")
        assert connections == 1 and sessions >= 30
    finally:
        os.environ.pop("DAGSTER_SLURM_SSH_CONTROL_DIR", None)


# -- make slurm-down (restarts the dev cluster; last in this module) --------------------------
def _job_processes() -> set[int]:
    """slurmstepd processes and their descendants."""
    steps = {int(p) for p in _sh("pgrep", "-x", "slurmstepd").split()}
    found, frontier = set(steps), list(steps)
    while frontier:
        children = _sh("pgrep", "-P", str(frontier.pop())).split()
        for child in map(int, children):
            if child not in found:
                found.add(child)
                frontier.append(child)
    return found


def test_slurm_down_cancels_jobs_and_leaves_no_job_process(dev, tmp_path):
    foreign = [line for line in _sh("squeue", "-h", "-o", "%i|%Z").splitlines() if line]
    if foreign and not os.environ.get("SABER_REQUIRE_SLURM"):
        pytest.skip(f"other jobs on the dev cluster ({foreign}): slurm-down would cancel them")
    script = tmp_path / "busy.sh"
    loop = "import time\nwhile True:\n    sum(range(20000))\n    time.sleep(0.02)\n"
    script.write_text(f"#!/bin/bash\n#SBATCH --time=00:10:00\nexec {sys.executable} -c '{loop}'\n")
    job = _sh("sbatch", "--parsable", "-D", str(tmp_path), str(script)).strip().split(";")[0]
    assert job.isdigit()
    env = {**os.environ, "SABER_SLURM_VENV": sys.prefix}
    try:
        for _ in range(120):
            if (
                _sh("squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING"
                and len(_job_processes()) >= 2
            ):
                break
            time.sleep(0.5)
        payload = _job_processes()
        assert len(payload) >= 2, "the job's slurmstepd and payload never showed up"
        down = subprocess.run(
            ["bash", str(ROOT / "slurm/dev/down.sh")], env=env, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert down.returncode == 0, down.stderr
        assert not _sh("pgrep", "-x", "slurmstepd").strip()
        alive = [pid for pid in payload if Path(f"/proc/{pid}").exists()]
        assert not alive, f"job processes left behind: {alive}"
    finally:
        up = subprocess.run(
            ["bash", str(ROOT / "slurm/dev/up.sh")], env=env, capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
        assert up.returncode == 0, up.stderr[-3000:]
    assert _sh("sinfo", "-h", "-n", "localhost", "-o", "%T").strip().startswith("idle")
    state = _sh("sacct", "-X", "-n", "-P", "-j", job, "-o", "State").strip()
    assert state.startswith("CANCELLED"), state
