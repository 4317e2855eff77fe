"""The ``saber`` command.

    saber build [--profile P] [--debug]
                                       materialize the whole asset graph (in a child process:
                                       SIGTERM/SIGINT stop it and cancel its SLURM jobs, and
                                       it stops when this process dies); a line per step on
                                       the terminal, the full log under <home>/logs/
    saber build --from-manifest M      build again from an export's manifest.json
    saber build --reference-home DIR   build, then print its labels' agreement with DIR's
    saber export --out DIR [--format saber|mteb|sabermath] [--benchmark DIR]
                                       write the export of the last build to a folder (saber),
                                       or an export folder as an MTEB reranking task (mteb) or
                                       in the released SaberMath schema (sabermath)
    saber lineage --query Q [--doc D]  print the provenance chain of a rating
    saber synth --out DIR              write the seeded paper-shaped synthetic input
    saber plan [--json]                what a build would reuse, recompute or make new, and why
                                       (with the LLM calls that would miss the cache)
    saber slurm check [--profile P]    check the cluster profile (SSH, partition, GPU type,
                                       payload environment, a one-minute test job)
    saber catalog                      print the asset map (asset, module, group, checks)
    saber docs                         rewrite the generated documents (docs/configuration.md,
                                       the README's asset maps)
    saber eval …                       evaluate retrievers (``saber eval -h``; no Dagster)
    saber evaluate --retriever SPEC    evaluate retrievers as partitions of retriever_runs (the
                                       UI shows them; SLURM jobs under execution: slurm), then
                                       refresh the leaderboard
    saber study tournament …           simulation study (``saber study tournament -h``; no Dagster)
    saber study budget …               label scales × designs × judge budgets (``-h``; no Dagster)
    saber judge probe …                the build's judge on a sample of its pool pairs: test–retest,
                                       order swaps, position bias by rating gap, the study's judge
                                       fitted to it (``saber judge probe -h``)
    saber judge agree A B …            agreement of two label sources (homes, exports, run or
                                       qrels files) on pairs and leaderboard (``-h``; no Dagster)
    saber judge qrels-from-champ …     qrels grading the export's pairs by shared CHAMP concepts

Dagster is imported only by the subcommands that need it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand but ``eval`` and ``study`` (which parse their own)."""
    parser = argparse.ArgumentParser(prog="saber", description="SABER platform command line")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("eval", help="evaluate retrievers on a benchmark folder (saber eval -h)")
    sub.add_parser("evaluate", help="evaluate retrievers as partitions (saber evaluate -h)")
    study = sub.add_parser("study", help="reproducible simulation studies")
    studies = study.add_subparsers(dest="study")
    studies.add_parser(
        "tournament",
        help="Swiss vs information-gain vs round robin, triage (saber study tournament -h)",
    )
    studies.add_parser("budget", help="label scales × designs × budgets (saber study budget -h)")
    judge = sub.add_parser("judge", help="measure the build's judge")
    judges = judge.add_subparsers(dest="judge")
    judges.add_parser(
        "probe", help="consistency and position bias of the judge (saber judge probe -h)"
    )
    judges.add_parser("agree", help="agreement of two label sources (saber judge agree -h)")
    judges.add_parser(
        "qrels-from-champ", help="qrels from CHAMP's concepts (saber judge qrels-from-champ -h)"
    )
    p_build = sub.add_parser("build", help="materialize the whole asset graph in-process")
    p_build.add_argument("--profile", help="profile name or YAML path (default: SABER_PROFILE)")
    p_build.add_argument(
        "--from-manifest",
        type=Path,
        help="build again from an export's manifest.json (its settings, inputs checked)",
    )
    p_build.add_argument(
        "--debug",
        action="store_true",
        help="show the whole log (Dagster's events, tracebacks) on the terminal as it grows",
    )
    p_build.add_argument(
        "--reference-home",
        type=Path,
        help="after the build, print its agreement with this build's labels (e.g. a full-judge "
        "build of the same profile; saber judge agree)",
    )
    # the supervised child (saber_cli.supervise): run the build itself, as run --run-id of the
    # supervisor --supervisor, logging to --log; --reap: end the run of a worker whose
    # supervisor died (process group --group)
    for hidden in ("--run-id", "--log"):
        p_build.add_argument(hidden, help=argparse.SUPPRESS)
    for hidden in ("--supervisor", "--group"):
        p_build.add_argument(hidden, type=int, help=argparse.SUPPRESS)
    for hidden in ("--worker", "--reap"):
        p_build.add_argument(hidden, action="store_true", help=argparse.SUPPRESS)
    p_export = sub.add_parser("export", help="write the export of the last build to a folder")
    p_export.add_argument("--out", type=Path, required=True)
    p_export.add_argument("--profile")
    p_export.add_argument(
        "--format",
        choices=sorted(EXPORT_FORMATS),
        default="saber",
        help="saber: the build's export (from its store); mteb: an MTEB reranking task, "
        "sabermath: the released SaberMath schema (datasets folders and parquet), both written "
        "from an export folder",
    )
    p_export.add_argument(
        "--benchmark", type=Path, help="export folder to convert (default: the build's export)"
    )
    p_export.add_argument(
        "--setting", default="statement-full", help="task setting of the MTEB format"
    )
    p_synth = sub.add_parser("synth", help="write the seeded paper-shaped synthetic input")
    p_synth.add_argument("--out", type=Path, required=True)
    p_synth.add_argument("--scale", type=float, default=1.0, help="1.0 = paper size (283K docs)")
    p_synth.add_argument("--seed", type=int, default=0)
    p_plan = sub.add_parser("plan", help="what a build would reuse or recompute, and why")
    p_plan.add_argument("--profile", help="profile name or YAML path (default: SABER_PROFILE)")
    p_plan.add_argument("--json", action="store_true", help="one JSON object per asset")
    p_plan.add_argument(
        "--all", action="store_true", help="the evaluation group too (retriever runs, leaderboard)"
    )
    p_slurm = sub.add_parser("slurm", help="the build's SLURM cluster")
    p_check = p_slurm.add_subparsers(dest="slurm", required=True).add_parser(
        "check", help="SSH, partition, GPU type, payload environment and a one-minute test job"
    )
    p_check.add_argument("--profile", help="profile name or YAML path (default: SABER_PROFILE)")
    sub.add_parser("catalog", help="print the asset map of the README (from the Definitions)")
    sub.add_parser("docs", help="rewrite docs/configuration.md and the README's asset maps")
    p_lineage = sub.add_parser("lineage", help="print the provenance chain of a rating")
    p_lineage.add_argument("--query", required=True, help="query id")
    p_lineage.add_argument("--doc", help="candidate doc id (default: the top-rated candidate)")
    p_lineage.add_argument("--profile")
    return parser


