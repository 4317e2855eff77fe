"""``saber judge probe``: ask a build's judge about a sample of its pool pairs, in both orders and
repeatedly, and fit the study's judge to the answers (docs/judge-probe.md).

The judge is the one the build plan names (:func:`saber_llm.factory.make_judge`), through
the same backend and the build's DuckDB call cache: a call the build already made (the same
pair, order, seed and temperature) is a cache hit, every new call is stored with the probe's run
id. Estimation and figures are pure (:mod:`saber_core.validity.judge_probe`,
:mod:`saber_core.validity.judge_fit`).

Conditions: ``configured`` — the judge as the build runs it, ``repeats`` calls per pair and order
with seeds ``seed + 1000 r`` (repeat 0 is the build's own call). At temperature 0 (greedy) a
repeat is a new call with another seed that must give the same answer, so test–retest then
measures the engine's determinism, not the judge's noise; the probe also runs ``sampled`` — the
same calls at ``sample_temperature`` (default 1.0), where a repeat is a new draw.

Reference gaps (``gap``): ``embedding`` (default) — cosine similarity of MiniLM embeddings of
the query and the candidate, the texts the judge sees; independent of an LLM judge and
available for every build. ``ratings`` — the Bradley–Terry strengths of ``reference_home``'s
build (the probed build itself by default): circular when the probed judge made them (a judge
without signal still "agrees" with ratings fitted to its own answers), so use another judge's
build of the same pools.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from saber_core.inputs.corpus import full_text_expr
from saber_core.parsing import parse_judge_answer
from saber_core.validity.judge_fit import PairCounts, fit_judge, predicted_figures
from saber_core.validity.judge_probe import (
    gap_bins,
    probe_figures,
    standardized_gap,
    stratified_sample,
)
from saber_llm.cache import CallStats
from saber_llm.judges import PROVENANCE_COLUMNS, LLMJudge, PairwiseJudge
from saber_store.database import DuckDBStore

GAPS = ("embedding", "ratings")
SEED_STRIDE = 1000


class ProbeError(ValueError):
    """A probe that cannot run (missing tables, no pairs, an unusable setting)."""


@dataclass(frozen=True)
class ProbeSettings:
    """What a probe asks (module docstring); every field is recorded in ``judge-probe.json``."""

    pairs: int = 300
    bins: int = 5
    repeats: int = 2
    sample_temperature: float = 1.0
    gap: str = "embedding"
    reference_home: str = ""
    target_sd: float = 1.5
    seed: int = 0
    bootstrap: int = 200
    fit: bool = True


@dataclass(frozen=True)
class PoolPairs:
    """Every pool pair of the build with its reference gap (``a`` preferred by the reference)."""

    query_id: np.ndarray
    cand_a: np.ndarray
    cand_b: np.ndarray
    gap: np.ndarray


def _require(store: DuckDBStore, *tables: str) -> None:
    missing = [t for t in tables if not store.has_table(t)]
    if missing:
        raise ProbeError(
            f"the build at {store.database} has no table {', '.join(missing)}: run `saber build` "
            "(the probe reads a finished build's pools and texts)"
        )


def build_texts(store: DuckDBStore) -> dict[str, str]:
    """doc_id → the full text (problem and solution) every judge sees."""
    corpus = store.read_table("corpus")
    return dict(
        corpus.select("doc_id", full_text_expr(pl.col("problem"), pl.col("solution"))).rows()
    )


def reference_scores(
    settings: ProbeSettings,
    pools: pl.DataFrame,
    texts: dict[str, str],
    embedding_cache: str,
    store: DuckDBStore,
) -> pl.DataFrame:
    """``query_id, doc_id, score``: the reference score of every pool candidate (NaN-free)."""
    if settings.gap == "embedding":
        from saber_llm.embeddings.embedder import embed_texts

        queries = pools["query_id"].unique(maintain_order=True).to_list()
        docs = pools["doc_id"].unique(maintain_order=True).to_list()
        vectors = embed_texts(
            [texts[q] for q in queries] + [texts[d] for d in docs], cache_path=embedding_cache
        )
        qv = dict(zip(queries, vectors[: len(queries)], strict=True))
        dv = dict(zip(docs, vectors[len(queries) :], strict=True))
        score = [float(qv[q] @ dv[d]) for q, d in pools.select("query_id", "doc_id").iter_rows()]
        return pools.select("query_id", "doc_id").with_columns(pl.Series("score", score))
    source = DuckDBStore(database=str(Path(settings.reference_home) / "saber.duckdb"))
    source = store if not settings.reference_home else source
    _require(source, "bt_ratings")
    ratings = source.read_table("bt_ratings").select("query_id", "doc_id", score="strength")
    return (
        pools.select("query_id", "doc_id")
        .join(ratings, on=["query_id", "doc_id"])
        .filter(pl.col("score").is_not_nan())
    )


def pool_pairs(scores: pl.DataFrame, target_sd: float) -> PoolPairs:
    """All pairs of every query's scored candidates, oriented so that ``a`` has the higher
    reference score (ties: the first in pool order), with the standardized gap."""
    qs, aa, bb, ra, rb, sds = [], [], [], [], [], []
    for (query,), group in scores.group_by("query_id", maintain_order=True):
        docs, r = group["doc_id"].to_list(), group["score"].to_numpy()
        sd = float(np.std(r))
        i, j = np.triu_indices(len(docs), k=1)
        swap = r[j] > r[i]
        first, second = np.where(swap, j, i), np.where(swap, i, j)
        qs += [query] * len(i)
        aa += [docs[k] for k in first]
        bb += [docs[k] for k in second]
        ra.append(r[first])
        rb.append(r[second])
        sds.append(np.full(len(i), sd))
    if not qs:
        raise ProbeError("no pool has two scored candidates: nothing to probe")
    gap = standardized_gap(np.concatenate(ra), np.concatenate(rb), np.concatenate(sds), target_sd)
    return PoolPairs(
        np.array(qs, dtype=object), np.array(aa, dtype=object), np.array(bb, dtype=object), gap
    )


def conditions(judge: PairwiseJudge, settings: ProbeSettings) -> list[tuple[str, float | None]]:
    """``(name, temperature)`` of every condition (None: a judge without sampling)."""
    if not isinstance(judge, LLMJudge):
        return [("configured", None)]
    out: list[tuple[str, float | None]] = [("configured", judge.temperature)]
    if judge.temperature == 0 and settings.sample_temperature > 0:
        out.append(("sampled", settings.sample_temperature))
    return out


def _verdicts(p_first: np.ndarray, raw: list[str]) -> np.ndarray:
    """1.0 where the first shown won, 0.0 where the second did, NaN where dropped: the answer's
    text when it is a verdict (a sampled answer), else P(first) against ½."""
    out = np.full(len(raw), np.nan)
    for i, (p, text) in enumerate(zip(p_first, raw, strict=True)):
        value, _ = parse_judge_answer(text)
        if value is not None:
            out[i] = 1.0 if value == 1 else 0.0
        elif np.isfinite(p) and p != 0.5:
            out[i] = float(p > 0.5)
    return out


def ask(
    judge: PairwiseJudge,
    pairs: PoolPairs,
    texts: dict[str, str],
    settings: ProbeSettings,
    store: DuckDBStore,
    run_id: str,
    dispatch: Any = None,
    log: Callable[[str], None] = print,
) -> tuple[pl.DataFrame, CallStats]:
    """One row per call: every condition × repeat × order of every sampled pair."""
    n = len(pairs.gap)
    q = [texts[x] for x in pairs.query_id]
    a, b = [texts[x] for x in pairs.cand_a], [texts[x] for x in pairs.cand_b]
    total, frames = CallStats(), []
    for name, temperature in conditions(judge, settings):
        for r in range(settings.repeats):
            seed = getattr(judge, "seed", 0) + SEED_STRIDE * r
            asked = judge
            if isinstance(judge, LLMJudge):
                update = {"both_orders": False, "seed": seed, "temperature": temperature}
                asked = judge.model_copy(update=update)
            t0 = time.monotonic()
            out = asked.judge(q + q, a + b, b + a, store, run_id, dispatch)
            total.hits += out.stats.hits
            total.calls += out.stats.calls
            total.errors += out.stats.errors
            log(
                f"{name} (temperature {temperature}), repeat {r}: {2 * n} calls, "
                f"{out.stats.hits} cached, {out.stats.calls} asked, {out.stats.errors} errors, "
                f"{time.monotonic() - t0:.0f} s"
            )
            first = _verdicts(np.asarray(out.p_first, dtype=float), list(out.raw))
            a_first = np.r_[np.ones(n, bool), np.zeros(n, bool)]
            frames.append(
                pl.DataFrame(
                    {
                        "condition": [name] * (2 * n),
                        "temperature": [temperature] * (2 * n),
                        "seed": [seed] * (2 * n),
                        "repeat": [r] * (2 * n),
                        "pair": np.r_[np.arange(n), np.arange(n)],
                        "a_first": a_first,
                        "first_wins": first,
                        "a_wins": np.where(a_first, first, 1.0 - first),
                        "p_first": np.asarray(out.p_first, dtype=float),
                        "raw": list(out.raw),
                        "drop_reason": list(out.drop_reason),
                        "call_key": list(out.call_keys),
                    },
                    schema_overrides={"temperature": pl.Float64, "drop_reason": pl.String},
                )
            )
    return pl.concat(frames), total


def build_judges(store: DuckDBStore) -> list[dict[str, str | None]]:
    """The distinct judge provenances of the build's judgments."""
    if not store.has_table("judgments"):
        return []
    table = store.read_table("judgments")
    cols = [c for c in PROVENANCE_COLUMNS if c in table.columns]
    return table.select(cols).unique().to_dicts() if cols else []


