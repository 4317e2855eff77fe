"""Group ``discovery``, the published construction (``targets: eligible_rows``): every ordered
pair of the databank scored (``pair_histograms``: exact float16 histograms → one global
threshold per signal), per-row group counts and eligibility (``target_eligibility``), the final
sampler over eligible targets with the domain quotas (``queries``) and the seeded random pools
of the queries (``candidate_pools``). The passes are :mod:`saber_core.discovery.pair_scorer`."""

from dataclasses import replace

import dagster as dg
import numpy as np
import polars as pl

from saber_allpairs.runner import PassLog, banded_pass, exact_counts, pass_folder
from saber_assets.annotation import corpus_topic_rows
from saber_assets.discovery.per_query_pools import pool_checks
from saber_assets.discovery.plots import histogram_plot
from saber_assets.resources import BuildResource, StoreResource
from saber_config import PlanReads
from saber_core.construction import Construction
from saber_core.discovery.databank import Databank, build_databank, domain_buckets, pair_scorer
from saber_core.discovery.final_sampler import sample_final_queries
from saber_core.discovery.global_threshold import histogram_threshold
from saber_core.discovery.pair_scorer import (
    PairScorer,
    eligible,
    replay_draws,
    row_counts,
    row_pools,
)
from saber_core.discovery.pass_totals import Band, PassTotals, resolve_counts
from saber_core.discovery.pools import sample_queries
from saber_core.ontology.tag_paths import tree_from_frame
from saber_core.published import GROUPS
from saber_runtime.stage import StageOutput, materialize_stage
from saber_store.database import DuckDBStore

INPUTS = ["corpus", "ontology", "summaries", "topic_annotations"]
GROUP_NAMES = ("topic", "summary", "both")  # the released pool groups, in GROUPS order


def pass_log(context: dg.AssetExecutionContext) -> PassLog:
    """The step's log and run, where an all-pairs pass reports."""
    return PassLog(context.log.info, context.log.warning, context.run.run_id)


def databank_and_scorer(plan: PlanReads, store: DuckDBStore) -> tuple[Databank, PairScorer]:
    """The databank rows and their pair scorer, from the stored inputs."""
    topics = store.read_table("topic_annotations")
    databank = build_databank(store.read_table("corpus"), topics, plan.domains.map)
    table = store.read_table("ontology")
    tree = tree_from_frame(table)
    ic = table.sort("node_index")["ic"].to_numpy()
    return databank, pair_scorer(databank, tree, ic, plan.construction)


@dg.asset(name="pair_histograms", group_name="discovery", deps=INPUTS, kinds={"duckdb"})
def pair_histograms_asset(
    context: dg.AssetExecutionContext, build: BuildResource, store: StoreResource
) -> dg.MaterializeResult:
    """Pass 1 over every ordered pair: exact histograms of the stored float16 BMA and Jaccard
    values, and the global thresholds (the published percentile, exactly)."""
    plan = build.reads()

    def compute() -> StageOutput:
        databank, scorer = databank_and_scorer(plan, store)
        q = plan.thresholds.quantile
        totals, timing = banded_pass(pass_log(context), plan, scorer, q, "pass1")
        thresholds = {
            "bma": histogram_threshold(totals.hist_b, q),
            "jaccard": histogram_threshold(totals.hist_j, q),
        }
        table = histogram_table(totals, thresholds)
        figures = {
            "thresholds": thresholds,
            "quantile": q,
            "databank_rows": databank.n_rows,
            "ordered_pairs": int(totals.hist_b.sum()),
            "excluded_rows": databank.excluded.height,
            "thresholds_in_bands": resolve_counts(totals, *thresholds.values()) is not None,
            "growth": timing["growth"],
            "pass": timing,
        }
        plot = histogram_plot(table, plan.paths.artifacts_dir / "pair_histograms.png")
        tables = {
            "pair_histograms": table,
            "pair_bands": band_table(totals.band),
            "databank_exclusions": databank.excluded,
        }
        return StageOutput(tables, figures=figures, plots={"pair_histograms": plot})

    return materialize_stage(context, store, plan, compute=compute)


def histogram_table(totals: PassTotals, thresholds: dict[str, float]) -> pl.DataFrame:
    """One row per float16 value that occurs: signal, bits, value, count (ordered pairs) and
    the signal's threshold."""
    bits = np.arange(1 << 16, dtype=np.uint16)
    signals = (("bma", totals.hist_b), ("jaccard", totals.hist_j))
    return pl.concat(
        pl.DataFrame(
            {
                "signal": name,
                "bits": bits[hist > 0].astype(np.int64),
                "value": bits[hist > 0].view(np.float16).astype(np.float64),
                "count": hist[hist > 0],
                "threshold": thresholds[name],
            }
        )
        for name, hist in signals
    )


