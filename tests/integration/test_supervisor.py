"""``saber build`` as a user runs it: the supervisor and its worker stop cleanly whoever is
killed, a resume needs no waiting, and what the terminal shows is short (the rest is in the log).

Kill tests run the tiny profile through the real command in a session of its own, like a
terminal does, and compare the result with the session's clean tiny build (``tiny_build``);
they, the signal tests and the failure-block tests run whole builds (``e2e``: ``make
test-e2e``).
"""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dagster as dg
import numpy as np
import polars as pl
import pytest
from test_reliability import outputs

from saber_store.build_lock import BuildLockedError, Holder, build_lock

SABER = str(Path(sys.executable).with_name("saber"))
STEP_TIMEOUT_S = 300


class Cli:
    """``saber build`` in a session of its own, its terminal (stdout and stderr) read line by
    line as it comes."""

    def __init__(self, home: Path, *args: str, **env: str) -> None:
        environment = {**os.environ, "SABER_HOME": str(home), "SABER_PROFILE": "tiny", **env}
        environment.pop("DAGSTER_HOME", None)  # the default: the SABER home's dagster_home
        self.proc = subprocess.Popen(
            [SABER, "build", *args],
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout))
        self.reader.start()

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, start: str) -> None:
        """Until a line starting with ``start`` was printed (the build still running)."""
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while not any(line.startswith(start) for line in self.lines):
            assert self.proc.poll() is None, self.text[-3000:]
            assert time.monotonic() < deadline, f"no {start!r} line: {self.text[-3000:]}"
            time.sleep(0.05)

    def finish(self, timeout: float = 900) -> int:
        code = self.proc.wait(timeout=timeout)
        self.reader.join(timeout=10)
        return code


def kill_supervisor_group(cli: Cli, home: Path) -> float:
    """SIGKILL the supervisor's whole process group (the worker has a session of its own);
    returns the seconds until the worker that held the build lock was gone."""
    worker = Holder.parse((home / "build.lock").read_text())
    assert worker is not None and worker.parent == cli.proc.pid, worker
    killed = time.monotonic()
    os.killpg(cli.proc.pid, signal.SIGKILL)
    while worker.state() != "gone":
        assert time.monotonic() - killed < 5, f"worker {worker.pid} still running"
        time.sleep(0.005)
    gone = time.monotonic() - killed
    cli.finish(timeout=10)
    return gone


def run_statuses(home: Path, expected: int) -> list[str]:
    """The statuses of the runs in the home's Dagster instance, once ``expected`` runs ended
    (the reapers mark theirs canceled a few seconds after the kill)."""
    deadline = time.monotonic() + 60
    with dg.DagsterInstance.from_config(str(home / "dagster_home")) as instance:
        while True:
            runs = instance.get_runs()
            if sum(r.is_finished for r in runs) >= expected or time.monotonic() > deadline:
                return sorted(r.status.value for r in runs)
            time.sleep(0.5)