def _finite(x: Any) -> Any:
    """JSON-safe: infinities and NaN as strings / None."""
    if isinstance(x, float):
        if math.isnan(x):
            return None
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x


def run_probe(
    store: DuckDBStore,
    judge: PairwiseJudge,
    settings: ProbeSettings,
    embedding_cache: str = "",
    dispatch: Any = None,
    log: Callable[[str], None] = print,
) -> tuple[dict, pl.DataFrame]:
    """Sample, ask, summarize and fit (module docstring): the JSON-able result and the calls."""
    if settings.gap not in GAPS:
        raise ProbeError(f"gap must be one of {', '.join(GAPS)}, got {settings.gap!r}")
    if settings.repeats < 1 or settings.pairs < 1 or settings.bins < 1:
        raise ProbeError("pairs, bins and repeats must be at least 1")
    _require(store, "candidate_pools", "corpus")
    t0 = time.monotonic()
    pools = store.read_table("candidate_pools").sort("query_id", "position")
    texts = build_texts(store)
    scores = reference_scores(settings, pools, texts, embedding_cache, store)
    every = pool_pairs(scores, settings.target_sd)
    edges, bin_all = gap_bins(every.gap, settings.bins)
    chosen = stratified_sample(bin_all, settings.pairs, settings.seed)
    pairs = PoolPairs(*(x[chosen] for x in asdict(every).values()))
    bin_of = bin_all[chosen]
    run_id = f"judge-probe-{uuid.uuid4().hex[:8]}"
    log(
        f"probing {len(chosen)} of {len(every.gap)} pool pairs ({len(edges) - 1} gap bins, "
        f"seed {settings.seed}); run {run_id}"
    )
    calls, stats = ask(judge, pairs, texts, settings, store, run_id, dispatch, log)
    calls = calls.with_columns(
        pl.Series("query_id", pairs.query_id[calls["pair"]], dtype=pl.String),
        pl.Series("cand_a", pairs.cand_a[calls["pair"]], dtype=pl.String),
        pl.Series("cand_b", pairs.cand_b[calls["pair"]], dtype=pl.String),
        pl.Series("gap", pairs.gap[calls["pair"]]),
        pl.Series("bin", bin_of[calls["pair"]]),
    )
    result: dict[str, Any] = {
        "run_id": run_id,
        "settings": asdict(settings),
        "gap": {
            "kind": settings.gap,
            "target_sd": settings.target_sd,
            "bin_edges": edges.tolist(),
            "pool_pairs": len(every.gap),
        },
        "judge": judge.provenance(),
        "build_judges": build_judges(store),
        "calls": {"cached": stats.hits, "asked": stats.calls, "errors": stats.errors},
        "conditions": {},
        "notes": probe_notes(judge, settings, store),
    }
    for (name,), part in calls.group_by("condition", maintain_order=True):
        cols = {c: part[c].to_numpy() for c in ("pair", "a_first", "repeat", "a_wins", "gap")}
        figures = probe_figures(
            cols["pair"],
            cols["a_first"],
            cols["repeat"],
            cols["a_wins"],
            cols["gap"],
            part["bin"].to_numpy(),
            part["p_first"].to_numpy(),
        )
        entry: dict[str, Any] = {"temperature": part["temperature"][0], "figures": figures}
        note = unsampled_note(entry["temperature"], figures)
        if note:
            result["notes"].append(note)
        if settings.fit:
            counts = PairCounts.from_calls(
                cols["pair"], cols["gap"], cols["a_first"], cols["a_wins"]
            )
            log(f"{name}: fitting the study's judge ({settings.bootstrap} bootstrap refits)")
            fit = fit_judge(
                counts, int(np.isfinite(cols["a_wins"]).sum()), settings.bootstrap, settings.seed
            )
            entry["fit"] = fit.summary()
            entry["fit"]["predicted"] = predicted_by_bin(counts, fit.theta, part)
        result["conditions"][name] = entry
    result["seconds"] = round(time.monotonic() - t0, 1)
    return _finite(result), calls