def _export_saber(args: argparse.Namespace) -> dict[str, int]:
    """The build's export, written from its DuckDB store."""
    from saber_assets.export.writer import write_export
    from saber_cli.config_errors import load_config
    from saber_store.database import DuckDBStore

    build = load_config("export", args.profile)
    return write_export(DuckDBStore(database=str(build.database_path)), args.out)


def _export_mteb(args: argparse.Namespace) -> dict[str, int]:
    """An export folder (default: the build's) as an MTEB task; Dagster-free."""
    from saber_eval.mteb_task import write_mteb_task
    from saber_store.paths import SaberPaths

    source = args.benchmark or SaberPaths.for_profile(args.profile).export_dir
    return write_mteb_task(source, args.out, args.setting)


def _export_sabermath(args: argparse.Namespace) -> dict[str, int]:
    """An export folder (default: the build's) in the released SaberMath schema; Dagster-free."""
    from saber_eval.sabermath_format import write_sabermath
    from saber_store.paths import SaberPaths

    return write_sabermath(
        args.benchmark or SaberPaths.for_profile(args.profile).export_dir, args.out
    )


# --format NAME → writer(args) -> {file: rows}; a new format is one more entry.
EXPORT_FORMATS = {"saber": _export_saber, "mteb": _export_mteb, "sabermath": _export_sabermath}


def _export(args: argparse.Namespace) -> int:
    for name, rows in EXPORT_FORMATS[args.format](args).items():
        print(f"{args.out / name}: {rows} rows")
    return 0


