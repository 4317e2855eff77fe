"""``saber study budget --choose-c``: the Bradley–Terry L2 strength C for the study's judge
(docs/budget-study.md "Choosing C").

The whole study (every design × presentation × scale × budget of the configuration) runs once per
C of the grid, on the same seeds (common random numbers: every C sees the same queries and judge
draws). A C's error is the study's headline figure, the smallest mean |ΔnDCG@10| among its rows
at ≤ 750 calls per query (the goal's budget, :data:`~saber_study.label_budget.report.GOAL`); the
chosen C has the smallest error, ties going to the smaller C. Its interval is the row's mean
± 1.96 standard errors over seeds (None with one seed). The build reads the record
(``chosen_c.json``) under ``rating.c: auto``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from saber_study.label_budget.report import GOAL
from saber_study.label_budget.study import BudgetStudyConfig, run_budget_study

C_GRID = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
METRIC = "abs_dndcg"
CHOSEN_FILE = "chosen_c.json"
Z95 = 1.96
ROW_KEYS = ("design", "presentation", "scale", "calls_per_query", "abs_dndcg", "abs_dndcg_se")


def headline(rows: list[dict]) -> dict | None:
    """The row with the smallest :data:`METRIC` at ≤ ``GOAL['calls']`` calls (ties: the earlier
    row); None when no such row was measured."""
    within = [r for r in rows if r["calls_per_query"] <= GOAL["calls"]]
    return min(within, key=lambda r: r[METRIC]) if within else None


def interval(row: dict) -> list[float] | None:
    """The row's 95% interval of :data:`METRIC` (mean ± 1.96 SE over seeds; None for one seed)."""
    se = row["abs_dndcg_se"]
    if se != se:  # NaN: a single seed
        return None
    return [row[METRIC] - Z95 * se, row[METRIC] + Z95 * se]


def summary(c: float, row: dict) -> dict:
    """One C's headline row: C, the row's name, budget, error, SE and interval."""
    return {"C": c, **{k: row[k] for k in ROW_KEYS}, "interval": interval(row)}


def choose_c(
    cfg: BudgetStudyConfig,
    grid: tuple[float, ...] = C_GRID,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Run the study at every C of ``grid``; the chosen C's results with a ``choose_c`` record
    (module docstring): the grid, each C's headline row and all its rows, the chosen one."""
    log = log or (lambda _msg: None)
    runs = []
    for c in grid:
        results = run_budget_study(replace(cfg, design=replace(cfg.design, C=c)), log)
        best = headline(results["rows"])
        if best is None:
            raise ValueError(f"--choose-c needs a budget of at most {GOAL['calls']} calls")
        log(f"C = {c:g}: {best[METRIC]:.4f} ({best['design']} · {best['scale']})")
        runs.append((c, best, results))
    c, best, results = min(runs, key=lambda run: (run[1][METRIC], run[0]))
    record = {
        "C": c,
        "metric": METRIC,
        "criterion": f"smallest {METRIC} among rows at <= {GOAL['calls']} calls; ties: smaller C",
        "grid": list(grid),
        "judge_source": cfg.judge_source,
        "chosen": summary(c, best),
        "per_c": [{**summary(rc, rb), "rows": rr["rows"]} for rc, rb, rr in runs],
    }
    return {**results, "choose_c": record}


def chosen_file(results: dict) -> dict:
    """The record the build reads (``chosen_c.json``): ``choose_c`` without each C's rows."""
    record = results["choose_c"]
    per_c = [{k: v for k, v in e.items() if k != "rows"} for e in record["per_c"]]
    return {**record, "per_c": per_c, "config": results["config"]}