def predicted_by_bin(counts: PairCounts, theta: np.ndarray, calls: pl.DataFrame) -> dict:
    """The fitted judge's expected figures (overall and per gap bin), to set against the
    measured ones (a check of the fit)."""
    pred = predicted_figures(counts, theta)
    answered = calls.filter(pl.col("a_wins").is_not_nan())
    bins = answered.group_by("pair").agg(pl.col("bin").first()).sort("pair")["bin"].to_numpy()
    first = 0.5 * (pred["first_answer_a_first"] + pred["first_answer_b_first"])
    out = {
        "first_answer_share": float(first.mean()),
        "a_wins": float(pred["a_wins"].mean()),
        "test_retest_agreement": float(pred["test_retest"].mean()),
        "order_swap_consistency": float(pred["order_swap_consistency"].mean()),
        "by_gap_bin": [],
    }
    for b in np.unique(bins):
        sel = bins == b
        out["by_gap_bin"].append(
            {
                "bin": int(b),
                "first_answer_share": float(first[sel].mean()),
                "a_wins": float(pred["a_wins"][sel].mean()),
            }
        )
    return out


def unsampled_note(temperature: float | None, figures: dict) -> str | None:
    """A warning when a backend answered every repeat alike at a temperature > 0 although the
    judge reports P(first) well inside (0, 1): its choice answers are not sampled (the embedded
    engine scores the choices and answers the best), so retest at that temperature is 1 by
    construction."""
    retest = figures["test_retest_agreement"]
    p = figures.get("mean_p_first")
    if not temperature or retest["n"] == 0 or retest["k"] < retest["n"] or p is None:
        return None
    if not 0.05 < p < 0.95:
        return None
    return (
        f"at temperature {temperature} every repeat gave the same answer although the judge "
        f"reports P(first) {p:.2f} on average: the backend does not sample its choice answers"
    )


