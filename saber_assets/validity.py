"""Stage: benchmark validity per build — rating intervals, tournament reliability, triage,
contamination (both directions) and recipe sensitivity, as tables, a report and plots."""

import dagster as dg
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from scipy.special import expit

from saber_assets.common import full_text
from saber_assets.runtime import StageOutput, check, materialize_stage
from saber_assets.tournament import played_arrays, pool_matrix
from saber_core.bradley_terry import fit_bradley_terry
from saber_core.text import build_token_matrix, jaccard_one_vs_many
from saber_core.tournament import round_robin_pairs
from saber_core.validity import (
    bootstrap_intervals,
    kendall_tau_b,
    mean_and_se,
    pairwise_agreement,
    split_half_reliability,
)
from saber_core.validity_contamination import containment
from saber_core.validity_triage import calibrate_margin, triage_by_probability
from saber_resources.config import BuildConfig
from saber_resources.judge import PairwiseJudge
from saber_resources.slurm import SlurmDispatch, maybe_dispatcher
from saber_resources.sources import load_corpus_frame
from saber_resources.storage import DuckDBStore

TRIAGE_THRESHOLDS = (0.1, 0.2, 0.3, 0.4)
REPORT_UPSTREAM = [
    "judgments",
    "bt_ratings",
    "candidate_pools",
    "corpus",
    "summaries",
    "rating_intervals",
    "recipe_sensitivity",
]


def comparison_arrays(
    store: DuckDBStore, soft: bool
) -> tuple[list[str], np.ndarray, pl.DataFrame, tuple]:
    """Query ids, pool doc ids, the judgments, and the (query index, a, b, y) Bradley–Terry
    inputs (y: judge probabilities when ``soft``, else hard outcomes), as ``bt_ratings`` fits."""
    query_ids, docs = pool_matrix(store)
    judgments = store.read_table("judgments")
    return query_ids, docs, judgments, played_arrays(judgments, query_ids).bt_inputs(soft)


@dg.asset(group_name="tournament", deps=["judgments", "candidate_pools"])
def rating_intervals(
    context: dg.AssetExecutionContext, build: BuildConfig, store: DuckDBStore
) -> dg.MaterializeResult:
    """Percentile bootstrap 95% intervals of every rating (seeded; resampled judgments)."""

    def compute() -> StageOutput:
        query_ids, docs, _, (q, a, b, y) = comparison_arrays(store, build.bt_soft)
        n = docs.shape[1]
        boot = bootstrap_intervals(
            q,
            a,
            b,
            y,
            len(query_ids),
            n,
            n_boot=build.validity_bootstrap,
            seed=build.seed,
            C=build.bt_c,
            keep_replicates=False,
        )
        table = pl.DataFrame(
            {
                "query_id": np.repeat(query_ids, n),
                "position": np.tile(np.arange(n), len(query_ids)),
                "doc_id": docs.ravel(),
                "rating_lower": boot.rating_lower.ravel(),
                "rating_upper": boot.rating_upper.ravel(),
                "strength_lower": boot.strength_lower.ravel(),
                "strength_upper": boot.strength_upper.ravel(),
            }
        )
        width = table["rating_upper"] - table["rating_lower"]
        return StageOutput(
            {"rating_intervals": table},
            figures={
                "bootstrap_draws": build.validity_bootstrap,
                "level": boot.level,
                "mean_width_0_5": float(width.mean()),
            },
        )

    return materialize_stage(
        context,
        store,
        settings={
            "B": build.validity_bootstrap,
            "seed": build.seed,
            "C": build.bt_c,
            **({"soft": True} if build.bt_soft else {}),
        },
        upstream=["judgments", "candidate_pools"],
        compute=compute,
    )


