"""`make bench`'s all-pairs stage at a tiny scale: it runs, checks itself against the plain
references, and reports the fields bench/results.json promises."""

from __future__ import annotations

import json
import math
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


def test_growth_stage_is_verified_against_a_fresh_pass_and_reports_its_fields(tmp_path):
    child("synthesize", tmp_path)
    row = child("allpairs_incremental", tmp_path)["allpairs_incremental"]
    n, new = row["docs"], row["new_docs"]
    assert new == math.ceil(0.01 * (n - new)) and n - new > 1000  # 1 % appended
    assert row["new_pairs"] == (n - new) * new + new * (new + 1) // 2
    assert row["verified"] is True and row["second_pass"] is False
    assert "'rows kept': True" in row["detail"] and "'group counts': True" in row["detail"]
    for key in ("seconds", "full_seconds", "base_seconds", "peak_rss_mb"):
        assert row[key] > 0, key
    assert row["share_of_full"] == row["seconds"] / row["full_seconds"]
