"""``saber study budget``: run the label-budget study and write ``budget.json``, ``budget.md``
(the generated part of docs/budget-study.md) and ``budget.png`` into ``--out`` (default
``$SABER_HOME/study/budget``), printing the README section (``--choose-c``: the study at every
C of a grid, the chosen C's tables, and ``chosen_c.json`` for the build's ``rating.c: auto``);
or, with ``--markdown FILE``, print (``--readme README.md``: rewrite in place) the README section
of an existing ``budget.json`` without simulating."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from saber_study.label_budget.choose_c import C_GRID, CHOSEN_FILE, choose_c, chosen_file
from saber_study.label_budget.designs import DesignConfig
from saber_study.label_budget.judge_fit import SIGNALS, JudgeFitError, judge_from_probe
from saber_study.label_budget.report import full_markdown, plot, readme_section, replace_section
from saber_study.label_budget.study import BudgetStudyConfig, run_budget_study
from saber_study.label_budget.world import JudgeModel

QUICK = {"seeds": 2, "queries": 24, "candidates": 40, "chunk": 24, "bootstrap": 50}
QUICK_DESIGN = {"budgets": (60, 100), "top_k": 12}


def default_out() -> Path:
    """``$SABER_HOME/study/budget`` (``.saber`` when SABER_HOME is unset)."""
    return Path(os.environ.get("SABER_HOME") or ".saber") / "study" / "budget"


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def build_parser() -> argparse.ArgumentParser:
    """The ``saber study budget`` arguments (defaults = :class:`BudgetStudyConfig`)."""
    d, j, g = BudgetStudyConfig(), JudgeModel(), DesignConfig()
    p = argparse.ArgumentParser(
        prog="saber study budget",
        description="Label scales × judging designs × judge budgets against true labels "
        "(docs/budget-study.md).",
    )
    p.add_argument("--out", type=Path, default=None, help="output folder (see module doc)")
    p.add_argument("--quick", action="store_true", help="a seconds-long smoke run (tests)")
    p.add_argument("--seeds", type=int, default=d.seeds)
    p.add_argument("--first-seed", type=int, default=d.first_seed)
    p.add_argument("--queries", type=int, default=d.queries)
    p.add_argument("--candidates", type=int, default=d.candidates)
    p.add_argument("--bootstrap", type=int, default=d.bootstrap)
    p.add_argument("--budgets", type=_ints, default=g.budgets, help="comma list of calls")
    p.add_argument("--designs", type=_names, default=g.designs, help="comma list")
    p.add_argument("--presentations", type=_names, default=g.presentations, help="comma list")
    p.add_argument("--scales", type=_names, default=d.scales, help="comma list")
    p.add_argument(
        "--C", type=float, default=g.C, help="BT L2 strength (published: 1; --choose-c: the grid's)"
    )
    for field in ("item_bias", "pair_noise", "call_noise", "intransitivity", "bias_peak"):
        p.add_argument(f"--{field.replace('_', '-')}", type=float, default=getattr(j, field))
    p.add_argument(
        "--judge-fit",
        type=Path,
        default=None,
        help="judge-probe.json of `saber judge probe`: the study's judge fitted to a real judge "
        "(replaces the judge flags above)",
    )
    p.add_argument(
        "--judge-fit-condition",
        default="configured",
        help="configured (the judge as built) or sampled (a greedy judge at its probe temperature)",
    )
    p.add_argument(
        "--judge-fit-signal",
        choices=tuple(SIGNALS),
        default="estimate",
        help="the fitted signal, or the upper end of its 95%% interval (the most the probe allows)",
    )
    p.add_argument(
        "--choose-c",
        action="store_true",
        help="run the study at every C of --c-grid and keep the C with the smallest error at "
        "<= 750 calls (writes chosen_c.json, read by the build's rating.c: auto)",
    )
    p.add_argument(
        "--c-grid",
        type=_floats,
        default=C_GRID,
        help=f"comma list of C for --choose-c (default {','.join(f'{c:g}' for c in C_GRID)})",
    )
    p.add_argument("--markdown", type=Path, default=None, help="budget.json: print its section")
    p.add_argument("--readme", type=Path, default=None, help="with --markdown: rewrite in place")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p


def config_from(args: argparse.Namespace) -> BudgetStudyConfig:
    """The study configuration of parsed arguments (``--quick`` overrides the sizes)."""
    judge = replace(
        JudgeModel(),
        item_bias=args.item_bias,
        pair_noise=args.pair_noise,
        call_noise=args.call_noise,
        intransitivity=args.intransitivity,
        bias_peak=args.bias_peak,
    )
    design = DesignConfig(
        budgets=tuple(args.budgets),
        designs=tuple(args.designs),
        presentations=tuple(args.presentations),
        C=args.C,
    )
    sizes = {
        "seeds": args.seeds,
        "queries": args.queries,
        "candidates": args.candidates,
        "bootstrap": args.bootstrap,
        "chunk": min(BudgetStudyConfig().chunk, args.queries),
    }
    if args.quick:
        sizes = dict(QUICK)
        design = replace(design, **QUICK_DESIGN)
    source = ""
    if args.judge_fit is not None:
        judge, source = judge_from_probe(
            args.judge_fit, args.judge_fit_condition, args.judge_fit_signal, judge
        )
    return BudgetStudyConfig(
        first_seed=args.first_seed,
        scales=tuple(args.scales),
        design=design,
        judge=judge,
        judge_source=source,
        **sizes,
    )


def check(cfg: BudgetStudyConfig) -> str | None:
    """What makes a configuration unusable (None when it is fine)."""
    from saber_core.rating.scales import SCALES
    from saber_study.label_budget.designs import DESIGNS, PRESENTATIONS

    for given, known, what in (
        (cfg.design.designs, DESIGNS, "designs"),
        (cfg.design.presentations, PRESENTATIONS, "presentations"),
        (cfg.scales, SCALES, "scales"),
    ):
        unknown = sorted(set(given) - set(known))
        if unknown or not given:
            return f"{what} must be a non-empty subset of {', '.join(known)} (got {unknown})"
    if min(cfg.design.budgets) <= cfg.candidates:
        return "every budget must exceed the number of candidates"
    if cfg.queries < 2 or cfg.seeds < 1:
        return "need at least 2 queries and 1 seed"
    return None


def check_choose_c(cfg: BudgetStudyConfig, grid: tuple[float, ...]) -> str | None:
    """What makes ``--choose-c`` unusable (None when it is fine)."""
    from saber_study.label_budget.report import GOAL

    if not grid or min(grid) <= 0:
        return "--c-grid must be a non-empty list of positive C"
    if min(cfg.design.budgets) > GOAL["calls"]:
        return f"--choose-c needs a budget of at most {GOAL['calls']} calls"
    return None


def budget_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``saber study budget``."""
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    if args.markdown is not None:
        section = readme_section(json.loads(args.markdown.read_text()))
        if args.readme is None:
            print(section)
        else:
            args.readme.write_text(replace_section(args.readme.read_text(), section))
        return 0
    try:
        cfg = config_from(args)
    except JudgeFitError as exc:
        print(f"saber study budget: {exc}", file=sys.stderr)
        return 2
    problem = check(cfg) or (check_choose_c(cfg, args.c_grid) if args.choose_c else None)
    if problem:
        print(f"saber study budget: {problem}", file=sys.stderr)
        return 2
    log = None if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        results = choose_c(cfg, args.c_grid, log) if args.choose_c else run_budget_study(cfg, log)
    out = args.out or default_out()
    out.mkdir(parents=True, exist_ok=True)
    if args.choose_c:
        (out / CHOSEN_FILE).write_text(json.dumps(chosen_file(results), indent=1) + "\n")
    (out / "budget.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "budget.md").write_text(full_markdown(results) + "\n")
    plot(results, out / "budget.png")
    print(readme_section(results))
    if log:
        extra = f", {CHOSEN_FILE}" if args.choose_c else ""
        log(f"wrote {out}/budget.json, budget.md, budget.png{extra}")
    return 0
