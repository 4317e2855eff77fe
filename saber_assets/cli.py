"""The ``saber`` command: build the benchmark in-process and export it."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import dagster as dg
import polars as pl

from saber_assets.definitions import BUILD_JOB, build_definitions
from saber_assets.export import write_export
from saber_assets.lineage import lineage_report
from saber_resources.config import BuildConfig, load_build_config
from saber_resources.llm.base import LLMBackend
from saber_resources.storage import BuildLockedError, DuckDBStore, build_lock


def _instance() -> dg.DagsterInstance:
    return (
        dg.DagsterInstance.get()
        if os.environ.get("DAGSTER_HOME")
        else dg.DagsterInstance.ephemeral()
    )


def run_build(
    build: BuildConfig,
    instance: dg.DagsterInstance | None = None,
    backend: LLMBackend | None = None,
) -> dg.ExecuteInProcessResult:
    """Materialize the whole graph in-process (run history kept under ``DAGSTER_HOME``)."""
    job = build_definitions(build, backend).resolve_job_def(BUILD_JOB)
    with build_lock(build.home_path):
        return job.execute_in_process(instance=instance or _instance(), raise_on_error=True)


def summary(store: DuckDBStore, export_dir: Path) -> str:
    """A short human summary of a finished build."""
    outcomes = store.read_table("pool_outcomes")
    pools = store.read_table("candidate_pools")
    judgments = store.read_table("judgments")
    ratings = store.read_table("bt_ratings")
    spread = ratings.group_by("query_id").agg(pl.col("rating").std())["rating"]
    status = dict(outcomes.group_by("status").len().sort("status").rows())
    return "\n".join(
        [
            f"queries:    {outcomes.height} ({', '.join(f'{k} {v}' for k, v in status.items())})",
            f"pools:      {pools.height} candidates, {int(pools['relaxed'].sum())} relaxed",
            f"judgments:  {judgments.height} ({judgments['outcome'].null_count()} dropped)",
            f"ratings:    {ratings.height}, mean {ratings['rating'].mean():.2f}, "
            f"mean within-query std {spread.mean():.2f}",
            f"export:     {export_dir}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``saber`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["eval"]:
        from saber_eval import eval_main

        return eval_main(argv[1:])
    if argv[:2] == ["study", "tournament"]:
        from saber_study.tournament import study_main

        return study_main(argv[2:])
    parser = argparse.ArgumentParser(prog="saber", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("eval", help="evaluate retrievers on a benchmark folder (saber eval -h)")
    study = sub.add_parser("study", help="reproducible simulation studies")
    study.add_subparsers(dest="study").add_parser(
        "tournament",
        help="Swiss vs information-gain vs round robin, triage (saber study tournament -h)",
    )
    p_build = sub.add_parser("build", help="materialize the whole asset graph in-process")
    p_build.add_argument("--profile", help="profile name or YAML path (default: SABER_PROFILE)")
    p_export = sub.add_parser("export", help="write the export of the last build to a folder")
    p_export.add_argument("--out", type=Path, required=True)
    p_export.add_argument("--profile")
    p_synth = sub.add_parser("synth", help="write the seeded paper-shaped synthetic input")
    p_synth.add_argument("--out", type=Path, required=True)
    p_synth.add_argument("--scale", type=float, default=1.0, help="1.0 = paper size (283K docs)")
    p_synth.add_argument("--seed", type=int, default=0)
    p_lineage = sub.add_parser("lineage", help="print the provenance chain of a rating")
    p_lineage.add_argument("--query", required=True, help="query id")
    p_lineage.add_argument("--doc", help="candidate doc id (default: the top-rated candidate)")
    p_lineage.add_argument("--profile")
    args = parser.parse_args(argv)

    if args.command == "synth":
        from saber_core.synth import write_synthetic

        for name, path in write_synthetic(args.out, args.scale, args.seed).items():
            print(f"{name}: {path}")
        print(
            f"build on it with SABER_CORPUS={args.out / 'corpus.parquet'} "
            f"SABER_ONTOLOGY={args.out / 'ontology.parquet'}, or use the `synthetic` profile "
            "(which generates the same input in-process)"
        )
        return 0
    build = load_build_config(args.profile)
    store = DuckDBStore(database=str(build.database_path))
    if args.command == "build":
        try:
            result = run_build(build)
        except BuildLockedError as err:
            print(f"saber build: {err}", file=sys.stderr)
            return 2
        if not result.success:
            return 1
        print(summary(store, build.export_dir))
    elif args.command == "lineage":
        print(lineage_report(store, args.query, args.doc))
    elif args.command == "export":
        counts = write_export(store, args.out)
        for name, rows in counts.items():
            print(f"{args.out / name}: {rows} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