@pytest.mark.e2e
def test_sigkill_of_the_supervisors_group_stops_the_worker_and_a_resume_needs_no_wait(
    tiny_build, tmp_path
):
    """Killed twice with ``kill -9 -PGID`` (a few seconds in, and in the first tournament
    round), each time resumed at once: the worker is gone within a second, no resume is refused,
    finished stages are reused, and the tables equal a clean build's with no duplicate
    judgment; the reapers mark the killed runs canceled in the UI's instance."""
    _, reference, _ = tiny_build
    home = tmp_path / "home"
    gone = {}
    cli = Cli(home)
    for label, after in (("a few seconds in", "  corpus "), ("round 1", "  candidate_pools ")):
        cli.wait_for(after)
        time.sleep(2.0)
        gone[label] = kill_supervisor_group(cli, home)
        started = time.monotonic()
        cli = Cli(home)  # at once: no waiting for the orphan
        cli.wait_for("  corpus ")
        print(f"[timing] {label}: worker gone {gone[label] * 1000:.0f} ms after the SIGKILL; "
              f"resumed build's first step after {time.monotonic() - started:.1f}s")  # fmt: skip
        assert "another SABER build is running" not in cli.text
    assert cli.finish() == 0, cli.text[-3000:]
    assert "took over the build lock of pid" in cli.text
    assert all(f"  {step} " in cli.text for step in ("corpus", "candidate_pools"))
    reused = [line.split()[0] for line in cli.lines if line.rstrip().endswith("reused")]
    assert {"corpus", "ontology", "summaries", "candidate_pools"} <= set(reused), reused
    judgments, ratings = outputs(home)
    key = ["query_id", "round", "slot"]
    assert not judgments.select(pl.struct(key).is_duplicated().any()).item()
    ref_judgments = reference.read_table("judgments").sort(key)
    ref_ratings = reference.read_table("bt_ratings").sort("query_id", "position")
    columns = [*key, "cand_a", "cand_b", "winner", "p_a"]
    assert judgments.select(columns).equals(ref_judgments.select(columns))
    np.testing.assert_allclose(ratings["rating"].to_numpy(), ref_ratings["rating"].to_numpy())
    assert run_statuses(home, expected=3) == ["CANCELED", "CANCELED", "SUCCESS"]
    logs = sorted((home / "logs").glob("build-*.log"))
    assert len(logs) == 3
    reaped = [log for log in logs if "saber build: worker stopped" in log.read_text()]
    assert len(reaped) == 2, [log.read_text()[-2000:] for log in logs]
    assert max(gone.values()) < 1.0, gone


@pytest.mark.e2e
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "worker SIGKILL"])
def test_saber_build_stops_within_seconds(tmp_path, how):
    """A signal to ``saber build`` mid-build ends it within seconds (exit 128 + signal), kills
    the worker (the SABER home's build lock is free at once) and says how to resume; a worker
    killed behind the supervisor's back (the OOM killer) is reported the same way."""
    cli = Cli(tmp_path)
    cli.wait_for("  corpus ")
    worker = Holder.parse((tmp_path / "build.lock").read_text())
    sent = time.monotonic()
    if how == "worker SIGKILL":
        signum = signal.SIGKILL
        os.kill(worker.pid, signum)
    else:
        signum = signal.Signals[how]
        cli.proc.send_signal(signum)
    code = cli.finish(timeout=60)
    elapsed = time.monotonic() - sent
    assert code == 128 + signum, cli.text[-3000:]
    assert elapsed < 10, f"stopped after {elapsed:.1f}s"
    if how == "worker SIGKILL":
        assert f"the build worker (pid {worker.pid}) was killed by SIGKILL" in cli.text
    else:
        assert f"saber build: {how}: stopping run" in cli.text
    assert "run `saber build` again to resume" in cli.text
    assert run_statuses(tmp_path, expected=1) == ["CANCELED"]
    with build_lock(tmp_path):  # the worker is gone: nothing holds the lock
        pass


def test_supervised_worker_runs_the_supervisors_checkout(monkeypatch, tmp_path):
    from saber_cli.supervise import PROJECT_ROOT, worker_command, worker_env

    root = str(Path(__file__).resolve().parents[2])
    assert str(PROJECT_ROOT) == root
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["/elsewhere", root]))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    env = worker_env(tmp_path)
    assert env["PYTHONPATH"].split(os.pathsep) == [root, "/elsewhere"]
    # the UI's instance: the SABER home's dagster_home with the project's dagster.yaml
    assert env["DAGSTER_HOME"] == str(tmp_path / "dagster_home")
    assert (tmp_path / "dagster_home" / "dagster.yaml").read_text() == (
        Path(root) / "dagster.yaml"
    ).read_text()
    assert worker_command("tiny", "r1", Path("/l.log"))[1:] == [
        "-m", "saber_cli.main", "build", "--worker", "--run-id", "r1",
        "--supervisor", str(os.getpid()), "--log", "/l.log", "--profile", "tiny",
    ]  # fmt: skip