def _synth(args: argparse.Namespace) -> int:
    from saber_core.inputs.synth import write_synthetic

    for name, path in write_synthetic(args.out, args.scale, args.seed).items():
        print(f"{name}: {path}")
    print(
        f"build on it with SABER_CORPUS={args.out / 'corpus.parquet'} "
        f"SABER_ONTOLOGY={args.out / 'ontology.parquet'}, or use the `synthetic` profile "
        "(which generates the same input in-process)"
    )
    return 0


def _slurm_check(profile: str | None) -> int:
    """Print each check of the build's cluster profile; exit 1 when one fails."""
    from saber_cli.config_errors import load_config
    from saber_slurm import slurm_dispatch_from_build
    from saber_slurm.check import check_profile

    plan = load_config("slurm check", profile).plan()
    settings = slurm_dispatch_from_build(plan)
    print(f"cluster profile {plan.slurm.profile!r} (partition {settings.partition!r})")
    checks = check_profile(settings)
    for result in checks:
        print(result.line())
    return 0 if all(c.ok for c in checks) else 1


def _build(args: argparse.Namespace) -> int:
    """``build``: the supervisor (of a profile's or a manifest's settings), its worker, or the
    reaper of a worker whose supervisor died (:mod:`saber_cli.supervise`)."""
    if args.reap:
        from saber_cli.supervise import reap_orphan

        return reap_orphan(args.profile, args.run_id, args.group)
    if args.from_manifest:
        from saber_cli.rebuild import rebuild_main

        return rebuild_main(args.from_manifest, args.debug)
    if not args.worker:
        from saber_cli.supervise import supervise_build

        status = supervise_build(args.profile, args.debug)
        if status == 0 and args.reference_home:
            from saber_cli.reference import agree_with_reference

            return agree_with_reference(args.profile, args.reference_home)
        return status
    from saber_cli.worker import run_worker, watch_supervisor

    watch_supervisor(args)  # first, before the heavy imports of the build
    return run_worker(args)


def _lineage(args: argparse.Namespace) -> int:
    from saber_cli.config_errors import load_config
    from saber_cli.lineage import lineage_report
    from saber_store.database import DuckDBStore

    build = load_config("lineage", args.profile)
    store = DuckDBStore(database=str(build.database_path))
    print(lineage_report(store, args.query, args.doc))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``saber`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["eval"]:
        from saber_eval.cli import eval_main
        from saber_eval.engines.base import EngineError

        try:
            return eval_main(argv[1:])
        except EngineError as exc:  # a retriever that cannot run as configured: one line
            raise SystemExit(f"saber eval: {exc}") from None
    if argv[:1] == ["evaluate"]:
        from saber_cli.evaluate import evaluate_main

        return evaluate_main(argv[1:])
    if argv[:2] == ["study", "tournament"]:
        from saber_study.cli import study_main

        return study_main(argv[2:])
    if argv[:2] == ["study", "budget"]:
        from saber_study.label_budget.cli import budget_main

        return budget_main(argv[2:])
    if argv[:2] == ["judge", "probe"]:
        from saber_cli.judge_probe import probe_main

        return probe_main(argv[2:])
    if argv[:2] == ["judge", "agree"]:
        from saber_cli.judge_agree import agree_main

        return agree_main(argv[2:])
    if argv[:2] == ["judge", "qrels-from-champ"]:
        from saber_cli.judge_agree import qrels_main

        return qrels_main(argv[2:])
    args = build_parser().parse_args(argv)
    if args.command == "synth":
        return _synth(args)
    if args.command == "export":
        return _export(args)
    if args.command == "catalog":
        from saber_cli.catalog import asset_map
        from saber_core.construction import METHODS

        for method in METHODS:
            print(f"method: {method}\n\n{asset_map(method)}\n")
        return 0
    if args.command == "plan":
        from saber_cli.config_errors import load_config
        from saber_cli.plan import plan_main

        return plan_main(load_config("plan", args.profile), args.json, args.all)
    if args.command == "slurm":
        return _slurm_check(args.profile)
    if args.command == "docs":
        from saber_cli.generated_docs import write_generated

        for path in write_generated():
            print(f"rewrote {path}")
        return 0
    if args.command == "build":
        return _build(args)
    if args.command == "judge":
        print("saber judge: name a subcommand: probe, agree, qrels-from-champ", file=sys.stderr)
        return 2
    return _lineage(args)


if __name__ == "__main__":
    sys.exit(main())