def _round_robin_sample(dispatch, context, build, store, judge, query_ids, docs, judgments):
    """τ and pairwise agreement of Swiss-BT vs full round-robin BT on a seeded query sample."""
    rng = np.random.default_rng([build.seed, 8])
    k = min(build.validity_rr_queries, len(query_ids))
    sample = np.sort(rng.choice(len(query_ids), size=k, replace=False)) if k else []
    texts = dict(
        store.read_table("corpus")
        .select("doc_id", full_text(pl.col("problem"), pl.col("solution")))
        .rows()
    )
    rows, swiss_tau, agree = [], [], []
    n = docs.shape[1]
    pairs = round_robin_pairs(n)
    for qi in sample:
        query = query_ids[qi]
        played = judgments.filter(pl.col("query_id") == query)
        column = "p_a" if build.bt_soft else "outcome"
        known = {
            (a, b): (o if y is not None else None)
            for a, b, o, y in played.select(
                "pos_a", "pos_b", pl.col(column).alias("y"), pl.col("outcome").alias("hard")
            ).rows()
        }
        todo = [(i, j) for i, j in pairs.tolist() if (i, j) not in known]
        verdict = judge.judge(
            [texts[query]] * len(todo),
            [texts[docs[qi, i]] for i, _ in todo],
            [texts[docs[qi, j]] for _, j in todo],
            store,
            context.run.run_id,
            dispatch,
        )
        p = verdict.p_first
        hard = np.where(p > 0.5, 1.0, np.where(p < 0.5, 0.0, np.nan))
        new = dict(
            zip(todo, np.where(np.isnan(hard), np.nan, p) if build.bt_soft else hard, strict=True)
        )
        outcome = np.array([known.get((i, j), new.get((i, j))) for i, j in pairs.tolist()], float)
        zeros = np.zeros(len(pairs), dtype=np.int64)
        rr = fit_bradley_terry(zeros, pairs[:, 0], pairs[:, 1], outcome, 1, n, C=build.bt_c)
        swiss_y = np.array([known[k] for k in played.select("pos_a", "pos_b").rows()], float)
        sw = fit_bradley_terry(
            np.zeros(played.height, dtype=np.int64),
            played["pos_a"].to_numpy(),
            played["pos_b"].to_numpy(),
            swiss_y,
            1,
            n,
            C=build.bt_c,
        )
        tau, agreement = float(kendall_tau_b(sw, rr)[0]), float(pairwise_agreement(sw, rr)[0])
        swiss_tau.append(tau)
        agree.append(agreement)
        rows.append(
            {
                "query_id": query,
                "new_judgments": len(todo),
                "round_robin_pairs": len(pairs),
                "kendall_tau": tau,
                "pairwise_agreement": agreement,
            }
        )
        context.log.info(f"validity: round robin for {query}: {len(todo)} new judgments")
    return pl.DataFrame(rows), swiss_tau, agree


def _triage_replay(build, store, query_ids, docs, judgments, arrays):
    """Replay cheap-judge triage on the Swiss judgments: calls saved vs τ to full-judge ratings."""
    q, a, b, y = arrays
    corpus = store.read_table("corpus")
    row_of = {d: i for i, d in enumerate(corpus["doc_id"].to_list())}
    tokens = build_token_matrix(
        corpus.select(full_text(pl.col("problem"), pl.col("solution"))).to_series()
    )
    sim = np.stack([jaccard_one_vs_many(row_of[qid], tokens) for qid in query_ids])
    doc_rows = np.vectorize(row_of.__getitem__)(docs)
    score = np.take_along_axis(sim, doc_rows, axis=1)  # (Q, n) cheap relevance
    margin = score[q, a] - score[q, b]
    first = judgments["round"].to_numpy() == 1
    k = calibrate_margin(margin[first], y[first])
    p_cheap = expit(k * margin)
    n_q, n = docs.shape
    full = fit_bradley_terry(q, a, b, y, n_q, n, C=build.bt_c)
    rows = []
    for threshold in TRIAGE_THRESHOLDS:
        split = triage_by_probability(p_cheap, threshold)
        merged = split.merge(y[split.llm])
        beta = fit_bradley_terry(q, a, b, merged, n_q, n, C=build.bt_c)
        tau, se = mean_and_se(kendall_tau_b(beta, full))
        rows.append(
            {
                "threshold": threshold,
                "llm_calls_saved": split.saved_fraction,
                "tau_to_full_judge": tau,
                "tau_se": se,
            }
        )
    return pl.DataFrame(rows), k


