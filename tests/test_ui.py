"""`dagster dev` (what `make ui` runs) serves the whole graph over GraphQL on 127.0.0.1."""

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

from saber_assets.definitions import build_definitions
from saber_resources.config import load_build_config

ROOT = Path(__file__).resolve().parents[1]
QUERY = '{"query": "{ assetNodes { assetKey { path } } }"}'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dagster_dev_serves_every_asset(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    port = free_port()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "SABER_HOME": str(tmp_path / "saber"),
        "SABER_PROFILE": "tiny",
    }
    dagster = Path(sys.executable).with_name("dagster")
    proc = subprocess.Popen(
        [str(dagster), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        found = None
        deadline = time.time() + 180
        while time.time() < deadline and found is None:
            time.sleep(2)
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/graphql",
                    data=QUERY.encode(),
                    headers={"Content-Type": "application/json"},
                )
                with urllib.request.urlopen(request, timeout=10) as response:
                    nodes = json.load(response)["data"]["assetNodes"]
                if nodes:
                    found = {"/".join(n["assetKey"]["path"]) for n in nodes}
            except (OSError, KeyError, TypeError):
                assert proc.poll() is None, "dagster dev exited early"
        build = load_build_config("tiny", home=str(tmp_path / "saber"))
        expected = {
            k.to_user_string()
            for k in build_definitions(build).resolve_asset_graph().get_all_asset_keys()
        }
        assert found == expected
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