def band_table(band: Band) -> pl.DataFrame:
    """The band the pass counted each row's groups in, per signal (bits ``[band_low,
    band_low + band_width)``): how the pass was cut, not a result (a grown databank's pass
    keeps the band of the pass it adds to), and where ``target_eligibility`` finds its totals."""
    return pl.DataFrame(
        {
            "signal": ["bma", "jaccard"],
            "band_low": [band.low_b, band.low_j],
            "band_width": [band.width_b, band.width_j],
        }
    )


def stored_band(store: DuckDBStore) -> Band:
    """The band of ``pair_histograms``'s pass."""
    found = {row["signal"]: row for row in store.read_table("pair_bands").to_dicts()}
    return Band(*(found[s][c] for s in ("bma", "jaccard") for c in ("band_low", "band_width")))


def stored_thresholds(store: DuckDBStore) -> tuple[float, float]:
    """(BMA, Jaccard) global thresholds of ``pair_histograms``."""
    table = store.read_table("pair_histograms").group_by("signal").agg(pl.col("threshold").first())
    found = dict(table.rows())
    return found["bma"], found["jaccard"]


def _no_target_error(sizes: tuple[int, int, int], table: pl.DataFrame) -> ValueError:
    best = table.with_columns(
        pl.min_horizontal([pl.col(f"n_{g}") / s for g, s in zip(GROUPS, sizes, strict=True)]).alias(
            "fill"
        )
    ).sort("fill", descending=True)
    examples = best.head(3).select("doc_id", *[f"n_{g}" for g in GROUPS]).rows()
    return ValueError(
        f"no row of the {table.height}-row databank fills all three groups "
        f"({'/'.join(map(str, sizes))}) above the global thresholds; the "
        f"fullest (doc, topic-only, summary-only, both): {examples}. Lower the group sizes "
        "(SABER_N_TOPIC_ONLY / SABER_N_SUMMARY_ONLY / SABER_N_BOTH) or the threshold quantile "
        "(SABER_THRESHOLD_QUANTILE), or use a larger corpus"
    )


@dg.asset(group_name="discovery", deps=["pair_histograms", *INPUTS], kinds={"duckdb"})
def target_eligibility(
    context: dg.AssetExecutionContext, build: BuildResource, store: StoreResource
) -> dg.MaterializeResult:
    """Pass 2: per databank row, the members of each group under the global thresholds and
    whether every group reaches its size (an eligible target)."""
    plan = build.reads()
    sizes = plan.pools.sizes

    def compute() -> StageOutput:
        databank, scorer = databank_and_scorer(plan, store)
        t_bma, t_jac = stored_thresholds(store)
        first = pass_folder(plan, scorer, stored_band(store), "pass1").complete()
        counts, timing = exact_counts(
            pass_log(context), plan, scorer, first, (t_bma, t_jac), "pass2"
        )
        table = pl.DataFrame(
            {
                "row": np.arange(databank.n_rows),
                "doc_id": databank.doc_ids.astype(str),
                "original_index": databank.original_index,
                **{f"n_{g}": counts[:, i] for i, g in enumerate(GROUPS)},
                "eligible": eligible(counts, sizes),
                "domains": [list(d) for d in databank.domains],
            },
            schema_overrides={"domains": pl.List(pl.String)},
        )
        if not table["eligible"].any():
            raise _no_target_error(sizes, table)
        keys = domain_buckets([tuple(d) for d in table.filter("eligible")["domains"].to_list()])
        figures = {
            "eligible_targets": int(table["eligible"].sum()),
            "databank_rows": table.height,
            "group_sizes": list(sizes),
            "eligible_by_domains": {"|".join(k) or "(none)": v for k, v in keys.items()},
            "pass": timing,
        }
        return StageOutput({"target_eligibility": table}, figures=figures)

    return materialize_stage(context, store, plan, compute=compute)


def _sample(plan: PlanReads, targets: pl.DataFrame) -> np.ndarray:
    """Positions (into ``targets``) of the queries: the final sampler's quotas (multi-label
    domains) or a balanced sample over the first domain (single)."""
    keys = [tuple(d) for d in targets["domains"].to_list()]
    if plan.construction.domains == "single":
        first = [k[0] if k else "Unknown" for k in keys]
        return sample_queries(first, plan.pools.n_queries, plan.seed)
    try:
        return sample_final_queries(keys, plan.domains.quotas, plan.seed)
    except ValueError as err:
        sizes = {"|".join(k): v for k, v in domain_buckets(keys).items()}
        raise ValueError(
            f"{err}; eligible targets per domain set: {sizes}. Set the quotas with "
            'SABER_DOMAIN_QUOTAS (JSON, e.g. {"Algebra": 10, "Algebra|Geometry": 2}) or use '
            "domains: single (SABER_DOMAINS=single) with SABER_N_QUERIES"
        ) from None


