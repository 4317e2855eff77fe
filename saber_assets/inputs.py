"""Group ``inputs``: the validated corpus (bad rows quarantined) and the topic ontology."""

import dagster as dg

from saber_assets.resources import BuildResource, StoreResource
from saber_config import PlanReads
from saber_core.discovery.databank import tree_ic
from saber_core.inputs.annotations import raw_tag_lists
from saber_core.inputs.corpus import ValidatedCorpus, limit_corpus, validate_corpus
from saber_core.ontology.dag import build_ontology
from saber_core.ontology.tag_paths import build_frequency_tree, node_tree_paths, tree_frame
from saber_runtime.metadata import check
from saber_runtime.stage import StageOutput, materialize_stage
from saber_store.sources import load_corpus_frame, load_ontology_frame, source_fingerprint


def _corpus_checks(tables, figures) -> list[dg.AssetCheckResult]:
    n_in, n_ok, n_bad, n_cut = (
        figures[k] for k in ("n_input_rows", "n_corpus", "n_quarantined", "n_outside_corpus_limit")
    )
    stored = tables["corpus"].height + tables["corpus_quarantine"].height
    return [
        check(
            "counts_reconcile",
            n_in == n_ok + n_bad + n_cut and n_ok + n_bad == stored,
            f"{n_in} input rows = {n_ok} corpus + {n_bad} quarantined + {n_cut} outside the "
            "corpus_limit sample",
        )
    ]


def _corpus_figures(validated: ValidatedCorpus, limit: int) -> dict:
    reasons = validated.quarantine.group_by("reason").len().sort("len", descending=True)
    return {
        "n_input_rows": validated.n_input,
        "n_corpus": validated.corpus.height,
        "corpus_limit": limit,
        "n_outside_corpus_limit": validated.n_limited,
        "n_quarantined": validated.quarantine.height,
        "quarantine_reasons": dict(reasons.iter_rows()),
        "domains": dict(validated.corpus.group_by("domain").len().sort("domain").rows()),
    }


@dg.asset(
    group_name="inputs",
    kinds={"duckdb", "polars"},
    check_specs=[dg.AssetCheckSpec("counts_reconcile", asset="corpus")],
)
def corpus(
    context: dg.AssetExecutionContext, build: BuildResource, store: StoreResource
) -> dg.MaterializeResult:
    """The problem–solution corpus; rows failing validation go to ``corpus_quarantine``."""
    plan = build.reads()
    inputs = plan.inputs
    source = source_fingerprint(inputs.corpus, inputs.synth_scale, plan.seed)

    def compute() -> StageOutput:
        frame = load_corpus_frame(inputs.corpus, inputs.synth_scale, plan.seed)
        limit = inputs.corpus_limit
        validated = limit_corpus(
            validate_corpus(frame, inputs.max_text_chars), limit, plan.seed if limit else 0
        )
        if validated.n_limited:
            context.log.info(
                f"corpus: corpus_limit keeps a balanced sample of {inputs.corpus_limit}"
            )
        return StageOutput(
            {"corpus": validated.corpus, "corpus_quarantine": validated.quarantine},
            figures=_corpus_figures(validated, inputs.corpus_limit),
        )

    return materialize_stage(
        context, store, plan, compute=compute, extra={"corpus": source}, checks=_corpus_checks
    )


def _tag_tree(plan: PlanReads, corpus) -> StageOutput:
    """The path tree of the corpus' tags (or of a node-file tree), with the chosen IC."""
    steps, inputs = plan.construction, plan.inputs
    node_paths = None
    if steps.ontology_source == "node_file":
        nodes = load_ontology_frame(inputs.ontology, inputs.synth_scale, plan.seed)
        node_paths = node_tree_paths(nodes["node_id"].to_list(), nodes["parent_ids"].to_list())
    tree = build_frequency_tree(raw_tag_lists(corpus, node_paths))
    table = tree_frame(tree, tree_ic(tree, steps.ic))
    figures = {
        "n_nodes": tree.n_nodes,
        "tag_occurrences": tree.total,
        "max_depth": int(tree.depths.max()),
        "ic": steps.ic,
        "source": f"tag paths of the corpus ({steps.ontology_source})",
    }
    return StageOutput({"ontology": table}, figures=figures)


def ontology(
    context: dg.AssetExecutionContext, build: BuildResource, store: StoreResource
) -> dg.MaterializeResult:
    """The topic ontology: the validated DAG of a node file (Seco IC), or — for the published
    construction — the path tree rebuilt from the corpus' tags (corpus-frequency IC)."""
    plan = build.reads()
    inputs, steps = plan.inputs, plan.construction
    from_tags = steps.ontology_source == "tag_paths" or plan.engine == "all_pairs"
    from_file = not from_tags or steps.ontology_source == "node_file"
    source = source_fingerprint(inputs.ontology, inputs.synth_scale, plan.seed) if from_file else ""

    def compute() -> StageOutput:
        if from_tags:
            return _tag_tree(plan, store.read_table("corpus"))
        onto = build_ontology(load_ontology_frame(inputs.ontology, inputs.synth_scale, plan.seed))
        table = onto.to_frame()
        return StageOutput(
            {"ontology": table},
            figures={
                "n_nodes": onto.n_nodes,
                "virtual_root_added": onto.virtual_root_added,
                "n_multi_parent_nodes": int((table["parent_ids"].list.len() > 1).sum()),
                "max_depth": int(table["depth"].max()),
            },
        )

    return materialize_stage(context, store, plan, compute=compute, extra={"ontology": source})


def ontology_asset(from_tags: bool) -> dg.AssetsDefinition:
    """``ontology``: built from the corpus' tags (it reads the corpus) or from a node file."""
    deps = ["corpus"] if from_tags else []
    return dg.asset(name="ontology", group_name="inputs", deps=deps, kinds={"duckdb", "networkx"})(
        ontology
    )
