"""``saber judge agree A B`` and ``saber judge qrels-from-champ`` (no Dagster).

``agree`` compares two label sources (a SABER home or export, a TREC run file of a pointwise
judge, a TREC qrels file: :mod:`saber_eval.agreement_sources`) on the pairs both label and on
the leaderboard of the build's evaluated retrievers, prints the card-style table with 95%
intervals, the coverage and the system-level τ-b / τ_AP, and writes ``agreement.json`` and two
plots to ``--out`` (default ``<SABER home>/agreement``; :mod:`saber_eval.agreement`).

``qrels-from-champ`` writes a qrels file grading every (query, candidate) pair of a build's
export by the CHAMP concepts the two problems share (docs/validity.md,
:func:`saber_eval.agreement_sources.champ_qrels`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from saber_eval.agreement import (
    AgreementSettings,
    agreement_report,
    parse_cuts,
    summary_lines,
    write_outputs,
)
from saber_eval.agreement_sources import (
    CHAMP_GRADES,
    SourceError,
    champ_qrels,
    format_qrels,
    load_source,
)
from saber_eval.benchmark import SETTINGS
from saber_eval.loading import load_benchmark
from saber_store.paths import SaberPaths


def build_parser() -> argparse.ArgumentParser:
    """The ``saber judge agree`` arguments (defaults = :class:`AgreementSettings`)."""
    d = AgreementSettings()
    p = argparse.ArgumentParser(
        prog="saber judge agree",
        description="Agreement of two label sources on the pairs both label and on the "
        "leaderboard of the build's evaluated retrievers.",
    )
    p.add_argument("a", help="source A: SABER home, export folder, [run:]RUN or [qrels:]QRELS")
    p.add_argument("b", help="source B (the same kinds)")
    p.add_argument(
        "--cuts",
        type=parse_cuts,
        default=d.cuts,
        help="cuts onto discrete levels (default 0.5,1.5 → 0/1/2; 0–5 ratings: 0.5,…,4.5)",
    )
    p.add_argument("--cuts-a", type=parse_cuts, help="A's cuts when its scale differs")
    p.add_argument("--cuts-b", type=parse_cuts, help="B's cuts (as many as A's)")
    p.add_argument("--bootstrap", type=int, default=d.bootstrap, help="query resamples")
    p.add_argument("--seed", type=int, default=d.seed, help="bootstrap seed")
    p.add_argument("--setting", choices=list(SETTINGS), default=d.setting, help="run setting")
    p.add_argument("--runs", type=Path, help="runs folder (default: the export's eval runs)")
    p.add_argument("--out", type=Path, help="output folder (default <SABER home>/agreement)")
    return p


def agree_main(argv: Sequence[str] | None = None) -> int:
    """Run ``saber judge agree``; 2 on an unreadable source."""
    args = build_parser().parse_args(argv)
    settings = AgreementSettings(
        cuts=args.cuts_a or args.cuts,
        cuts_b=args.cuts_b or args.cuts,
        bootstrap=args.bootstrap,
        seed=args.seed,
        setting=args.setting,
        runs_dir=args.runs,
    )
    try:
        a, b = load_source(args.a), load_source(args.b)
        report, common = agreement_report(a, b, settings)
    except (SourceError, ValueError, FileNotFoundError) as exc:
        print(f"saber judge agree: {exc}", file=sys.stderr)
        return 2
    out = args.out or SaberPaths.for_profile().home / "agreement"
    print("\n".join(summary_lines(report)))
    for path in write_outputs(report, common, out):
        print(f"wrote {path}")
    return 0


def qrels_parser() -> argparse.ArgumentParser:
    """The ``saber judge qrels-from-champ`` arguments."""
    p = argparse.ArgumentParser(
        prog="saber judge qrels-from-champ",
        description=f"Grade a build's (query, candidate) pairs by CHAMP's human concept "
        f"annotations ({CHAMP_GRADES}; pairs without annotated concepts are left out).",
    )
    p.add_argument("--home", help="SABER home or export folder (default: SABER_HOME)")
    p.add_argument("--out", type=Path, required=True, help="qrels file to write")
    return p


def qrels_main(argv: Sequence[str] | None = None) -> int:
    """Run ``saber judge qrels-from-champ``."""
    from saber_store.sources import champ_concepts

    args = qrels_parser().parse_args(argv)
    home = Path(args.home) if args.home else SaberPaths.for_profile().home
    folder = home / "export" if (home / "export" / "queries.jsonl").exists() else home
    labels = champ_qrels(load_benchmark(folder), champ_concepts())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(format_qrels(labels))
    pairs = sum(len(v) for v in labels.values())
    print(f"wrote {args.out}: {pairs} pairs of {len(labels)} queries ({CHAMP_GRADES})")
    return 0