def _contamination(build, store, query_ids, docs):
    """Two-way containment of queries and candidates against the registered external corpus."""
    if not build.contamination_corpus:
        return pl.DataFrame(), "no external corpus registered (contamination_corpus)"
    external = load_corpus_frame(build.contamination_corpus)
    ext_text = external.select(full_text(pl.col("problem"), pl.col("solution"))).to_series()
    corpus = store.read_table("corpus")
    bench_ids = list(dict.fromkeys([*query_ids, *docs.ravel().tolist()]))
    texts = dict(corpus.select("doc_id", full_text(pl.col("problem"), pl.col("solution"))).rows())
    result = containment(
        [texts[d] for d in bench_ids],
        ext_text.to_list(),
        n=build.contam_ngram,
        min_score=build.contam_threshold,
    )
    flagged = result.flagged(build.contam_threshold)
    queries = set(query_ids)
    table = pl.DataFrame(
        {
            "doc_id": [bench_ids[i] for i in result.bench[flagged]],
            "is_query": [bench_ids[i] in queries for i in result.bench[flagged]],
            "external_id": external["doc_id"].to_numpy()[result.external[flagged]],
            "bench_in_external": result.bench_in_external[flagged],
            "external_in_bench": result.external_in_bench[flagged],
            "score": result.score[flagged],
        },
        schema_overrides={"doc_id": pl.String, "external_id": pl.String},
    )
    return table, f"{len(ext_text)} external texts, n={build.contam_ngram}"


def _cell(value) -> str:
    """A report cell: floats to 3 decimals, dicts as ``key: value`` lists."""
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_cell(v)}" for k, v in value.items())
    return str(value)


def _plots(build, rr: pl.DataFrame, triage: pl.DataFrame) -> dict:
    out = build.export_dir
    out.mkdir(parents=True, exist_ok=True)
    plots = {}
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(triage["llm_calls_saved"], triage["tau_to_full_judge"], "o-")
    for row in triage.iter_rows(named=True):
        ax.annotate(f"|p−½|≥{row['threshold']}", (row["llm_calls_saved"], row["tau_to_full_judge"]))
    ax.set_xlabel("judge calls saved by triage")
    ax.set_ylabel("Kendall τ to full-judge ratings")
    ax.set_title("Cheap-judge triage (replayed on this build)")
    fig.tight_layout()
    plots["triage"] = out / "validity_triage.png"
    fig.savefig(plots["triage"], dpi=100)
    plt.close(fig)
    if rr.height:
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.bar(range(rr.height), rr["kendall_tau"], tick_label=rr["query_id"].to_list())
        ax.set_ylabel("Kendall τ, Swiss-BT vs round-robin BT")
        ax.set_ylim(0, 1)
        ax.tick_params(axis="x", labelrotation=45, labelsize=7)
        fig.tight_layout()
        plots["round_robin"] = out / "validity_round_robin.png"
        fig.savefig(plots["round_robin"], dpi=100)
        plt.close(fig)
    return plots


