"""Stage: Swiss tournament rounds (one asset per round), all judgments, Bradley–Terry ratings."""

import hashlib
from typing import NamedTuple

import dagster as dg
import numpy as np
import polars as pl

from saber_assets.common import full_text
from saber_assets.runtime import StageOutput, check, fail_on_backend_errors, materialize_stage
from saber_core.bradley_terry import fit_bradley_terry, rescale_ratings
from saber_core.pairing import pair_round, round_rng
from saber_resources.config import BuildConfig
from saber_resources.judge import PairwiseJudge
from saber_resources.slurm import SlurmDispatch, maybe_dispatcher
from saber_resources.storage import DuckDBStore


class Played(NamedTuple):
    """Judgments as arrays: query index, pool positions a < b, hard outcome, judge p(a)."""

    q: np.ndarray
    a: np.ndarray
    b: np.ndarray
    outcome: np.ndarray
    p_a: np.ndarray

    def bt_inputs(self, soft: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(q, a, b, y) for Bradley–Terry: y = p_a when ``soft`` (NaN where the hard outcome
        was dropped too), else the hard outcome."""
        y = np.where(np.isnan(self.outcome), np.nan, self.p_a) if soft else self.outcome
        return self.q, self.a, self.b, y

    def standings(self, n_queries: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Wins (Q, n) and the met-matrix (Q, n, n) these judgments add up to (a drop counts as
        met and adds no win)."""
        q, a, b, outcome = self.q, self.a, self.b, self.outcome
        wins = np.zeros((n_queries, n))
        met = np.zeros((n_queries, n, n), dtype=bool)
        met[q, a, b] = met[q, b, a] = True
        np.add.at(wins, (q[outcome == 1.0], a[outcome == 1.0]), 1.0)
        np.add.at(wins, (q[outcome == 0.0], b[outcome == 0.0]), 1.0)
        return wins, met


def round_name(r: int) -> str:
    """Asset (and table) name of round ``r`` (1-based)."""
    return f"tournament_round_{r:02d}"


def pool_matrix(store: DuckDBStore) -> tuple[list[str], np.ndarray]:
    """Query ids and their (Q, n) candidate doc ids in pool position order."""
    pools = store.read_table("candidate_pools").sort("query_id", "position")
    grouped = pools.group_by("query_id", maintain_order=True).agg("doc_id")
    return grouped["query_id"].to_list(), np.array(grouped["doc_id"].to_list(), dtype=object)


def played_arrays(table: pl.DataFrame | None, query_ids: list[str]) -> Played:
    """A judgments table (a round's or ``judgments``) as :class:`Played` arrays, row order kept."""
    if table is None or table.height == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Played(empty, empty, empty, np.zeros(0), np.zeros(0))
    index = {q: i for i, q in enumerate(query_ids)}
    return Played(
        np.array([index[x] for x in table["query_id"].to_list()], dtype=np.int64),
        table["pos_a"].to_numpy(),
        table["pos_b"].to_numpy(),
        table["outcome"].cast(pl.Float64).fill_null(np.nan).to_numpy(),
        table["p_a"].cast(pl.Float64).fill_null(np.nan).to_numpy(),
    )


def played_rounds(store: DuckDBStore, query_ids: list[str], before_round: int) -> Played:
    """The judgments of rounds ``1 .. before_round − 1`` (NaN outcome/p_a = dropped)."""
    tables = [store.read_table(round_name(r)) for r in range(1, before_round)]
    return played_arrays(pl.concat(tables, how="vertical") if tables else None, query_ids)


def _input_hash(*texts: str) -> str:
    return hashlib.sha256("\x1f".join(texts).encode()).hexdigest()[:16]


def pairing_settings(build: BuildConfig) -> dict[str, object]:
    """What decides the pairs of a round besides the seed and the judgments (fingerprinted):
    nothing more for Swiss; the strategy, soft outcomes and C for information pairing."""
    if build.pairing == "swiss":
        return {}
    return {"pairing": build.pairing, "bt_soft": build.bt_soft, "C": build.bt_c}


def make_round_asset(r: int) -> dg.AssetsDefinition:
    """The asset of Swiss round ``r``: pair on current standings, judge, store outcomes."""
    name = round_name(r)
    previous = [round_name(r - 1)] if r > 1 else []
    upstream = ["corpus", "candidate_pools", *previous]

    @dg.asset(name=name, group_name="tournament", deps=upstream, kinds={"duckdb"})
    def _round(
        context: dg.AssetExecutionContext,
        build: BuildConfig,
        store: DuckDBStore,
        judge: PairwiseJudge,
        slurm: SlurmDispatch,
    ) -> dg.MaterializeResult:
        def compute() -> StageOutput:
            query_ids, docs = pool_matrix(store)
            n = docs.shape[1] if docs.size else 0
            played = played_rounds(store, query_ids, r)
            wins, met = played.standings(len(query_ids), n)
            history = played.bt_inputs(build.bt_soft)
            pairs = pair_round(
                build.pairing, wins, met, history, round_rng(build.seed, r), C=build.bt_c
            )
            q_idx, slot = np.nonzero(pairs[..., 0] >= 0)
            pos_a, pos_b = pairs[q_idx, slot, 0], pairs[q_idx, slot, 1]
            texts = (
                store.read_table("corpus")
                .select("doc_id", full_text(pl.col("problem"), pl.col("solution")).alias("t"))
                .rows()
            )
            text = dict(texts)
            qs = [text[query_ids[i]] for i in q_idx]
            first = [text[docs[i, p]] for i, p in zip(q_idx, pos_a, strict=True)]
            second = [text[docs[i, p]] for i, p in zip(q_idx, pos_b, strict=True)]
            context.log.info(f"{name}: judging {len(qs)} pairs for {len(query_ids)} queries")
            dispatch = maybe_dispatcher(build, slurm, context, getattr(judge, "backend", None))
            verdict = judge.judge(qs, first, second, store, context.run.run_id, dispatch)
            s = verdict.stats
            fail_on_backend_errors(name, s.errors, s.calls, s.hits)
            p = verdict.p_first
            outcome = np.where(p > 0.5, 1.0, np.where(p < 0.5, 0.0, np.nan))
            table = pl.DataFrame(
                {
                    "query_id": [query_ids[i] for i in q_idx],
                    "round": r,
                    "slot": slot,
                    "pos_a": pos_a,
                    "pos_b": pos_b,
                    "cand_a": [docs[i, x] for i, x in zip(q_idx, pos_a, strict=True)],
                    "cand_b": [docs[i, x] for i, x in zip(q_idx, pos_b, strict=True)],
                    "outcome": outcome,
                    "winner": pl.Series(
                        [{1.0: "a", 0.0: "b"}.get(o) for o in outcome.tolist()], dtype=pl.String
                    ),
                    "p_a": p,
                    "raw": verdict.raw,
                    "drop_reason": pl.Series(verdict.drop_reason, dtype=pl.String),
                    "call_keys": verdict.call_keys,
                    "input_hash": [_input_hash(*t) for t in zip(qs, first, second, strict=True)],
                    "seed": build.seed,
                },
            ).with_columns(
                pl.col("outcome").fill_nan(None),
                *[pl.lit(v).alias(f"judge_{k}") for k, v in judge.provenance().items()],
            )
            byes = len(query_ids) * (n - n % 2) - 2 * len(q_idx)
            return StageOutput(
                {name: table},
                figures={
                    "n_pairs": table.height,
                    "n_dropped": int(table["outcome"].null_count()),
                    "llm_cache_hits": verdict.stats.hits,
                    "llm_backend_calls": verdict.stats.calls,
                    "llm_errors": verdict.stats.errors,
                    "n_byes_beyond_odd": byes,
                    "judge": judge.provenance(),
                },
            )

        return materialize_stage(
            context,
            store,
            settings={
                "seed": build.seed,
                "round": r,
                **pairing_settings(build),
                **judge.provenance(),
            },
            upstream=upstream,
            compute=compute,
        )

    return _round


def make_judgment_assets(rounds: int) -> list[dg.AssetsDefinition]:
    """The round assets, ``judgments`` (all rounds) and ``bt_ratings``."""
    round_assets = [make_round_asset(r) for r in range(1, rounds + 1)]
    round_names = [round_name(r) for r in range(1, rounds + 1)]

    @dg.asset(
        group_name="tournament",
        deps=round_names,
        check_specs=[dg.AssetCheckSpec("once_per_round_no_rematch", asset="judgments")],
    )
    def judgments(context: dg.AssetExecutionContext, store: DuckDBStore) -> dg.MaterializeResult:
        """Every judgment of every round, with its provenance."""

        def compute() -> StageOutput:
            table = pl.concat([store.read_table(n) for n in round_names], how="vertical")
            return StageOutput(
                {"judgments": table},
                figures={
                    "n_judgments": table.height,
                    "n_dropped": int(table["outcome"].null_count()),
                    "drop_reasons": dict(
                        table.filter(pl.col("outcome").is_null())
                        .group_by("drop_reason")
                        .len()
                        .head(10)
                        .rows()
                    ),
                },
            )

        def checks(tables, figures):
            t = tables["judgments"]
            plays = pl.concat(
                [t.select("query_id", "round", pl.col(c).alias("pos")) for c in ("pos_a", "pos_b")]
            )
            twice = plays.filter(pl.struct("query_id", "round", "pos").is_duplicated())
            rematch = t.filter(pl.struct("query_id", "pos_a", "pos_b").is_duplicated())
            order = t.filter(pl.col("pos_a") >= pl.col("pos_b"))
            return [
                check(
                    "once_per_round_no_rematch",
                    twice.height == 0 and rematch.height == 0 and order.height == 0,
                    "each candidate plays at most once per round, never a rematch, pairs in "
                    "candidate-id order",
                    n_double_plays=twice.height,
                    n_rematches=rematch.height,
                    n_misordered=order.height,
                )
            ]

        return materialize_stage(
            context,
            store,
            settings={"rounds": rounds},
            upstream=round_names,
            compute=compute,
            checks=checks,
        )

    @dg.asset(
        group_name="tournament",
        deps=["judgments", "candidate_pools"],
        check_specs=[
            dg.AssetCheckSpec("ratings_in_range", asset="bt_ratings"),
            dg.AssetCheckSpec("no_missing_ratings", asset="bt_ratings"),
        ],
    )
    def bt_ratings(
        context: dg.AssetExecutionContext, build: BuildConfig, store: DuckDBStore
    ) -> dg.MaterializeResult:
        """Bradley–Terry strengths per query, min–max rescaled to [0, 5]."""

        def compute() -> StageOutput:
            query_ids, docs = pool_matrix(store)
            n = docs.shape[1]
            played = played_arrays(store.read_table("judgments"), query_ids)
            q, a, b, y = played.bt_inputs(build.bt_soft)
            beta = fit_bradley_terry(q, a, b, y, len(query_ids), n, C=build.bt_c)
            rating = rescale_ratings(beta)
            decided = ~np.isnan(y)
            games = np.zeros((len(query_ids), n))
            np.add.at(games, (q[decided], a[decided]), 1)
            np.add.at(games, (q[decided], b[decided]), 1)
            wins, _ = played.standings(len(query_ids), n)
            table = pl.DataFrame(
                {
                    "query_id": np.repeat(query_ids, n),
                    "position": np.tile(np.arange(n), len(query_ids)),
                    "doc_id": docs.ravel(),
                    "strength": beta.ravel(),
                    "rating": rating.ravel(),
                    "games": games.ravel().astype(np.int64),
                    "wins": wins.ravel(),
                }
            )
            spread = table.group_by("query_id").agg(pl.col("rating").std())["rating"]
            return StageOutput(
                {"bt_ratings": table},
                figures={
                    "n_ratings": table.height,
                    "bt_C": build.bt_c,
                    "bt_outcomes": "soft (judge probabilities)" if build.bt_soft else "hard",
                    "mean_rating": float(table["rating"].mean()),
                    "mean_within_query_std": float(spread.mean()),
                },
            )

        def checks(tables, figures):
            t = tables["bt_ratings"]
            out = t.filter(
                (pl.col("rating") < 0) | (pl.col("rating") > 5) | pl.col("rating").is_nan()
            )
            pools = store.read_table("candidate_pools").select("query_id", "doc_id")
            missing = pools.join(t, on=["query_id", "doc_id"], how="anti")
            return [
                check(
                    "ratings_in_range",
                    out.height == 0,
                    "every rating lies in [0, 5]",
                    n_out_of_range=out.height,
                ),
                check(
                    "no_missing_ratings",
                    missing.height == 0,
                    "every pool candidate has a rating",
                    n_missing=missing.height,
                ),
            ]

        return materialize_stage(
            context,
            store,
            settings={"C": build.bt_c, **({"soft": True} if build.bt_soft else {})},
            upstream=["judgments", "candidate_pools"],
            compute=compute,
            checks=checks,
        )

    return [*round_assets, judgments, bt_ratings]
