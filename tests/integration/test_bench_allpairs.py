"""`make bench`'s all-pairs stage at a tiny scale: it runs, checks itself against the plain
references, and reports the fields bench/results.json promises."""

from __future__ import annotations

import json
import subprocess
import sys

from bench.run import RESULT_TAG


def child(stage: str, data, scale: float = 0.005) -> dict:
    command = [sys.executable, "-m", "bench.run", "--child", stage, "--scale", str(scale),
               "--data", str(data)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=600)
    line = [x for x in done.stdout.splitlines() if x.startswith(RESULT_TAG)][-1]
    return json.loads(line[len(RESULT_TAG) :])


def test_allpairs_stage_is_verified_and_reports_its_fields(tmp_path):
    child("synthesize", tmp_path)
    row = child("allpairs", tmp_path)["allpairs_discovery"]
    n = row["docs"]
    assert n > 1000 and row["pairs"] == n * n
    assert row["verified"] is True
    for key in ("seconds", "peak_rss_mb", "projected_seconds_283k", "reference_seconds"):
        assert row[key] > 0, key
    assert row["projected_seconds_283k"] == row["seconds"] * (283_000 / n) ** 2
    t_bma, t_jac = row["thresholds"]
    assert 0 < t_bma < 1 and 0 < t_jac < 1 and row["eligible_targets"] >= 0