@dg.asset(
    group_name="validity",
    deps=REPORT_UPSTREAM,
    check_specs=[dg.AssetCheckSpec("no_contaminated_queries", asset="validity_report")],
)
def validity_report(
    context: dg.AssetExecutionContext,
    build: BuildConfig,
    store: DuckDBStore,
    judge: PairwiseJudge,
    slurm: SlurmDispatch,
) -> dg.MaterializeResult:
    """Tournament reliability, triage, contamination and recipe figures for this build."""

    def compute() -> StageOutput:
        query_ids, docs, judgments, arrays = comparison_arrays(store, build.bt_soft)
        q, a, b, y = arrays
        dispatch = maybe_dispatcher(build, slurm, context, getattr(judge, "backend", None))
        rr, taus, agree = _round_robin_sample(
            dispatch, context, build, store, judge, query_ids, docs, judgments
        )
        half = split_half_reliability(
            q, a, b, y, len(query_ids), docs.shape[1], seed=build.seed, C=build.bt_c
        )
        triage, slope = _triage_replay(build, store, query_ids, docs, judgments, arrays)
        contamination, note = _contamination(build, store, query_ids, docs)
        summaries = store.read_table("summaries")
        llm_summaries = bool((summaries["summary_origin"] == "llm").any())
        recipe = store.manifest_entry("recipe_sensitivity")["metadata"]["figures"]
        widths = (
            store.read_table("rating_intervals")
            .select((pl.col("rating_upper") - pl.col("rating_lower")).mean())
            .item()
        )
        figures = {
            "round_robin_queries": rr.height,
            "swiss_vs_round_robin_tau": float(np.mean(taus)) if taus else None,
            "swiss_vs_round_robin_agreement": float(np.mean(agree)) if agree else None,
            "split_half_reliability": float(half.mean),
            "split_half_r": float(half.mean_r),
            "mean_interval_width": float(widths),
            "triage_slope": float(slope),
            "triage": triage.to_dicts(),
            "contamination": note,
            "n_contaminated_queries": int(contamination["is_query"].sum())
            if contamination.height
            else 0,
            "recipe": recipe["recipe"],
            "recipe_pool_overlap": recipe.get("mean_pool_overlap"),
            "recipe_shared_rating_spearman": recipe.get("shared_rating_spearman"),
            "recipe_shared_rating_kendall_tau": recipe.get("shared_rating_kendall_tau"),
            "recipe_ndcg_shift_llm_minus_human": recipe.get("ndcg_shift_llm_minus_human"),
            "generator_free_summaries": not llm_summaries,
        }
        plots = _plots(build, rr, triage)
        lines = ["# Validity report", "", "| figure | value |", "|---|---|"]
        lines += [f"| {k} | {_cell(v)} |" for k, v in figures.items() if k != "triage"]
        lines += [
            "",
            "## Triage (replayed)",
            "",
            "| |p−½| ≥ | calls saved | τ to full judge |",
            "|---|---|---|",
        ]
        lines += [
            f"| {r['threshold']} | {r['llm_calls_saved']:.1%} | {r['tau_to_full_judge']:.3f} |"
            for r in triage.iter_rows(named=True)
        ]
        if recipe.get("ndcg@10"):
            lines += ["", "## Recipe sensitivity", "", "| retriever / summaries | nDCG@10 |"]
            rows = sorted(recipe["ndcg@10"].items())
            lines += ["|---|---|", *[f"| {k} | {v:.3f} |" for k, v in rows]]
            plots["recipe"] = build.export_dir / "validity_recipe.png"
        lines += ["", *[f"![{k}]({p.name})" for k, p in plots.items()], ""]
        report = build.export_dir / "validity.md"
        report.write_text("\n".join(lines))
        tables = {
            "validity_round_robin": rr,
            "validity_triage": triage,
            "contamination_flags": contamination,
        }
        return StageOutput(tables, figures=figures, files=[report], plots=plots)

    def checks(tables, figures):
        flags = tables["contamination_flags"]
        bad = flags.filter(pl.col("is_query")) if flags.height else flags
        return [
            check(
                "no_contaminated_queries",
                figures["n_contaminated_queries"] == 0,
                f"no query reaches two-way n-gram containment ≥ {build.contam_threshold} with the "
                f"external corpus ({figures['contamination']})",
                offenders=bad["doc_id"].unique().to_list() if bad.height else [],
            )
        ]

    settings = {
        "rr": build.validity_rr_queries,
        "seed": build.seed,
        "C": build.bt_c,
        **({"soft": True} if build.bt_soft else {}),
        "external": build.contamination_corpus,
        "n": build.contam_ngram,
        "threshold": build.contam_threshold,
        **judge.provenance(),
    }
    return materialize_stage(
        context,
        store,
        settings=settings,
        upstream=REPORT_UPSTREAM,
        compute=compute,
        checks=checks,
    )
