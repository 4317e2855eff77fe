"""Crash safety (SIGKILL and resume), build concurrency, and secrets never stored."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import dagster as dg
import numpy as np
import polars as pl
import pytest

from saber_cli.build import run_build
from saber_config import load_build_config
from saber_store.build_lock import BuildLockedError, build_lock
from saber_store.database import DuckDBStore

HERE = Path(__file__).parent
SCRIPT = HERE / "build_subprocess.py"


def start_build(home: Path, delay: float = 0.0) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), str(home), str(delay)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen, timeout: float = 600) -> int:
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err.decode()[-3000:]
    return proc.returncode


def outputs(home: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    store = DuckDBStore(database=str(home / "saber.duckdb"))
    key = ["query_id", "round", "slot"]
    judgments = store.read_table("judgments").sort(key)
    ratings = store.read_table("bt_ratings").sort("query_id", "position")
    return judgments, ratings


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    home = tmp_path_factory.mktemp("reference")
    start = time.monotonic()
    finish(start_build(home, delay=0.002))
    return home, time.monotonic() - start


def kill_and_resume(home: Path, kill_times: list[float]) -> None:
    for t in kill_times:
        proc = start_build(home, delay=0.002)
        time.sleep(t)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finish(start_build(home, delay=0.002))


def assert_same_build(home: Path, reference_home: Path) -> None:
    judgments, ratings = outputs(home)
    ref_judgments, ref_ratings = outputs(reference_home)
    key = ["query_id", "round", "slot"]
    assert judgments.select(pl.struct(key).is_duplicated().any()).item() is False
    assert judgments.height == ref_judgments.height
    columns = [*key, "cand_a", "cand_b", "winner", "p_a"]
    assert judgments.select(columns).equals(ref_judgments.select(columns))
    np.testing.assert_allclose(ratings["rating"].to_numpy(), ref_ratings["rating"].to_numpy())
    # no LLM call was paid twice: one cache row per call key
    store = DuckDBStore(database=str(home / "saber.duckdb"))
    calls = store.query("SELECT count(*) AS n, count(DISTINCT call_key) AS k FROM llm_calls")
    assert calls["n"][0] == calls["k"][0]


@pytest.mark.e2e
def test_sigkill_at_random_points_then_resume_equals_uninterrupted(reference, tmp_path):
    reference_home, duration = reference
    rng = np.random.default_rng(20261130)
    kill_times = sorted(rng.uniform(1.0, max(2.0, duration * 0.9), size=3).tolist())
    kill_and_resume(tmp_path / "home", kill_times)
    assert_same_build(tmp_path / "home", reference_home)


@pytest.mark.slow
def test_sigkill_at_twenty_points(reference, tmp_path):
    reference_home, duration = reference
    rng = np.random.default_rng(7)
    kill_and_resume(tmp_path / "home", rng.uniform(0.5, duration, size=20).tolist())
    assert_same_build(tmp_path / "home", reference_home)


def test_second_build_on_same_home_stops_at_once_with_a_clear_message(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; "
            "from saber_store.build_lock import build_lock\n"
            f"with build_lock(Path({str(tmp_path)!r})):\n"
            "    print('locked', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        build = load_build_config("tiny", home=str(tmp_path))
        start = time.monotonic()
        with pytest.raises(BuildLockedError, match=f"another SABER build is running on {tmp_path}"):
            run_build(build, dg.DagsterInstance.ephemeral())
        assert time.monotonic() - start < 10
        env = {**os.environ, "SABER_HOME": str(tmp_path), "SABER_PROFILE": "tiny"}
        cli = subprocess.run(
            [str(Path(sys.executable).with_name("saber")), "build"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cli.returncode == 2 and "another SABER build is running" in cli.stderr
    finally:
        holder.kill()
        holder.wait()
    with build_lock(tmp_path):  # released when the holder died
        pass


def test_concurrent_writers_take_turns_and_never_corrupt(tmp_path):
    db = tmp_path / "shared.duckdb"
    code = (
        "import sys, polars as pl\n"
        "from saber_store.database import DuckDBStore, Lineage\n"
        f"store = DuckDBStore(database={str(db)!r})\n"
        "for i in range(15):\n"
        "    frame = pl.DataFrame({'writer': [sys.argv[1]] * 1000, 'i': list(range(1000))})\n"
        "    store.write_table(f't_{sys.argv[1]}_{i}', frame, Lineage('r', 'a', 'c', 'v'))\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, w]) for w in ("a", "b")]
    for p in procs:
        assert p.wait(timeout=120) == 0
    store = DuckDBStore(database=str(db))
    for w in ("a", "b"):
        for i in range(15):
            assert store.read_table(f"t_{w}_{i}")["i"].sum() == sum(range(1000))


def test_embedding_cache_waits_for_another_process_holding_the_file(tmp_path):
    """Two steps of a multiprocess run touching the embedding cache at once: the one that finds
    the file locked waits for it (a bare duckdb.connect fails at once: the bug it replaced)."""
    import duckdb
    import numpy as np

    from saber_llm.embeddings.cache import EmbeddingCache

    path = tmp_path / "cache" / "eval_cache.duckdb"
    warm = EmbeddingCache(path)
    warm.embed("m", ["warm"], lambda t: np.ones((len(t), 3)))
    assert warm.flush() == 1
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, time; c = duckdb.connect({str(path)!r}); print('held', flush=True); "
            "time.sleep(3); c.close()",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(duckdb.IOException, match="lock"):
        duckdb.connect(str(path))
    cache = EmbeddingCache(path)
    cache.embed("m", ["a", "b"], lambda t: np.arange(3 * len(t), dtype=float).reshape(len(t), 3))
    start = time.monotonic()
    assert cache.flush() == 2
    assert time.monotonic() - start > 1.0  # it waited for the holder to let go
    assert holder.wait(timeout=30) == 0
    again = EmbeddingCache(path)
    assert again.preload("m", ["a", "b"]) == 2


class FakeChatServer(BaseHTTPRequestHandler):
    """Chat completions with scripted answers; remembers the Authorization headers it saw."""

    seen_keys: ClassVar[list[str]] = []

    def log_message(self, *args):  # keep test output quiet
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeChatServer.seen_keys.append(self.headers.get("Authorization", ""))
        text = body["messages"][-1]["content"]
        if "Candidate topics" in text:
            ids = [
                line.split(": ")[0]
                for line in text.split("Candidate topics (id: name):\n")[1].splitlines()
                if ": " in line
            ]
            answer = json.dumps(ids[:2])
        elif "Candidate 1:" in text:
            answer = "\\boxed{1}" if len(text) % 2 else "\\boxed{2}"
        else:
            answer = "Use a parity argument and then induct on the number of terms."
        payload = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": answer},
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        }
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.mark.e2e
def test_api_key_appears_in_no_table_log_or_export(tmp_path, monkeypatch):
    secret = "sk-test-SABER-SECRET-0123456789"
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeChatServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("SABER_API_KEY", secret)
        home, dagster_home = tmp_path / "home", tmp_path / "dagster_home"
        dagster_home.mkdir()
        build = load_build_config(
            "tiny",
            home=str(home),
            summaries="llm",
            topics="llm",
            judge="llm",
            llm_backend="openai",
            llm_model="fake-model",
            corpus_limit=30,
            llm_base_url=f"http://127.0.0.1:{server.server_address[1]}/v1",
        )
        with dg.instance_for_test(temp_dir=str(dagster_home)) as instance:
            result = run_build(build, instance)
            assert result.success
            logs = "\n".join(
                str(e.user_message) + str(e.dagster_event) for e in instance.all_logs(result.run_id)
            )
        assert FakeChatServer.seen_keys and all(
            k == f"Bearer {secret}" for k in FakeChatServer.seen_keys
        )
        assert secret not in logs
        store = DuckDBStore(database=str(home / "saber.duckdb"))
        tables = store.query("SELECT table_name FROM information_schema.tables")["table_name"]
        for table in tables:
            dump = store.read_table(table, lineage=True).write_ndjson()
            assert secret not in dump, table
        for root in (home, dagster_home):
            for path in root.rglob("*"):
                if path.is_file():
                    assert secret.encode() not in path.read_bytes(), path
    finally:
        server.shutdown()