@dg.asset(name="queries", group_name="discovery", deps=["target_eligibility"])
def final_queries(
    context: dg.AssetExecutionContext, build: BuildResource, store: StoreResource
) -> dg.MaterializeResult:
    """The queries: the final sampler over the eligible targets (seeded; published quotas by
    domain set, or ``domain_quotas``)."""
    plan = build.reads()

    def compute() -> StageOutput:
        targets = store.read_table("target_eligibility").filter("eligible")
        picked = targets[_sample(plan, targets)]
        table = (
            picked.select(
                pl.col("doc_id").alias("query_id"),
                "row",
                "original_index",
                "domains",
                pl.col("domains").list.first().fill_null("Unknown").alias("domain"),
            )
            .with_row_index("query_index")
            .with_columns(pl.lit(plan.seed).alias("seed"))
        )
        per_key = table.group_by(pl.col("domains").list.join("|")).len().sort("domains")
        figures = {
            "n_queries": table.height,
            "eligible_targets": targets.height,
            "per_domain_set": dict(per_key.rows()),
        }
        return StageOutput({"queries": table}, figures=figures)

    return materialize_stage(context, store, plan, compute=compute)


def _pool_frames(query_ids, pools, doc_ids, t_bma, t_jac, counts) -> tuple:
    flat = pools.candidates.ravel()
    n = pools.candidates.shape[1]
    frame = pl.DataFrame(
        {
            "query_id": np.repeat(np.asarray(query_ids, dtype=object), n),
            "position": np.tile(np.arange(n), len(query_ids)),
            "doc_id": doc_ids[flat].astype(str),
            "group": np.asarray(GROUP_NAMES, dtype=object)[pools.groups.ravel()],
            "relaxed": np.zeros(len(flat), dtype=bool),
            "bma": pools.bma.ravel().astype(np.float32),
            "jaccard": pools.jaccard.ravel().astype(np.float32),
        },
        schema_overrides={"query_id": pl.String, "group": pl.String},
    )
    outcomes = pl.DataFrame(
        {
            "query_id": list(query_ids),
            "status": "ok",
            "reason": "",
            "n_eligible": counts.sum(1),
            "n_near_duplicates": 0,
            "topic_low": t_bma,
            "topic_high": t_bma,
            "summary_low": t_jac,
            "summary_high": t_jac,
            **{f"n_{g}": counts[:, i] for i, g in enumerate(GROUPS)},
        },
        schema_overrides={"query_id": pl.String},
    )
    return frame, outcomes


@dg.asset(
    name="candidate_pools",
    group_name="discovery",
    deps=["queries", "target_eligibility", "pair_histograms", *INPUTS],
    check_specs=[
        dg.AssetCheckSpec("pool_size_and_split", asset="candidate_pools"),
        dg.AssetCheckSpec("no_self_or_duplicate_candidates", asset="candidate_pools"),
    ],
)
def eligible_pools(
    context: dg.AssetExecutionContext, build: BuildResource, store: StoreResource
) -> dg.MaterializeResult:
    """The pools of the queries: per group a seeded random sample of its members (the published
    draw, one generator over every eligible target in row order) or its top by score."""
    plan = build.reads()
    sizes = plan.pools.sizes

    def compute() -> StageOutput:
        databank, scorer = databank_and_scorer(plan, store)
        t_bma, t_jac = stored_thresholds(store)
        table = store.read_table("target_eligibility").sort("row")
        counts = table.select([f"n_{g}" for g in GROUPS]).to_numpy()
        queries = store.read_table("queries").sort("query_index")
        rows = queries["row"].to_numpy()
        positions = None
        if plan.construction.group_choice == "random_sample":
            drawn = replay_draws(counts, sizes, plan.seed, keep=rows)
            positions = [drawn[int(r)] for r in rows]
        pools = row_pools(scorer, rows, t_bma, t_jac, sizes, positions)
        frame, outcomes = _pool_frames(
            queries["query_id"].to_list(), pools, databank.doc_ids, t_bma, t_jac, counts[rows]
        )
        figures = {
            "group_sizes": list(sizes),
            "thresholds": [t_bma, t_jac],
            "group_choice": plan.construction.group_choice,
            "n_queries_with_pools": len(rows),
        }
        return StageOutput({"candidate_pools": frame, "pool_outcomes": outcomes}, figures=figures)

    return materialize_stage(
        context,
        store,
        plan,
        compute=compute,
        checks=lambda tables, _: pool_checks(plan.pools.config, tables["candidate_pools"]),
    )


