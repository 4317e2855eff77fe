"""``saber study budget``: the quick mode end to end, budget.json's columns, determinism, and
the README section generated from budget.json."""

from __future__ import annotations

import json

import pytest

from saber_study.label_budget.cli import budget_main
from saber_study.label_budget.report import (
    BEGIN,
    END,
    best_per_budget,
    meets_goal,
    replace_section,
)

COLUMNS = {
    "calls_per_query", "abs_dndcg", "abs_dndcg_shift_removed", "c", "p_tau_ge_095", "tau_ap",
    "sig_agreement", "reversals", "ci_coverage", "seeds",
}  # fmt: skip


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("budget")
    assert budget_main(["--quick", "--quiet", "--out", str(out)]) == 0
    return out, json.loads((out / "budget.json").read_text())


def test_quick_run_writes_every_row_and_file(quick):
    out, results = quick
    assert (out / "budget.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert BEGIN in (out / "budget.md").read_text()
    rows = results["rows"]
    assert len(rows) == 4 * 2 * 6 * 2  # designs × orders × scales × budgets
    assert {(r["design"], r["presentation"], r["scale"], r["calls_per_query"]) for r in rows} == {
        (d, p, s, b)
        for d in ("swiss", "adaptive", "metric_aware", "pointwise_top")
        for p in ("pool_order", "seeded_random")
        for s in ("minmax", "quantile", "zscore", "posterior_gain", "logit", "anchored")
        for b in (60, 100)
    }
    for r in rows:
        assert COLUMNS <= set(r)
        assert r["seeds"] == 2 and r["c"] == pytest.approx(r["abs_dndcg"] * r["calls_per_query"])
        assert 0 <= r["abs_dndcg_shift_removed"] <= 2 * r["abs_dndcg"] + 1e-12
        for key in ("p_tau_ge_095", "sig_agreement", "ci_coverage"):
            assert 0.0 <= r[key] <= 1.0
        assert -1.0 <= r["tau_ap"] <= 1.0 and r["reversals"] >= 0
    assert [r["scale"] for r in results["judge_limit"]] == [
        "minmax", "quantile", "zscore", "posterior_gain", "logit", "anchored"
    ]  # fmt: skip


def test_quick_run_is_deterministic(quick, tmp_path):
    _, first = quick
    assert budget_main(["--quick", "--quiet", "--out", str(tmp_path)]) == 0
    again = json.loads((tmp_path / "budget.json").read_text())
    assert again["rows"] == first["rows"] and again["judge_limit"] == first["judge_limit"]


def test_markdown_section_from_budget_json(quick, tmp_path, capsys):
    out, _ = quick
    assert budget_main(["--markdown", str(out / "budget.json")]) == 0
    section = capsys.readouterr().out.strip()
    assert section.startswith(BEGIN) and section.endswith(END)
    assert "Goal not reached" in section or "Goal reached" in section
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\nbefore\n\n{BEGIN}\nold table\n{END}\n\nafter\n")
    assert budget_main(["--markdown", str(out / "budget.json"), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "old table" not in text and text.startswith("# title\n\nbefore\n\n")
    assert text.endswith(f"{END}\n\nafter\n") and section in text
    with pytest.raises(ValueError, match="no"):
        replace_section("no markers here", section)


def test_goal_and_best_rows_by_hand():
    row = {"calls_per_query": 750, "abs_dndcg": 0.01, "p_tau_ge_095": 0.95,
           "sig_agreement": 0.95, "reversals": 0, "ci_coverage": 0.93}  # fmt: skip
    assert meets_goal(row)
    assert not meets_goal(row | {"calls_per_query": 751})
    assert not meets_goal(row | {"reversals": 1})
    assert not meets_goal(row | {"abs_dndcg": 0.0101})
    rows = [
        {"calls_per_query": 300, "abs_dndcg": 0.05, "id": 1},
        {"calls_per_query": 300, "abs_dndcg": 0.04, "id": 2},
        {"calls_per_query": 150, "abs_dndcg": 0.09, "id": 3},
    ]
    assert [r["id"] for r in best_per_budget(rows)] == [3, 2]