WATCHER = """
import os, sys, time
from pathlib import Path
from saber_cli.parent_watch import watch_parent
out = Path(sys.argv[1])
expected = int(sys.argv[2]) if len(sys.argv) > 2 else os.getppid()
def orphaned():  # written whole, then renamed: the test never reads a half-written file
    noticed = time.time()
    part = out.with_name(out.name + ".part")
    part.write_text(f"{noticed}")
    os.replace(part, out)
    os._exit(0)
watch_parent(expected, orphaned)
print("watching", flush=True)
end = time.time() + 30  # never outlive the test
while time.time() < end:
    sum(range(10**6))  # busy in the main thread, as a build is
"""


def test_worker_notices_its_parents_death_at_once(tmp_path):
    """A watcher whose parent dies calls its stop within a fraction of a second, although its
    main thread is busy."""
    out = tmp_path / "orphaned"
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', sys.argv[1], "
         "sys.argv[2]], stdout=subprocess.PIPE, text=True); print(p.stdout.readline(), "
         "flush=True); import time; time.sleep(60)",
         WATCHER, str(out)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert parent.stdout.readline().strip() == "watching"
    killed = time.time()
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 5
    while not out.exists():
        assert time.monotonic() < deadline, "the watcher never noticed"
        time.sleep(0.01)
    time.sleep(0.05)
    delay = float(out.read_text()) - killed
    print(f"[timing] parent death noticed after {delay * 1000:.0f} ms")
    assert delay < 0.5


def test_a_supervisor_already_gone_is_noticed_at_once(tmp_path):
    """The race between fork and ``prctl``: a worker whose expected supervisor is not its
    parent any more stops without waiting for a signal that will never come."""
    out = tmp_path / "orphaned"
    done = subprocess.run(
        [sys.executable, "-c", WATCHER, str(out), "1"], capture_output=True, timeout=30
    )
    assert done.returncode == 0 and out.exists()


def test_stale_lock_of_a_dead_pid_is_taken_over_with_a_notice(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "build.lock").write_text(f"pid {dead.pid}, parent 1, started 2026-01-01T00:00:00")
    notices: list[str] = []
    with build_lock(tmp_path, notices.append):
        holder = Holder.parse((tmp_path / "build.lock").read_text())
        assert holder.pid == os.getpid() and holder.parent == os.getppid()
    assert notices == [
        f"saber build: took over the build lock of pid {dead.pid} (started "
        "2026-01-01T00:00:00), which ended without releasing it; its build resumes here"
    ]
    assert (tmp_path / "build.lock").read_text() == ""  # released cleanly: nothing to take over