ALL_PAIRS_ASSETS = [pair_histograms_asset, target_eligibility, final_queries, eligible_pools]


def alternative_pools(
    context: dg.AssetExecutionContext,
    plan: PlanReads,
    store: DuckDBStore,
    corpus: pl.DataFrame,
    alternative: pl.DataFrame,
) -> tuple[pl.DataFrame, int]:
    """The queries' pools re-selected with another summary recipe as the ideas: the same BMA,
    global thresholds, group sizes and seed (the draw replayed over the queries that still fill
    every group, in row order); queries that no longer fill get no pool. Returns the pools and
    the number of documents without an alternative summary."""
    sizes = plan.pools.sizes
    databank, _ = databank_and_scorer(plan, store)
    other = dict(alternative.select("doc_id", "summary").rows())
    ideas = [other.get(d) or "" for d in databank.doc_ids.tolist()]
    table = store.read_table("ontology")
    scorer = pair_scorer(
        replace(databank, ideas=ideas),
        tree_from_frame(table),
        table.sort("node_index")["ic"].to_numpy(),
        plan.construction,
    )
    t_bma, t_jac = stored_thresholds(store)
    queries = store.read_table("queries").sort("row")
    rows = queries["row"].to_numpy()
    counts = row_counts(scorer, rows, t_bma, t_jac)
    fill = eligible(counts, sizes)
    positions = None
    if plan.construction.group_choice == "random_sample":
        drawn = replay_draws(counts[fill], sizes, plan.seed)
        positions = [drawn[i] for i in range(int(fill.sum()))]
    pools = row_pools(scorer, rows[fill], t_bma, t_jac, sizes, positions)
    ids = [q for q, ok in zip(queries["query_id"].to_list(), fill, strict=True) if ok]
    frame, _ = _pool_frames(ids, pools, databank.doc_ids, t_bma, t_jac, counts[fill])
    missing = sum(1 for d in databank.doc_ids.tolist() if not other.get(d))
    context.log.info(f"recipe: {len(ids)} of {len(rows)} queries fill every group")
    return frame, missing


def variant_pool_frame(
    context: dg.AssetExecutionContext,
    plan: PlanReads,
    store: DuckDBStore,
    steps: Construction,
    query_ids: list[str],
    label: str,
) -> pl.DataFrame:
    """The pools of ``query_ids`` under another construction ``steps`` (a published-defect fix
    toggled): tags cleaned again, every pair scored again (thresholds, group counts, the draw over
    every eligible row), the queries' pools selected; a query not eligible under ``steps`` gets
    no pool. ``label`` names the passes' checkpoints."""
    sizes = plan.pools.sizes
    corpus, table = store.read_table("corpus"), store.read_table("ontology")
    nodes = table.select(pl.col("node_id").alias("topic_id"), "ic")
    topics, _ = corpus_topic_rows(plan, corpus, nodes, steps)
    databank = build_databank(corpus, topics, plan.domains.map)
    ic = table.sort("node_index")["ic"].to_numpy()
    scorer = pair_scorer(databank, tree_from_frame(table), ic, steps)
    q = plan.thresholds.quantile
    first, _ = banded_pass(pass_log(context), plan, scorer, q, f"{label}-pass1")
    t_bma, t_jac = histogram_threshold(first.hist_b, q), histogram_threshold(first.hist_j, q)
    counts, _ = exact_counts(
        pass_log(context), plan, scorer, first, (t_bma, t_jac), f"{label}-pass2"
    )
    where = {d: i for i, d in enumerate(databank.doc_ids.tolist())}
    wanted = np.array([where[d] for d in query_ids if d in where], dtype=np.int64)
    chosen = wanted[eligible(counts[wanted], sizes)] if len(wanted) else wanted
    positions = None
    if steps.group_choice == "random_sample":
        drawn = replay_draws(counts, sizes, plan.seed, keep=chosen)
        positions = [drawn[int(r)] for r in chosen]
    pools = row_pools(scorer, chosen, t_bma, t_jac, sizes, positions)
    ids = databank.doc_ids[chosen].astype(str).tolist()
    frame, _ = _pool_frames(ids, pools, databank.doc_ids, t_bma, t_jac, counts[chosen])
    return frame
