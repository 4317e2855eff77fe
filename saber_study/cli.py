"""``saber study tournament``: run the simulation, print the report, write the JSON results
(default ``$SABER_HOME/study/study_tournament.json``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from saber_study.budget import budget_curves
from saber_study.report import markdown
from saber_study.simulation import StudyConfig, run_study


def default_out() -> Path:
    """``$SABER_HOME/study/study_tournament.json`` (``.saber`` when SABER_HOME is unset)."""
    return Path(os.environ.get("SABER_HOME") or ".saber") / "study" / "study_tournament.json"


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def build_parser() -> argparse.ArgumentParser:
    """The ``saber study tournament`` arguments (defaults = :class:`StudyConfig`)."""
    d = StudyConfig()
    p = argparse.ArgumentParser(
        prog="saber study tournament",
        description="Seeded simulation: Swiss-20 vs information-gain vs random vs round robin, "
        "soft outcomes, reliability tools, cheap-judge triage, and budget curves (judge calls vs "
        "leaderboard stability) for Swiss, information and adaptive pairing × presentation order.",
    )
    p.add_argument("--queries", type=int, default=d.n_queries)
    p.add_argument("--players", type=int, default=d.n_players)
    p.add_argument("--rounds", type=int, default=d.n_rounds)
    p.add_argument("--strength-sd", type=float, default=d.strength_sd)
    p.add_argument("--judge-noise", type=float, default=d.judge_noise)
    p.add_argument("--noise-sweep", type=_floats, default=d.noise_sweep, help="comma list")
    p.add_argument("--position-bias", type=float, default=d.position_bias)
    p.add_argument("--soft-sharpness", type=float, default=d.soft_sharpness)
    p.add_argument("--C", type=float, default=d.C, help="BT L2 strength (reference: 1)")
    p.add_argument("--cheap-noise", type=_floats, default=d.cheap_noise, help="comma list")
    p.add_argument("--thresholds", type=_floats, default=d.thresholds, help="comma list")
    p.add_argument(
        "--triage-judge-noise",
        type=_floats,
        default=d.triage_judge_noise,
        help="extra judge noises for the triage summary (comma list, may be empty)",
    )
    p.add_argument("--split-half-repeats", type=int, default=d.split_half_repeats)
    p.add_argument("--bootstrap-queries", type=int, default=d.bootstrap_queries)
    p.add_argument("--bootstrap-draws", type=int, default=d.bootstrap_draws)
    p.add_argument("--curve-position-bias", type=float, default=d.curve_position_bias)
    p.add_argument("--curve-points", type=_ints, default=d.curve_points, help="comma list")
    p.add_argument("--retriever-noise", type=_floats, default=d.retriever_noise, help="comma list")
    p.add_argument("--adaptive-warmup", type=int, default=d.adaptive_warmup)
    p.add_argument("--adaptive-stop-ndcg", type=float, default=d.adaptive_stop_ndcg)
    p.add_argument("--adaptive-min-weight", type=float, default=d.adaptive_min_weight)
    p.add_argument("--adaptive-draws", type=int, default=d.adaptive_draws)
    p.add_argument(
        "--budget-only", action="store_true", help="only the budget curves (skips the rest)"
    )
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--out", type=Path, default=None, help="JSON path (default: see module doc)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p


def study_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``saber study tournament``: prints the Markdown report, writes the JSON."""
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    cfg = StudyConfig(
        n_queries=args.queries,
        n_players=args.players,
        n_rounds=args.rounds,
        strength_sd=args.strength_sd,
        judge_noise=args.judge_noise,
        noise_sweep=tuple(args.noise_sweep),
        position_bias=args.position_bias,
        soft_sharpness=args.soft_sharpness,
        C=args.C,
        cheap_noise=tuple(args.cheap_noise),
        thresholds=tuple(args.thresholds),
        triage_judge_noise=tuple(args.triage_judge_noise),
        split_half_repeats=args.split_half_repeats,
        bootstrap_queries=args.bootstrap_queries,
        bootstrap_draws=args.bootstrap_draws,
        seed=args.seed,
        curve_position_bias=args.curve_position_bias,
        curve_points=tuple(args.curve_points),
        retriever_noise=tuple(args.retriever_noise),
        adaptive_warmup=args.adaptive_warmup,
        adaptive_stop_ndcg=args.adaptive_stop_ndcg,
        adaptive_min_weight=args.adaptive_min_weight,
        adaptive_draws=args.adaptive_draws,
        budget_only=args.budget_only,
    )
    if cfg.n_rounds >= cfg.n_players or cfg.n_players < 4:
        print("saber study tournament: need players >= 4 and rounds < players", file=sys.stderr)
        return 2
    log = None if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    results = {"config": asdict(cfg)} if cfg.budget_only else run_study(cfg, log)
    results["budget_curves"] = budget_curves(cfg, log)
    print(markdown(results))
    out = args.out or default_out()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, allow_nan=True) + "\n")
    if log:
        log(f"wrote {out}")
    return 0