def test_lock_of_an_orphaned_worker_is_waited_for(tmp_path):
    """A holder whose parent died (a worker whose supervisor was killed) is stopping: the next
    build waits for it instead of refusing; a live holder is refused at once."""
    hold = (
        "import sys, time; from pathlib import Path; "
        "from saber_store.build_lock import build_lock\n"
        f"with build_lock(Path({str(tmp_path)!r})):\n"
        "    print('locked', flush=True); time.sleep(float(sys.argv[1]))"
    )
    middle = subprocess.Popen(
        [sys.executable, "-c",
         "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', sys.argv[1], "
         "'3'], stdout=subprocess.PIPE, text=True, start_new_session=True); "
         "print(p.stdout.readline().strip(), p.pid, flush=True); sys.stdin.readline()",
         hold],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    word, pid = middle.stdout.readline().split()
    assert word == "locked"
    with pytest.raises(BuildLockedError, match=f"another SABER build is running.*pid {pid}"):
        with build_lock(tmp_path, wait_s=30):  # its parent lives: a running build
            pass
    middle.communicate("\n")  # the holder's parent ends: the holder is an orphan now
    notices: list[str] = []
    started = time.monotonic()
    with build_lock(tmp_path, notices.append, wait_s=30):
        waited = time.monotonic() - started
    assert notices[0].startswith(f"saber build: waiting for the build lock (pid {pid} lost")
    assert 0.5 < waited < 10, waited


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("corpus", "step", "what", "fix"),
    [
        ("bare.jsonl", "summaries", "no corpus row has a 'summary'", "SABER_SUMMARIES=llm"),
        ("nosolution.parquet", "corpus", "the corpus has no column 'solution'", "SABER_CORPUS"),
    ],
)
def test_a_failing_build_prints_one_short_block_and_no_traceback(tmp_path, corpus, step, what, fix):
    """A corpus a user brings with a fault: the terminal shows the steps done and one block —
    what, which rows, the setting that fixes it, the log — and no traceback; the log has the
    traceback and Dagster's event output."""
    from saber_store.sources import champ_corpus

    frame = champ_corpus().head(60)
    path = tmp_path / corpus
    if corpus == "bare.jsonl":
        frame.drop("summary", "topics").write_ndjson(path)
    else:
        frame.drop("solution").write_parquet(path)
    cli = Cli(tmp_path / "home", SABER_CORPUS=str(path))
    assert cli.finish(timeout=300) == 1
    block = cli.text[cli.text.index("saber build failed") :].splitlines()
    assert block[0] == f"saber build failed at step {step}"
    assert block[1].startswith(f"  what: {what}")
    assert block[2].startswith("  rows: 60 of 60 rows")
    assert block[3].startswith("  fix:  ") and fix in block[3]
    (log,) = (tmp_path / "home" / "logs").glob("build-*.log")
    assert block[4] == f"  log:  {log} (the traceback: saber build --debug)"
    assert len(cli.lines) <= 10 and "Traceback" not in cli.text and "dagster" not in cli.text
    logged = log.read_text()
    assert "Traceback (most recent call last)" in logged and "STEP_FAILURE" in logged


def test_console_summary_lists_what_was_left_out_and_where(tmp_path):
    """Dropped judgments, quarantined rows, rejected topic ids and databank exclusions: counted,
    their commonest reasons (row details folded away), and the table to read."""
    from saber_cli.build import summary
    from saber_store.database import DuckDBStore, Lineage

    store = DuckDBStore(database=str(tmp_path / "saber.duckdb"))
    tables = {
        "pool_outcomes": pl.DataFrame({"status": ["ok", "ok", "relaxed"]}),
        "candidate_pools": pl.DataFrame({"relaxed": [False, True, False]}),
        "judgments": pl.DataFrame(
            {
                "outcome": [1.0, None, 0.0, None, None],
                "drop_reason": [None, "no boxed answer", None, "no boxed answer", "empty answer"],
            }
        ),
        "bt_ratings": pl.DataFrame({"query_id": ["q", "q"], "rating": [1.0, 3.0]}),
        "corpus_quarantine": pl.DataFrame(
            {
                "reason": [
                    "duplicate doc_id (first at row 0)",
                    "duplicate doc_id (first at row 4)",
                    "line 9: invalid JSON (expected value)",
                ]
            }
        ),
        "summaries": pl.DataFrame({"summary": ["s"], "summary_status": ["ok"]}),
        "topic_rejections": pl.DataFrame(
            {"topic_id": ["X", "Y"], "reason": ["topic id is not an ontology node"] * 2}
        ),
        "databank_exclusions": pl.DataFrame({"reason": ["blank idea (summary)"]}),
    }
    for name, frame in tables.items():
        store.write_table(name, frame, Lineage("r", name, "c", "v"))
    lines = summary(store, tmp_path / "export").splitlines()
    assert lines[2] == (
        "judgments:  5 (3 dropped: table judgments, column drop_reason: no boxed answer 2, "
        "empty answer 1)"
    )
    assert lines[4:8] == [
        "quarantine: 3 corpus rows (table corpus_quarantine: duplicate doc_id 2, invalid JSON 1)",
        "topics:     2 topic ids rejected, 0 documents without topics (table topic_rejections: "
        "topic id is not an ontology node 2)",
        "databank:   1 documents left out (table databank_exclusions: blank idea 1)",
        f"export:     {tmp_path / 'export'}",
    ]
