"""``saber study budget --choose-c``: the chosen C is the grid's argmin of the headline error,
each C's rows are that C's own study, ties go to the smaller C, and the CLI writes the record the
build reads."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from saber_study.label_budget import choose_c as cc
from saber_study.label_budget.cli import budget_main, default_out
from saber_study.label_budget.designs import DesignConfig
from saber_study.label_budget.study import BudgetStudyConfig, run_budget_study

GRID = (0.3, 3.0, 30.0)


def tiny() -> BudgetStudyConfig:
    design = DesignConfig(
        budgets=(60, 100), top_k=12, designs=("swiss",), presentations=("seeded_random",)
    )
    return BudgetStudyConfig(
        seeds=2, queries=8, candidates=40, chunk=8, bootstrap=20, scales=("minmax", "logit"),
        design=design,
    )  # fmt: skip


@pytest.fixture(scope="module")
def chosen():
    return cc.choose_c(tiny(), GRID)


def test_the_chosen_c_is_the_argmin_of_the_best_row_at_750_calls(chosen):
    record = chosen["choose_c"]
    assert record["grid"] == list(GRID) and [e["C"] for e in record["per_c"]] == list(GRID)
    best = {}
    for entry in record["per_c"]:
        errors = [r["abs_dndcg"] for r in entry["rows"] if r["calls_per_query"] <= 750]
        assert len(errors) == len(entry["rows"]) == 2 * 2  # scales × budgets
        best[entry["C"]] = min(errors)
        assert entry["abs_dndcg"] == best[entry["C"]]
    expected = sorted(best, key=lambda c: (best[c], c))[0]
    assert record["C"] == record["chosen"]["C"] == expected
    assert len(set(best.values())) == len(GRID)  # C changes the fit: the grid is not flat
    assert chosen["rows"] == record["per_c"][GRID.index(expected)]["rows"]
    assert chosen["config"]["design"]["C"] == expected


def test_each_c_is_its_own_study_and_the_interval_is_the_mean_plus_minus_2se(chosen):
    entry = chosen["choose_c"]["per_c"][1]
    alone = run_budget_study(replace(tiny(), design=replace(tiny().design, C=GRID[1])))
    assert entry["rows"] == alone["rows"]
    within = [r for r in alone["rows"] if r["calls_per_query"] <= 750]
    row = next(r for r in within if r["abs_dndcg"] == min(x["abs_dndcg"] for x in within))
    assert (entry["design"], entry["scale"], entry["calls_per_query"]) == (
        row["design"], row["scale"], row["calls_per_query"]
    )  # fmt: skip
    lo, hi = entry["interval"]
    assert lo == pytest.approx(row["abs_dndcg"] - 1.96 * row["abs_dndcg_se"])
    assert hi == pytest.approx(row["abs_dndcg"] + 1.96 * row["abs_dndcg_se"])
    assert lo < row["abs_dndcg"] < hi


def _fake_study(errors: dict[float, float]):
    def run(cfg: BudgetStudyConfig, log=None) -> dict:
        e = errors[cfg.design.C]
        rows = [
            {"design": "swiss", "presentation": "pool_order", "scale": "minmax",
             "calls_per_query": b, "abs_dndcg": e + extra, "abs_dndcg_se": float("nan")}
            for b, extra in ((300, 0.01), (750, 0.0), (1500, -0.5))
        ]  # fmt: skip
        return {"config": {"C": cfg.design.C}, "rows": rows}

    return run


def test_ties_go_to_the_smaller_c_and_rows_above_750_calls_do_not_count(monkeypatch):
    monkeypatch.setattr(cc, "run_budget_study", _fake_study({100.0: 0.02, 1.0: 0.02, 3.0: 0.03}))
    record = cc.choose_c(BudgetStudyConfig(), (100.0, 1.0, 3.0))["choose_c"]
    assert record["C"] == 1.0
    assert record["chosen"]["calls_per_query"] == 750 and record["chosen"]["interval"] is None
    monkeypatch.setattr(cc, "run_budget_study", _fake_study({1.0: 0.03, 10.0: 0.02}))
    assert cc.choose_c(BudgetStudyConfig(), (1.0, 10.0))["choose_c"]["C"] == 10.0


def test_cli_writes_the_chosen_c_file_and_the_table(tmp_path, capsys):
    argv = ["--quick", "--quiet", "--choose-c", "--c-grid", "1,10", "--designs", "swiss",
            "--scales", "minmax,logit", "--out", str(tmp_path)]  # fmt: skip
    assert budget_main(argv) == 0
    printed = capsys.readouterr().out
    results = json.loads((tmp_path / "budget.json").read_text())
    record = json.loads((tmp_path / cc.CHOSEN_FILE).read_text())
    assert record["C"] == results["choose_c"]["C"] in (1.0, 10.0)
    assert record["grid"] == [1.0, 10.0] and all("rows" not in e for e in record["per_c"])
    assert record["config"] == results["config"] and results["config"]["design"]["C"] == record["C"]
    c = record["chosen"]
    assert f"**Chosen C = {record['C']:g}**: {c['abs_dndcg']:.4f}" in printed
    assert f"{c['interval'][0]:.4f}–{c['interval'][1]:.4f}" in printed
    assert not math.isnan(c["abs_dndcg_se"])


def test_cli_refuses_a_choice_without_a_budget_at_750_calls(tmp_path, capsys):
    argv = ["--choose-c", "--budgets", "800", "--seeds", "1", "--queries", "4",
            "--out", str(tmp_path)]  # fmt: skip
    assert budget_main(argv) == 2
    assert "needs a budget of at most 750" in capsys.readouterr().err
    assert budget_main(["--quick", "--choose-c", "--c-grid", "0,1", "--out", str(tmp_path)]) == 2
    assert not (tmp_path / cc.CHOSEN_FILE).exists()


def test_default_out_is_where_the_build_looks(monkeypatch, tmp_path):
    from saber_store.paths import SaberPaths

    monkeypatch.setenv("SABER_HOME", str(tmp_path))
    assert (default_out() / cc.CHOSEN_FILE).resolve() == SaberPaths.at(tmp_path).chosen_c
