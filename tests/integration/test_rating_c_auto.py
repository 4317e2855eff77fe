"""``rating.c: auto``: the plan's Bradley–Terry C is the label-budget study's chosen C (from
``rating.c_file`` or the study's default output under the SABER home), a missing or empty file
is a PlanError naming the fix, and the default C is unchanged."""

from __future__ import annotations

import json
import os

import pytest

from saber_config import PlanError, load_build_config
from saber_config.reads import PlanReads
from saber_study.label_budget.cli import budget_main


@pytest.fixture
def clean_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith("SABER_") and key != "SABER_HOME":
            monkeypatch.delenv(key)
    return monkeypatch


def _write(path, record: dict):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


def test_the_default_c_is_unchanged(clean_env):
    plan = load_build_config("default").plan()
    assert plan.rating.c == 1.0 and plan.rating.written.c == 1.0 and plan.rating.c_file == ""
    assert load_build_config("default", bt_c=0.5).plan().rating.c == 0.5


def test_auto_reads_the_named_file_into_the_plan_and_the_reads(clean_env, tmp_path):
    path = _write(tmp_path / "chosen_c.json", {"C": 30.0, "grid": [1.0, 30.0]})
    plan = load_build_config("default", bt_c="auto", bt_c_file=str(path)).plan()
    assert plan.rating.c == 30.0 and plan.rating.written.c == "auto"
    reads = PlanReads(plan)
    assert reads.rating.c == 30.0 and reads.reads == {"rating.c": 30.0}
    adaptive = load_build_config(
        "default", bt_c="auto", bt_c_file=str(path), pairing="adaptive"
    ).plan()
    assert adaptive.tournament.rules.C == 30.0  # the adaptive pairing's refit uses it too
    budget = _write(tmp_path / "budget.json", {"rows": [], "choose_c": {"C": 3.0}})
    assert load_build_config("default", bt_c="auto", bt_c_file=str(budget)).plan().rating.c == 3.0


def test_auto_reads_the_studys_default_output_under_the_home(clean_env, tmp_path):
    clean_env.setenv("SABER_HOME", str(tmp_path))
    out = tmp_path / "study" / "budget"
    argv = ["--quick", "--quiet", "--choose-c", "--c-grid", "1,10", "--designs", "swiss",
            "--presentations", "seeded_random", "--scales", "minmax"]  # fmt: skip
    assert budget_main(argv) == 0
    written = json.loads((out / "chosen_c.json").read_text())["C"]
    assert written in (1.0, 10.0)
    assert load_build_config("default", bt_c="auto").plan().rating.c == written


def test_auto_without_a_file_names_the_fix(clean_env, tmp_path):
    clean_env.setenv("SABER_HOME", str(tmp_path))
    with pytest.raises(PlanError, match=r"does not exist: run `saber study budget .*--choose-c`"):
        load_build_config("default", bt_c="auto").plan()
    missing = tmp_path / "elsewhere" / "chosen_c.json"
    with pytest.raises(PlanError, match=f"--choose-c` \\(--out {tmp_path / 'elsewhere'}\\)"):
        load_build_config("default", bt_c="auto", bt_c_file=str(missing)).plan()
    plain = _write(tmp_path / "budget.json", {"rows": []})  # a study run without --choose-c
    with pytest.raises(PlanError, match=r"holds no chosen C.*--choose-c"):
        load_build_config("default", bt_c="auto", bt_c_file=str(plain)).plan()
    zero = _write(tmp_path / "zero.json", {"C": 0})
    with pytest.raises(PlanError, match="not a positive number"):
        load_build_config("default", bt_c="auto", bt_c_file=str(zero)).plan()


def test_a_c_file_with_a_numeric_c_is_a_conflict(clean_env, tmp_path):
    path = _write(tmp_path / "chosen_c.json", {"C": 30.0})
    with pytest.raises(PlanError, match=r"rating\.c_file .*conflicts with rating\.c"):
        load_build_config("default", bt_c=2.0, bt_c_file=str(path)).plan()


def test_c_auto_from_the_environment(clean_env, tmp_path):
    path = _write(tmp_path / "chosen_c.json", {"C": 10.0})
    clean_env.setenv("SABER_BT_C", "auto")
    clean_env.setenv("SABER_BT_C_FILE", str(path))
    assert load_build_config("default").plan().rating.c == 10.0
    clean_env.setenv("SABER_BT_C", "3")
    clean_env.delenv("SABER_BT_C_FILE")
    assert load_build_config("default").plan().rating.c == 3.0
