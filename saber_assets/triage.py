"""Pointwise grades of the pools and the triage of each round by them (issue 29): the helpers of
the ``pointwise_grades`` asset and of the round assets when ``tournament.triage`` is on.

The grader is a retriever of the registry (``tournament.pointwise_judge``: ``st:minilm``,
``seqcls:…``, ``ce:…``, ``yesno:<profile>``, ``llm:<profile>``), run on the pools in the main
setting as the evaluation runs it (its input envelope applied; the LLM scorers through the
build's DuckDB call cache). ``yesno:build`` and ``llm:build`` grade with the build's own LLM
backend, where its other LLM stages run it (the local LLM server, or the run's SLURM
allocation). The triage rules are :mod:`saber_core.validity.triage_round`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from saber_config import PlanReads
from saber_core.rating.comparisons import PlayedRounds
from saber_core.tournament.judgment_table import RoundRules, TextJudge, input_hash, judge_pairs
from saber_core.validity.triage_round import (
    TRIAGE_JUDGE_KIND,
    RoundSplit,
    TriageRule,
    calibration_slope,
    decided_verdicts,
    split_round,
)
from saber_eval.benchmark import MAIN_SETTING, in_memory_benchmark
from saber_eval.engines.base import Retriever
from saber_eval.engines.llm import (
    BUILD_PROFILE,
    LLMPointwiseRetriever,
    judge_scorer_options,
    llm_backend_for_profile,
)
from saber_eval.registry import RetrieverEntry, load_registry
from saber_eval.retrievers import engine_class, retriever_factory
from saber_eval.runner import build_tasks, run_retriever
from saber_llm.judges import PROVENANCE_COLUMNS, provenance_row
from saber_llm.prompts import load_prompt
from saber_store.database import DuckDBStore, stable_hash

GRADE_COLUMNS = {
    "query_id": pl.String,
    "position": pl.Int64,
    "doc_id": pl.String,
    "score": pl.Float64,
    **dict.fromkeys(PROVENANCE_COLUMNS, pl.String),
    "run_id": pl.String,
    "input_hash": pl.String,
}


def provenance_columns(table: pl.DataFrame, provenance: Mapping[str, str | None]) -> pl.DataFrame:
    """``table`` with one constant String column per provenance field."""
    return table.with_columns([pl.lit(v, dtype=pl.String).alias(k) for k, v in provenance.items()])


def grader_provenance(
    spec: str, entry: RetrieverEntry, retriever: Retriever, notes: Mapping
) -> dict[str, str | None]:
    """The grader's identity in the judgments' provenance schema: engine, model, a hash of its
    registry entry (model, options, envelope), its backend and, for LLM scorers, the prompt."""
    prompt_name = getattr(type(retriever), "prompt_name", None)
    prompt = load_prompt(prompt_name) if prompt_name else None
    backend = notes.get("backend")
    return provenance_row(
        judge_kind=f"pointwise-{entry.engine}",
        judge_model=entry.model or spec,
        judge_model_hash=stable_hash({**entry.as_item(), "backend": backend}),
        judge_backend=json.dumps(backend, sort_keys=True) if backend else entry.engine,
        prompt_id=prompt.label if prompt else None,
        prompt_hash=prompt.hash if prompt else None,
        sampling_params=json.dumps({"temperature": 0.0, "seed": getattr(retriever, "seed", 0)})
        if prompt
        else None,
    )


def grades_with_build_llm(spec: str) -> bool:
    """Whether the grader ``spec`` is an LLM scorer of the build's own LLM (``yesno:build``)."""
    entry = load_registry().get(spec)
    is_llm_scorer = issubclass(engine_class(entry), LLMPointwiseRetriever)
    return is_llm_scorer and entry.model == BUILD_PROFILE


def grader_inputs(spec: str, llm: Any = None) -> dict[str, Any]:
    """What the grades depend on outside the plan: the spec, its registry entry and, for a
    grader of the build's LLM (``llm`` given), that backend's identity."""
    entry = load_registry().get(spec).as_item() if spec else None
    return {"grader": spec, "entry": entry, **({"llm": llm.identity()} if llm else {})}


def build_llm_factory(plan: PlanReads, llm: Any):
    """The LLM scorers' backend factory in a build: ``build`` → the build's backend and its
    judge's mode and token budget; any other profile → that profile's backend."""

    def factory(profile: str, kind: str = "") -> tuple[Any, dict[str, Any]]:
        if profile != BUILD_PROFILE:
            return llm_backend_for_profile(profile, kind)
        if kind:
            raise ValueError(
                f"pointwise judge of profile {BUILD_PROFILE!r}: the option llm_backend={kind!r} "
                "does not apply (it grades with the build's llm.backend)"
            )
        return llm, judge_scorer_options(plan.tournament)

    return factory


