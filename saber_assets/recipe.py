"""Stage: recipe sensitivity — the benchmark rebuilt from the other summary recipe.

The build's pools come from its own summaries (human-written by default, LLM-written with
``summaries: llm``). This stage selects the pools again from the other recipe's summaries (same
topic similarity, thresholds and seed; ``saber_resources.sources.alternative_summaries``), plays
the same tournament on them with the build's judge, pairing and Bradley–Terry settings, and
reports: pool overlap, the rank correlation of the two ratings of candidates present in both
pools, and nDCG@10 of BM25 and the MiniLM embedder on each variant and their shift.
"""

import hashlib
from pathlib import Path

import dagster as dg
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import polars as pl

from saber_assets.common import full_text
from saber_assets.runtime import StageOutput, check, fail_on_backend_errors, materialize_stage
from saber_assets.similarity import QUERY_BLOCK, matrix_path
from saber_assets.tournament import pairing_settings
from saber_core.bradley_terry import rescale_ratings
from saber_core.discovery import pool_frames, select_pools
from saber_core.pairing import run_pairing
from saber_core.text import TOKENIZER_VERSION, build_token_matrix, jaccard_dense_block
from saber_core.validity import mean_and_se, pool_overlap, shared_rank_correlation
from saber_eval import code_hash as eval_code_hash
from saber_eval.benchmark import MAIN_SETTING, Benchmark, Query
from saber_eval.cli import retriever_factory
from saber_eval.registry import load_registry
from saber_eval.runner import run_retriever
from saber_resources.config import BuildConfig
from saber_resources.judge import PairwiseJudge
from saber_resources.slurm import SlurmDispatch, maybe_dispatcher
from saber_resources.sources import alternative_summaries
from saber_resources.storage import DuckDBStore, stable_hash

RECIPE_RETRIEVERS = ("bm25", "st:minilm")
UPSTREAM = ["corpus", "summaries", "queries", "topic_similarity", "candidate_pools", "bt_ratings"]


def _alternative_jaccard(build: BuildConfig, tokens, query_rows: np.ndarray) -> np.ndarray:
    """Query × corpus Jaccard on the alternative summaries, as a memory-mapped artifact."""
    path = matrix_path(build, "recipe_summary_similarity")
    path.parent.mkdir(parents=True, exist_ok=True)
    matrix = np.lib.format.open_memmap(
        path, mode="w+", dtype=np.float32, shape=(len(query_rows), tokens.n_texts)
    )
    for start in range(0, len(query_rows), QUERY_BLOCK):
        rows = query_rows[start : start + QUERY_BLOCK]
        matrix[start : start + len(rows)] = jaccard_dense_block(tokens.rows(rows), tokens)
    matrix.flush()
    return np.load(path, mmap_mode="r")


def _play(context, build, store, judge, dispatch, query_ids, docs, text):
    """The build's tournament on the alternative pools: (result, judgments table, backend
    calls, cache hits)."""
    log: list[dict] = []
    paid = {"calls": 0, "hits": 0}

    def judge_round(r: int, pairs: np.ndarray) -> np.ndarray:
        qi, slot = np.nonzero(pairs[..., 0] >= 0)
        a, b = pairs[qi, slot, 0], pairs[qi, slot, 1]
        cand_a = [docs[i, x] for i, x in zip(qi, a, strict=True)]
        cand_b = [docs[i, x] for i, x in zip(qi, b, strict=True)]
        verdict = judge.judge(
            [text[query_ids[i]] for i in qi],
            [text[d] for d in cand_a],
            [text[d] for d in cand_b],
            store,
            context.run.run_id,
            dispatch,
        )
        s = verdict.stats
        fail_on_backend_errors(f"recipe round {r + 1}", s.errors, s.calls, s.hits)
        paid["calls"] += s.calls
        paid["hits"] += s.hits
        context.log.info(f"recipe_sensitivity: round {r + 1}/{build.rounds}, {len(qi)} pairs")
        log.append(
            {
                "query_id": [query_ids[i] for i in qi],
                "round": np.full(len(qi), r + 1),
                "slot": slot,
                "pos_a": a,
                "pos_b": b,
                "cand_a": cand_a,
                "cand_b": cand_b,
                "p_a": verdict.p_first,
                "drop_reason": verdict.drop_reason,
                "call_keys": verdict.call_keys,
            }
        )
        out = np.full(pairs.shape[:2], np.nan)
        out[qi, slot] = verdict.p_first
        return out

    result = run_pairing(
        len(query_ids),
        docs.shape[1],
        build.rounds,
        judge_round,
        seed=build.seed,
        strategy=build.pairing,
        soft=build.bt_soft,
        C=build.bt_c,
    )
    frames = [
        pl.DataFrame(part, schema_overrides={"drop_reason": pl.String}).with_columns(
            pl.col("p_a").fill_nan(None)
        )
        for part in log
    ]
    table = pl.concat(frames) if frames else pl.DataFrame()
    return result, table, paid["calls"], paid["hits"]


