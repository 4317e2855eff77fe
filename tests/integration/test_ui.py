"""The UI path: `dagster dev` (what `make ui` runs) serves the whole graph, and "Materialize all"
launched through the webserver's GraphQL API — Dagster's default multiprocess executor, steps in
parallel processes — succeeds and writes the export, several times on fresh SABER homes (the
file-lock races it once had are timing-dependent)."""

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from saber_assets.definitions import build_definitions
from saber_assets.evaluation import DEFAULT_RETRIEVERS
from saber_config import load_build_config

ROOT = Path(__file__).resolve().parents[2]
LAUNCHES = 2

ASSETS = (
    "{ assetNodes { assetKey { path } "
    "assetChecksOrError { ... on AssetChecks { checks { name } } } } }"
)
REPOS = (
    "{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }"
)
LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchPipelineExecution(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on InvalidStepError { invalidStepKey }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}"""
RUN = """
query Run($id: ID!) {
  runOrError(runId: $id) {
    ... on Run { status stepStats { stepKey status startTime endTime } }
  }
}"""
EVENTS = """
query Events($id: ID!) {
  logsForRun(runId: $id) {
    ... on EventConnection { events { __typename ... on MessageEvent { message } } }
  }
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graphql(port: int, query: str, variables: dict | None = None) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query, "variables": variables or {}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        body = json.load(response)
    assert "errors" not in body, body["errors"]
    return body["data"]


pytestmark = pytest.mark.e2e  # the UI, a dagster dev server and two runs: CI's tier


@pytest.fixture(scope="module")
def dagster_dev(tmp_path_factory):
    """`dagster dev` on the tiny profile with its own DAGSTER_HOME and SABER_HOME."""
    base = tmp_path_factory.mktemp("ui")
    home = base / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    saber_home = base / "saber"
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "SABER_HOME": str(saber_home),
        "SABER_PROFILE": "tiny",
    }
    port = free_port()
    dagster = Path(sys.executable).with_name("dagster")
    log = (base / "dagster_dev.log").open("w")
    proc = subprocess.Popen(
        [str(dagster), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 240
        nodes = None
        while time.time() < deadline and not nodes:
            time.sleep(2)
            assert proc.poll() is None, "dagster dev exited early"
            try:
                nodes = graphql(port, ASSETS)["assetNodes"]
            except (OSError, KeyError, AssertionError):
                continue
        assert nodes, "dagster dev did not serve the asset graph in 240 s"
        yield port, nodes, saber_home
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def test_dagster_dev_serves_every_asset(dagster_dev):
    _, nodes, saber_home = dagster_dev
    found = {"/".join(n["assetKey"]["path"]) for n in nodes}
    build = load_build_config("tiny", home=str(saber_home))
    graph = build_definitions(build).resolve_asset_graph()
    assert found == {k.to_user_string() for k in graph.get_all_asset_keys()}


PARTITIONS = """
{ assetNodeOrError(assetKey: {path: ["retriever_runs"]}) { ... on AssetNode { partitionKeys } } }"""


def _retriever_partitions(port: int, timeout: float = 180) -> list[str]:
    """The partitions of ``retriever_runs`` once the partitions sensor has added the defaults."""
    deadline = time.time() + timeout
    keys: list[str] = []
    while time.time() < deadline:
        keys = graphql(port, PARTITIONS)["assetNodeOrError"]["partitionKeys"]
        if set(DEFAULT_RETRIEVERS) <= set(keys):
            return keys
        time.sleep(3)
    raise AssertionError(f"the default retrievers are not partitions after {timeout} s: {keys}")


def test_the_ui_lists_the_default_retrievers_as_partitions(dagster_dev):
    port, _, _ = dagster_dev
    assert set(DEFAULT_RETRIEVERS) <= set(_retriever_partitions(port))


def _materialize_all(port: int, nodes: list[dict], partition: str) -> str:
    """ "Materialize all" as the UI launches it for one retriever partition (the graph's other
    assets are not partitioned: they run once, ``retriever_runs`` for ``partition``)."""
    (repo,) = graphql(port, REPOS)["repositoriesOrError"]["nodes"]
    keys = [{"path": n["assetKey"]["path"]} for n in nodes]
    checks = [
        {"assetKey": {"path": n["assetKey"]["path"]}, "name": c["name"]}
        for n in nodes
        for c in (n["assetChecksOrError"] or {}).get("checks", [])
    ]
    params = {
        "selector": {
            "repositoryLocationName": repo["location"]["name"],
            "repositoryName": repo["name"],
            "pipelineName": "__ASSET_JOB",
            "assetSelection": keys,
            "assetCheckSelection": checks,
        },
        "runConfigData": {},  # the default executor: multiprocess
        "executionMetadata": {"tags": [{"key": "dagster/partition", "value": partition}]},
    }
    launched = graphql(port, LAUNCH, {"params": params})["launchPipelineExecution"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    return launched["run"]["runId"]


def _wait(port: int, run_id: str, timeout: float = 900) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        run = graphql(port, RUN, {"id": run_id})["runOrError"]
        if run["status"] in ("SUCCESS", "FAILURE", "CANCELED"):
            return run
        time.sleep(3)
    raise AssertionError(f"run {run_id} did not finish in {timeout} s")


def test_materialize_all_in_parallel_processes_succeeds_repeatedly(dagster_dev):
    port, nodes, saber_home = dagster_dev
    _retriever_partitions(port)
    for launch in range(LAUNCHES):
        shutil.rmtree(saber_home, ignore_errors=True)  # a fresh home: every step computes
        run_id = _materialize_all(port, nodes, "bm25")
        run = _wait(port, run_id)
        failed = [s["stepKey"] for s in run["stepStats"] if s["status"] != "SUCCESS"]
        assert run["status"] == "SUCCESS", f"launch {launch}: failed steps {failed}"
        assert len(run["stepStats"]) == len(nodes)  # every asset, the evaluation group too
        assert (saber_home / "export" / "queries.jsonl").exists()
        messages = [
            e.get("message") or ""
            for e in graphql(port, EVENTS, {"id": run_id})["logsForRun"]["events"]
        ]
        assert any("multiprocess executor" in m for m in messages)
        spans = sorted((s["startTime"], s["endTime"]) for s in run["stepStats"])
        overlapping = any(b[0] < a[1] for a, b in itertools.pairwise(spans))
        assert overlapping, "no two steps ran at the same time"