def grade_pools(
    plan: PlanReads,
    store: DuckDBStore,
    spec: str,
    run_id: str,
    llm: Any = None,
    dispatch: Any = None,
) -> tuple[pl.DataFrame, dict]:
    """One row per pool candidate: the grader ``spec``'s score, its provenance, the run and the
    hash of the (query, candidate) texts it saw; and the grader's notes (drops, cache calls).
    ``llm``/``dispatch``: the build's LLM backend and where its calls go (``yesno:build``)."""
    pools = store.read_table("candidate_pools").sort("query_id", "position")
    grouped = pools.group_by("query_id", maintain_order=True).agg("doc_id")
    query_ids, docs = grouped["query_id"].to_list(), grouped["doc_id"].to_list()
    corpus = store.read_table("corpus")
    sides = {d: (p, s) for d, p, s in corpus.select("doc_id", "problem", "solution").rows()}
    domains = dict(store.read_table("queries").select("query_id", "domain").rows())
    bench = in_memory_benchmark(
        "pointwise-grades", query_ids, docs, [[0.0] * len(p) for p in docs], sides, domains
    )
    registry = load_registry()
    entry = registry.get(spec)
    make = retriever_factory(
        plan.plan.paths.embedding_cache,
        seed=plan.seed,
        registry=registry,
        llm_store=store,
        backend_factory=build_llm_factory(plan, llm),
        dispatch=dispatch,
        run_id=run_id,
    )
    retriever = make(spec)
    result = run_retriever(bench, retriever, MAIN_SETTING, entry)
    tasks = build_tasks(bench, MAIN_SETTING, entry)
    hashes = [input_hash(t.query, d) for t in tasks for d in t.documents]
    table = pl.DataFrame(
        {
            "query_id": [q for q, pool in zip(query_ids, docs, strict=True) for _ in pool],
            "position": [i for pool in docs for i in range(len(pool))],
            "doc_id": [d for pool in docs for d in pool],
            "score": np.concatenate(result.scores) if result.scores else [],
        },
        schema_overrides={k: GRADE_COLUMNS[k] for k in ("query_id", "position", "doc_id")},
    )
    provenance = grader_provenance(spec, entry, retriever, result.notes)
    table = provenance_columns(table, provenance).with_columns(
        pl.lit(run_id, dtype=pl.String).alias("run_id"), pl.Series("input_hash", hashes)
    )
    return table.select(list(GRADE_COLUMNS)), result.notes


def no_grades() -> pl.DataFrame:
    """The grades table of a build without a pointwise judge: no rows, the same columns."""
    return pl.DataFrame(schema=GRADE_COLUMNS)


@dataclass(frozen=True)
class RoundTriage:
    """What a round needs to triage its pairs: the rule, the grades (Q, n) by pool position,
    the calibrated slope ``k`` and the provenance of the rows the grades decide."""

    rule: TriageRule
    grades: np.ndarray
    k: float
    provenance: dict[str, str | None]


def round_triage(
    plan: PlanReads,
    store: DuckDBStore,
    earlier: Sequence[str],
    query_ids: list[str],
    docs: np.ndarray,
) -> RoundTriage | None:
    """The round's triage (None when ``tournament.triage`` is off); the calibrated slope is
    fitted on the earlier rounds' rows the judge decided (not the grades' own)."""
    t = plan.tournament
    if t.triage == "off":
        return None
    rule = TriageRule(t.triage, t.triage_low, t.triage_high, t.triage_threshold)
    grades_table = store.read_table("pointwise_grades")
    score = {(q, p): s for q, p, s in grades_table.select("query_id", "position", "score").rows()}
    grades = np.array(
        [[score[(q, p)] for p in range(docs.shape[1])] for q in query_ids], dtype=float
    )
    k = 0.0
    if rule.mode == "calibrated" and earlier:
        rows = pl.concat([store.read_table(n) for n in earlier])
        judged = rows.filter(pl.col("judge_kind") != TRIAGE_JUDGE_KIND)
        played = PlayedRounds.from_frame(judged, query_ids, docs.shape[1])
        k = calibration_slope(played.comparisons(False), grades)
    grader = grades_table.row(0, named=True)
    settings = {"triage": rule.mode, "k": k, "grader": grader["judge_kind"]}
    settings |= (
        {"low": rule.low, "high": rule.high}
        if rule.mode == "band"
        else {"threshold": rule.threshold}
    )
    provenance = provenance_row(
        **{c: grader[c] for c in PROVENANCE_COLUMNS if c != "judge_kind"},
        judge_kind=TRIAGE_JUDGE_KIND,
    )
    provenance["sampling_params"] = json.dumps(settings, sort_keys=True)
    return RoundTriage(rule=rule, grades=grades, k=k, provenance=provenance)


def play_triaged(
    round_no: int,
    pairs: np.ndarray,
    query_ids: list[str],
    docs: np.ndarray,
    texts: Mapping[str, str],
    judge: TextJudge,
    judge_provenance: Mapping[str, str | None],
    rules: RoundRules,
    triage: RoundTriage,
) -> tuple[pl.DataFrame, RoundSplit]:
    """The round's judgments: the pairs the grades decide (their provenance) and the rest
    judged by ``judge``, in slot order per query as an untriaged round stores them."""
    split = split_round(pairs, triage.grades, triage.rule, triage.k)
    seed, shown = rules.seed, rules.shown_first
    judged = judge_pairs(round_no, split.judged, query_ids, docs, texts, judge, seed, shown)
    grades_judge = decided_verdicts(split, triage.grades)
    decided = judge_pairs(
        round_no, split.decided, query_ids, docs, texts, grades_judge, seed, shown
    )
    index = {q: i for i, q in enumerate(query_ids)}
    table = pl.concat(
        [
            provenance_columns(judged, judge_provenance),
            provenance_columns(decided, triage.provenance),
        ]
    )
    order = table["query_id"].replace_strict(index, return_dtype=pl.Int64)
    return table.with_columns(order.alias("_q")).sort("_q", "slot").drop("_q"), split
