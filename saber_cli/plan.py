"""``saber plan``: what a build would reuse, recompute or make new, and why, before it runs.

The whole graph (the build and the evaluation) runs in a dry run (:mod:`saber_runtime.dry_run`)
on an ephemeral Dagster instance: every asset decides as a real build would and records why;
nothing is computed, written or asked of an LLM. An asset whose inputs cannot be read yet (its
upstream is new) is reported as recomputing because of that upstream.
"""

from __future__ import annotations

import json

import dagster as dg

from saber_assets.definitions import BUILD_JOB, build_definitions
from saber_config import BuildConfig
from saber_llm.base import LLMBackend
from saber_runtime.dry_run import NEVER, Decision, dry_run
from saber_store.database import DuckDBStore


def plan_build(
    build: BuildConfig, everything: bool = False, backend: LLMBackend | None = None
) -> list[Decision]:
    """One decision per asset of ``saber build``'s job (``everything``: the evaluation group
    too), in the order a build materializes them (``backend``: the LLM backend a test swaps
    in, as for ``build_definitions``)."""
    defs = build_definitions(build, backend)
    if everything:
        job = defs.resolve_implicit_global_asset_job_def()
    else:
        job = defs.resolve_job_def(BUILD_JOB)
    graph = defs.resolve_asset_graph()
    planned = {k.to_user_string() for k in job.asset_layer.executable_asset_keys}
    partitioned = {k for k in job.asset_layer.executable_asset_keys if graph.get(k).is_partitioned}
    store = DuckDBStore(database=str(build.database_path))
    quiet = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}  # decisions only
    instance = dg.DagsterInstance.ephemeral()
    if partitioned:  # the home's retriever partitions: the leaderboard's fingerprint reads them
        from saber_assets.evaluation import RETRIEVERS
        from saber_cli.dagster_home import saber_instance

        specs = saber_instance(build.home_path).get_dynamic_partitions(RETRIEVERS.name)
        instance.add_dynamic_partitions(RETRIEVERS.name, specs)
    with dry_run() as state:
        job.execute_in_process(
            run_config=quiet,
            instance=instance,
            raise_on_error=False,
            asset_selection=list(set(job.asset_layer.executable_asset_keys) - partitioned),
        )
    for key in partitioned:  # one decision per retriever partition, from its manifest entry
        state.decisions[key.to_user_string()] = retriever_decisions(build, store)
    decisions = []
    for key in graph.toposorted_asset_keys:
        asset = key.to_user_string()
        if asset not in planned:
            continue
        if isinstance(state.decisions.get(asset), list):
            decisions += state.decisions[asset]
            continue
        if asset in state.decisions:
            decisions.append(state.decisions[asset])
            continue
        if store.manifest_entry(asset) is None:
            new = Decision(asset, "new", [NEVER], ["new"])
            state.decisions[asset] = new
        else:
            parents = [p.to_user_string() for p in graph.get(key).parent_keys]
            why = [f"upstream {p} is {_action(state.decisions, p)}" for p in parents]
            why = [w for w in why if not w.endswith(" reuse")]
            why = why or ["its inputs cannot be read before its upstream is built"]
            state.decisions[asset] = Decision(asset, "recompute", why, ["upstream"])
        decisions.append(state.decisions[asset])
    return decisions


def retriever_decisions(build: BuildConfig, store: DuckDBStore) -> list[Decision]:
    """``retriever_runs[spec]`` per partition of the SABER home's instance: reuse (evaluated on
    this export with today's code and entry), recompute (stale: what changed), new (missing)."""
    from saber_assets.evaluation import RETRIEVERS, export_of, partition_entry, retriever_status
    from saber_cli.dagster_home import saber_instance
    from saber_eval.loading import load_benchmark
    from saber_eval.registry import load_registry

    specs = saber_instance(build.home_path).get_dynamic_partitions(RETRIEVERS.name)
    try:
        benchmark = load_benchmark(export_of(store, build.plan().paths))
    except (FileNotFoundError, ValueError):
        return [Decision(partition_entry(s), "new", ["no export yet"], ["upstream"]) for s in specs]
    status = retriever_status(store, specs, benchmark, load_registry())
    action = {"evaluated": "reuse", "stale": "recompute", "missing": "new"}
    return [
        Decision(partition_entry(r["spec"]), action[r["status"]], [r["why"]] if r["why"] else [])
        for r in status.iter_rows(named=True)
    ]


def _action(decisions: dict[str, Decision], asset: str) -> str:
    return decisions[asset].action if asset in decisions else "recomputed"


def plan_text(decisions: list[Decision]) -> str:
    """The plan as a human reads it: one line per asset, reasons indented, the LLM bill."""
    lines = []
    for d in decisions:
        lines.append(f"{d.action:9}  {d.asset}")
        lines += [f"           - {r}" for r in d.reasons[:6]]
        if len(d.reasons) > 6:
            lines.append(f"           - … {len(d.reasons) - 6} more")
        if d.llm_calls:
            surely = "" if d.llm_calls_certain else "up to "
            when = f", ~{d.llm_seconds:.0f} s at the last measured rate" if d.llm_seconds else ""
            lines.append(f"           LLM: {surely}{d.llm_calls} calls miss the cache{when}")
    counts = {a: sum(d.action == a for d in decisions) for a in ("reuse", "recompute", "new")}
    calls = sum(d.llm_calls for d in decisions)
    lines.append(
        f"\n{counts['reuse']} reuse, {counts['recompute']} recompute, {counts['new']} new; "
        f"LLM calls that may miss the cache: {calls}"
    )
    return "\n".join(lines)


def plan_main(build: BuildConfig, as_json: bool, everything: bool = False) -> int:
    """Print the plan (text or JSON)."""
    decisions = plan_build(build, everything)
    if as_json:
        print(json.dumps([d.as_dict() for d in decisions], indent=2))
    else:
        print(plan_text(decisions))
    return 0
