"""Group ``inputs``: the validated corpus (bad rows quarantined) and the topic ontology."""

import dagster as dg

from saber_core.corpus import ValidatedCorpus, limit_corpus, validate_corpus
from saber_core.ontology import build_ontology
from saber_resources.config import BuildConfig
from saber_resources.sources import load_corpus_frame, load_ontology_frame, source_fingerprint
from saber_resources.storage import DuckDBStore
from saber_runtime.metadata import check
from saber_runtime.stage import StageOutput, materialize_stage


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
    context: dg.AssetExecutionContext, build: BuildConfig, store: DuckDBStore
) -> dg.MaterializeResult:
    """The problem–solution corpus; rows failing validation go to ``corpus_quarantine``."""
    inputs = build.inputs

    def compute() -> StageOutput:
        frame = load_corpus_frame(inputs.corpus, inputs.synth_scale, build.seed)
        validated = limit_corpus(
            validate_corpus(frame, inputs.max_text_chars), inputs.corpus_limit, build.seed
        )
        if validated.n_limited:
            context.log.info(
                f"corpus: corpus_limit keeps a balanced sample of {inputs.corpus_limit}"
            )
        return StageOutput(
            {"corpus": validated.corpus, "corpus_quarantine": validated.quarantine},
            figures=_corpus_figures(validated, inputs.corpus_limit),
        )

    settings = {
        "corpus": source_fingerprint(inputs.corpus, inputs.synth_scale, build.seed),
        "max_chars": inputs.max_text_chars,
        "limit": inputs.corpus_limit,
        "seed": build.seed if inputs.corpus_limit else None,
    }
    return materialize_stage(
        context, store, settings=settings, compute=compute, checks=_corpus_checks
    )


@dg.asset(group_name="inputs", kinds={"duckdb", "networkx"})
def ontology(
    context: dg.AssetExecutionContext, build: BuildConfig, store: DuckDBStore
) -> dg.MaterializeResult:
    """The validated topic DAG with Seco intrinsic IC and depth per node."""
    inputs = build.inputs

    def compute() -> StageOutput:
        frame = load_ontology_frame(inputs.ontology, inputs.synth_scale, build.seed)
        onto = build_ontology(frame)
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

    source = source_fingerprint(inputs.ontology, inputs.synth_scale, build.seed)
    return materialize_stage(context, store, settings={"ontology": source}, compute=compute)