def probe_notes(judge: PairwiseJudge, settings: ProbeSettings, store: DuckDBStore) -> list[str]:
    """What a reader must know to read the figures (greedy retest, circular references)."""
    notes = []
    kind = judge.provenance().get("judge_kind") or ""
    if isinstance(judge, LLMJudge) and judge.temperature == 0:
        notes.append(
            "the configured judge is greedy (temperature 0): a repeat is a new call with another "
            "seed that should give the same answer, so its test–retest measures the engine's "
            f"determinism; `sampled` repeats the calls at temperature "
            f"{settings.sample_temperature}, where each call is a new draw"
        )
    if not isinstance(judge, LLMJudge):
        notes.append(f"{kind} has no sampling: every repeat gives the same answer by design")
    if settings.gap == "embedding" and kind.startswith("embedding"):
        notes.append("circular: the reference gap is the probed judge's own cosine margin")
    if settings.gap == "ratings":
        same = (
            not settings.reference_home
            or Path(settings.reference_home).resolve() == Path(store.database).resolve().parent
        )
        probed = judge.provenance().get("judge_model_hash")
        if same and any(j.get("judge_model_hash") == probed for j in build_judges(store)):
            notes.append(
                "circular: the reference ratings were fitted to this judge's own answers "
                "(use --reference-home with a build by another judge, or --gap embedding)"
            )
    return notes
