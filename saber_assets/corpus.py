"""Stage: corpus (validated rows + quarantine) and the topic ontology."""

import dagster as dg

from saber_assets.common import source_fingerprint
from saber_assets.runtime import StageOutput, check, materialize_stage
from saber_core.corpus import ValidatedCorpus, validate_corpus
from saber_core.ontology import build_ontology
from saber_core.pools import sample_queries
from saber_resources.config import BuildConfig
from saber_resources.sources import load_corpus_frame, load_ontology_frame
from saber_resources.storage import DuckDBStore


@dg.asset(
    group_name="inputs",
    kinds={"duckdb", "polars"},
    check_specs=[dg.AssetCheckSpec("counts_reconcile", asset="corpus")],
)
def corpus(
    context: dg.AssetExecutionContext, build: BuildConfig, store: DuckDBStore
) -> dg.MaterializeResult:
    """The problem–solution corpus; rows failing validation go to ``corpus_quarantine``."""

    def compute() -> StageOutput:
        validated = validate_corpus(
            load_corpus_frame(build.corpus, build.synth_scale, build.seed), build.max_text_chars
        )
        if build.corpus_limit:
            keep = sample_queries(
                validated.corpus["domain"].to_list(), build.corpus_limit, build.seed
            )
            context.log.info(f"corpus: corpus_limit keeps a balanced sample of {len(keep)} rows")
            validated = ValidatedCorpus(
                validated.corpus[keep], validated.quarantine, validated.n_input
            )
        reasons = validated.quarantine.group_by("reason").len().sort("len", descending=True)
        return StageOutput(
            {"corpus": validated.corpus, "corpus_quarantine": validated.quarantine},
            figures={
                "n_input_rows": validated.n_input,
                "n_corpus": validated.corpus.height,
                "corpus_limit": build.corpus_limit,
                "n_quarantined": validated.quarantine.height,
                "quarantine_reasons": dict(reasons.iter_rows()),
                "domains": dict(validated.corpus.group_by("domain").len().sort("domain").rows()),
            },
        )

    def checks(tables, figures):
        n_in, n_ok, n_bad = (figures[k] for k in ("n_input_rows", "n_corpus", "n_quarantined"))
        return [
            check(
                "counts_reconcile",
                n_in
                == n_ok + n_bad
                == tables["corpus"].height + tables["corpus_quarantine"].height,
                f"{n_in} input rows = {n_ok} corpus + {n_bad} quarantined",
            )
        ]

    settings = {
        "corpus": source_fingerprint(build.corpus, build.synth_scale, build.seed),
        "max_chars": build.max_text_chars,
        "limit": build.corpus_limit,
        "seed": build.seed if build.corpus_limit else None,
    }
    return materialize_stage(
        context, store, settings=settings, upstream=[], compute=compute, checks=checks
    )


@dg.asset(group_name="inputs", kinds={"duckdb", "networkx"})
def ontology(
    context: dg.AssetExecutionContext, build: BuildConfig, store: DuckDBStore
) -> dg.MaterializeResult:
    """The validated topic DAG with Seco intrinsic IC and depth per node."""

    def compute() -> StageOutput:
        onto = build_ontology(load_ontology_frame(build.ontology, build.synth_scale, build.seed))
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

    return materialize_stage(
        context,
        store,
        settings={"ontology": source_fingerprint(build.ontology, build.synth_scale, build.seed)},
        upstream=[],
        compute=compute,
    )