def _digest(frame: pl.DataFrame | None) -> str | None:
    """sha256 of the alternative summaries (doc_id, summary), in row order."""
    if frame is None:
        return None
    digest = hashlib.sha256()
    for doc_id, summary in frame.select("doc_id", "summary").iter_rows():
        digest.update(f"{doc_id}\x1f{summary}\x1e".encode())
    return digest.hexdigest()


def _benchmark(name, query_ids, pools, ratings, texts, domains) -> Benchmark:
    """An in-memory benchmark (the export's shape) for the retriever evaluation; ``texts`` maps
    doc_id → (problem, solution)."""
    queries = tuple(
        Query(
            query_id=q,
            problem=texts[q][0],
            solution=texts[q][1],
            domain=domains[q],
            candidates=tuple(pool),
            relevance=np.asarray(rating, dtype=np.float64),
            jaccard=None,
        )
        for q, pool, rating in zip(query_ids, pools, ratings, strict=True)
    )
    digest = stable_hash({"q": list(query_ids), "p": [list(p) for p in pools],
                          "r": [np.round(r, 9).tolist() for r in ratings]})  # fmt: skip
    return Benchmark(path=Path(f"recipe-{name}"), queries=queries, corpus=texts, hash=digest)


def _ndcg(build, variants: dict[str, Benchmark], log) -> pl.DataFrame:
    """Per retriever × variant × query nDCG@10 on the main setting."""
    make = retriever_factory(build.home_path / "cache" / "eval_cache.duckdb", seed=build.seed)
    registry = load_registry()
    rows = []
    for spec in RECIPE_RETRIEVERS:
        retriever = make(spec)
        for origin, benchmark in variants.items():
            result = run_retriever(benchmark, retriever, MAIN_SETTING, registry.get(spec))
            log(f"recipe_sensitivity: {spec} on {origin}-summary pools: nDCG@10 {result.mean:.3f}")
            rows += [
                {"retriever": spec, "summary_origin": origin, "query_id": q, "ndcg@10": v}
                for q, v in zip(result.query_ids, result.ndcg.tolist(), strict=True)
            ]
    return pl.DataFrame(rows)


def _plot(build, shared: pl.DataFrame, ndcg: pl.DataFrame, own: str, other: str):
    out = build.export_dir
    out.mkdir(parents=True, exist_ok=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8))
    left.scatter(shared[f"rating_{own}"], shared[f"rating_{other}"], s=10, alpha=0.6)
    left.plot([0, 5], [0, 5], color="grey", linewidth=0.8)
    left.set_xlabel(f"rating, {own}-summary pools (this build)")
    left.set_ylabel(f"rating, {other}-summary pools")
    left.set_title("candidates in both pools")
    means = ndcg.group_by("retriever", "summary_origin").agg(pl.col("ndcg@10").mean())
    specs = list(RECIPE_RETRIEVERS)
    for k, origin in enumerate((own, other)):
        values = [
            means.filter((pl.col("retriever") == s) & (pl.col("summary_origin") == origin))[
                "ndcg@10"
            ].item()
            for s in specs
        ]
        right.bar(np.arange(len(specs)) + 0.4 * k, values, width=0.4, label=f"{origin} summaries")
    right.set_xticks(np.arange(len(specs)) + 0.2, specs)
    right.set_ylabel("nDCG@10 (statement → full)")
    right.set_ylim(0, 1)
    right.legend(fontsize=8)
    fig.tight_layout()
    path = out / "validity_recipe.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


@dg.asset(
    group_name="validity",
    deps=UPSTREAM,
    kinds={"duckdb"},
    check_specs=[dg.AssetCheckSpec("recipe_tournament_valid", asset="recipe_sensitivity")],
)
def recipe_sensitivity(
    context: dg.AssetExecutionContext,
    build: BuildConfig,
    store: DuckDBStore,
    judge: PairwiseJudge,
    slurm: SlurmDispatch,
) -> dg.MaterializeResult:
    """Pools, tournament and ratings from the other summary recipe; overlap, rank correlation
    of shared candidates' ratings and the BM25 / MiniLM nDCG@10 shift between the two."""
    corpus = store.read_table("corpus")
    own = "llm" if (store.read_table("summaries")["summary_origin"] == "llm").any() else "human"
    alternative, other, description = alternative_summaries(
        build.recipe_summaries, build.corpus, own, corpus
    )

    def compute() -> StageOutput:
        if alternative is None:
            empty = {  # written empty, so no table of an earlier recipe run stays behind
                "recipe_queries": {"query_id": pl.String, "pool_overlap": pl.Float64},
                "recipe_pools": {"query_id": pl.String, "doc_id": pl.String},
                "recipe_judgments": {"query_id": pl.String, "p_a": pl.Float64},
                "recipe_ndcg": {"retriever": pl.String, "ndcg@10": pl.Float64},
            }
            return StageOutput(
                {name: pl.DataFrame(schema=schema) for name, schema in empty.items()},
                figures={"recipe": f"n/a: {description}", "own_summaries": own},
            )
        aligned = corpus.select("doc_id").join(alternative, on="doc_id", how="left")
        missing = int(aligned["summary"].null_count())
        tokens = build_token_matrix(aligned["summary"])
        queries = store.read_table("queries")
        jaccard = _alternative_jaccard(build, tokens, queries["doc_index"].to_numpy())
        found = select_pools(
            queries["doc_index"].to_numpy(),
            np.load(matrix_path(build, "topic_similarity"), mmap_mode="r"),
            jaccard,
            build_token_matrix(corpus["problem"]),
            build.pool_config(),
            build.seed,
        )
        alt_pools, _ = pool_frames(found, queries["query_id"].to_list(), corpus["doc_id"])
        ratings = store.read_table("bt_ratings").sort("query_id", "position")
        both = sorted(set(ratings["query_id"]) & set(alt_pools["query_id"]))
        unpooled = ratings["query_id"].n_unique() - len(both)  # other recipe could not fill
        if 0 < build.recipe_queries < len(both):
            pick = np.random.default_rng([build.seed, 9]).choice(
                len(both), size=build.recipe_queries, replace=False
            )
            both = [both[i] for i in np.sort(pick)]
        alt_pools = alt_pools.filter(pl.col("query_id").is_in(both)).sort("query_id", "position")
        grouped = alt_pools.group_by("query_id", maintain_order=True).agg("doc_id")
        query_ids = grouped["query_id"].to_list()
        docs = np.array(grouped["doc_id"].to_list(), dtype=object)
        text = dict(
            corpus.select("doc_id", full_text(pl.col("problem"), pl.col("solution"))).rows()
        )
        dispatch = maybe_dispatcher(build, slurm, context, getattr(judge, "backend", None))
        result, judgments, calls, hits = _play(
            context, build, store, judge, dispatch, query_ids, docs, text
        )
        alt_rating = rescale_ratings(result.strengths)
        alt_pools = alt_pools.with_columns(
            pl.Series("strength", result.strengths.ravel()),
            pl.Series("rating", alt_rating.ravel()),
            pl.lit(other).alias("summary_origin"),
        )
        mine = (
            ratings.filter(pl.col("query_id").is_in(both))
            .group_by("query_id", maintain_order=True)
            .agg("doc_id", "rating")
        )
        overlap = pool_overlap(mine["doc_id"].to_list(), docs.tolist())
        corr = shared_rank_correlation(
            mine["doc_id"].to_list(), mine["rating"].to_list(), docs.tolist(), alt_rating.tolist()
        )
        per_query = pl.DataFrame(
            {
                "query_id": query_ids,
                "pool_overlap": overlap,
                "n_shared": corr.n_shared,
                "spearman": corr.spearman,
                "kendall_tau": corr.kendall,
            }
        ).with_columns(pl.col("spearman", "kendall_tau").fill_nan(None))
        shared = ratings.select("query_id", "doc_id", pl.col("rating").alias(f"rating_{own}")).join(
            alt_pools.select("query_id", "doc_id", pl.col("rating").alias(f"rating_{other}")),
            on=["query_id", "doc_id"],
        )
        domains = dict(queries.select("query_id", "domain").rows())
        sides = {d: (p, t) for d, p, t in corpus.select("doc_id", "problem", "solution").rows()}
        variants = {
            own: _benchmark(own, query_ids, mine["doc_id"].to_list(), mine["rating"].to_list(),
                            sides, domains),
            other: _benchmark(other, query_ids, docs.tolist(), alt_rating, sides, domains),
        }  # fmt: skip
        ndcg = _ndcg(build, variants, context.log.info)
        means = ndcg.group_by("retriever", "summary_origin").agg(pl.col("ndcg@10").mean())
        mean = {(r, o): v for r, o, v in means.rows()}
        rho, rho_se = mean_and_se(corr.spearman)
        tau, tau_se = mean_and_se(corr.kendall)
        plot = _plot(build, shared, ndcg, own, other)
        figures = {
            "recipe": description,
            "own_summaries": own,
            "other_summaries": other,
            "n_queries_compared": len(query_ids),
            "n_queries_without_other_recipe_pool": unpooled,
            "n_docs_without_alternative_summary": missing,
            "mean_pool_overlap": float(overlap.mean()),
            "mean_shared_candidates": float(corr.n_shared.mean()),
            "shared_rating_spearman": rho,
            "shared_rating_spearman_se": rho_se,
            "shared_rating_kendall_tau": tau,
            "shared_rating_kendall_tau_se": tau_se,
            "ndcg@10": {f"{r} / {o} summaries": float(v) for (r, o), v in mean.items()},
            "ndcg_shift_llm_minus_human": {
                r: float(mean[(r, "llm")] - mean[(r, "human")]) for r in RECIPE_RETRIEVERS
            },
            "recipe_judgments": judgments.height,
            "recipe_judge_backend_calls": calls,
            "recipe_judge_cache_hits": hits,
        }
        return StageOutput(
            {
                "recipe_queries": per_query,
                "recipe_pools": alt_pools,
                "recipe_judgments": judgments,
                "recipe_ndcg": ndcg,
            },
            figures=figures,
            plots={"recipe": plot},
        )

    settings = {
        "recipe": build.recipe_summaries,
        "recipe_queries": build.recipe_queries,
        "description": description,
        "alternative": _digest(alternative),
        **build.pool_config().as_provenance(),
        "seed": build.seed,
        "rounds": build.rounds,
        "C": build.bt_c,
        "soft": build.bt_soft,
        **pairing_settings(build),
        **judge.provenance(),
        "tokenizer": TOKENIZER_VERSION,
        "retrievers": list(RECIPE_RETRIEVERS),
        "eval_code": eval_code_hash(),
    }

    def checks(tables, figures):
        pools, t = tables.get("recipe_pools"), tables.get("recipe_judgments")
        if pools is None or t is None or t.height == 0:
            return [
                check("recipe_tournament_valid", True, f"nothing to check: {figures['recipe']}")
            ]
        size = build.pool_config().pool_size
        bad_size = pools.group_by("query_id").len().filter(pl.col("len") != size)
        self_rows = pools.filter(pl.col("query_id") == pl.col("doc_id"))
        plays = pl.concat(
            [t.select("query_id", "round", pl.col(c).alias("pos")) for c in ("pos_a", "pos_b")]
        )
        twice = plays.filter(pl.struct("query_id", "round", "pos").is_duplicated()).height
        rematch = t.filter(pl.struct("query_id", "pos_a", "pos_b").is_duplicated()).height
        return [
            check(
                "recipe_tournament_valid",
                bad_size.height == 0 and self_rows.height == 0 and twice == 0 and rematch == 0,
                f"other-recipe pools have {size} candidates, never the query itself; each "
                "candidate plays at most once per round and never a rematch",
                n_bad_pools=bad_size.height,
                n_self=self_rows.height,
                n_double_plays=twice,
                n_rematches=rematch,
            )
        ]

    return materialize_stage(
        context, store, settings=settings, upstream=UPSTREAM, compute=compute, checks=checks
    )
