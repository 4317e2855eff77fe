"""Run a retriever on a benchmark setting: timing, nDCG@10, per-domain means, run outputs.

Per query i: nDCG@10_i from ``saber_core.evaluation.metrics.ndcg_at_k`` (gain 2^rel − 1 on the float
ratings, discount 1/log2(rank + 1), IDCG over all candidates; ranking by descending score, ties
by :data:`saber_eval.runfile.TIE_RULE` — trec_eval's descending doc id, never pool position) and
nDCG@10_trec_i from ``saber_core.evaluation.metrics.ndcg_trec`` (what trec_eval,
BEIR and MTEB compute: linear gain on the exported integer qrels ``round_half_up(rating)`` of
``beir/qrels/test.tsv``, the same ties). Reported: mean_i nDCG@10_i, mean_i nDCG@10_trec_i,
per-domain means (``mean_by_labels``), the share of top-10 positions whose score is tied with
another candidate's (``tied_top10_share``: how much of the ranking the tie rule decides), and the
median over queries of the latency of one reranking task (one query × its candidates)::

    latency_i = perf_counter() around retriever.score(task_i) + charged_i

where charged_i is the recorded encoding cost of the embeddings task i got from the embedding
cache (0 for retrievers without one). So a bi-encoder's latency is its cold cost (encode the
query and its candidates, then score) whether or not the vectors were cached. Model loading and
cache preloading happen before the first task and are not timed in the latency: they are
reported apart (``prepare_s``; a vLLM worker's own load as ``load_s`` in the notes). Engines
send a task's texts or pairs to the model in batches of the entry's ``batch_size`` (default 16,
as the paper serves its models). LLM scorers are timed as run:
answers served from the LLM call cache make a re-run's latency a cache-lookup time.

Outputs, under ``<out>/<benchmark folder name>-<hash[:8]>/runs/<retriever slug>/``:
``<setting>.trec`` (TREC run file), ``<setting>.per_query.csv`` (``query_id, domain, ndcg@10,
ndcg@10_trec, tied_top10, latency_s``) and ``<setting>.json`` (the summary the leaderboard is
built from).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from saber_core.evaluation.metrics import (
    integer_labels,
    mean_by_labels,
    ndcg_at_k,
    ndcg_trec,
    trec_tiebreak,
)
from saber_eval.benchmark import Benchmark
from saber_eval.engines.base import Retriever, Task
from saber_eval.registry import Registry, RetrieverEntry
from saber_eval.runfile import TIE_RULE, tied_top_share, write_run
from saber_eval.version import code_hash

K = 10
METRIC = f"ndcg@{K}"
TREC_METRIC = f"{METRIC}_trec"


def retriever_slug(spec: str) -> str:
    """A folder name for a spec: the spec with unsafe characters replaced (+ a hash if any)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", spec).strip("_")[:60] or "retriever"
    if safe == spec:
        return safe
    return f"{safe}-{hashlib.sha256(spec.encode()).hexdigest()[:6]}"


def eval_dir(out: Path, benchmark: Benchmark) -> Path:
    """The benchmark's folder under the output folder: ``<out>/<name>-<hash[:8]>``."""
    return Path(out) / benchmark.label


@dataclass
class RunResult:
    """One retriever on one setting: scores, per-query nDCG@k and latency, notes."""

    spec: str
    setting: str
    benchmark_hash: str
    benchmark_dir: str
    query_ids: list[str]
    domains: list[str]
    candidates: list[tuple[str, ...]]
    scores: list[np.ndarray]
    ndcg: np.ndarray
    ndcg_trec: np.ndarray
    latency_s: np.ndarray
    tied_top10: np.ndarray
    entry: RetrieverEntry
    notes: dict[str, Any] = field(default_factory=dict)
    k: int = K
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def mean(self) -> float:
        """mean over queries of nDCG@k."""
        return float(np.mean(self.ndcg))

    @property
    def mean_trec(self) -> float:
        """mean over queries of nDCG@k_trec (linear gain, integer qrels, trec_eval ties)."""
        return float(np.mean(self.ndcg_trec))

    @property
    def per_domain(self) -> dict[str, float]:
        """mean nDCG@k per domain; a query of several domains (``A|B``) counts in each."""
        return mean_by_labels(self.ndcg, [d.split("|") for d in self.domains])

    @property
    def tied_top10_share(self) -> float:
        """mean over queries of the share of top-10 positions whose score is tied."""
        return float(np.mean(self.tied_top10))

    @property
    def median_latency_s(self) -> float:
        """median over queries of the per-task latency (seconds)."""
        return float(np.median(self.latency_s))

    def per_query(self) -> pl.DataFrame:
        """``query_id, domain, ndcg@k, ndcg@k_trec, tied_top10, latency_s``."""
        return pl.DataFrame(
            {
                "query_id": self.query_ids,
                "domain": self.domains,
                f"ndcg@{self.k}": self.ndcg,
                f"ndcg@{self.k}_trec": self.ndcg_trec,
                "tied_top10": self.tied_top10,
                "latency_s": self.latency_s,
            }
        )

    def summary(self) -> dict[str, Any]:
        """The JSON summary written next to the run file."""
        return {
            "spec": self.spec,
            "display_name": self.entry.display_name,
            "kind": self.entry.kind,
            "setting": self.setting,
            "k": self.k,
            "benchmark_hash": self.benchmark_hash,
            "benchmark_dir": self.benchmark_dir,
            "n_queries": len(self.query_ids),
            f"ndcg@{self.k}": self.mean,
            f"ndcg@{self.k}_trec": self.mean_trec,
            "tie_rule": TIE_RULE,
            "tied_top10_share": self.tied_top10_share,
            "per_domain": self.per_domain,
            "median_latency_s": self.median_latency_s,
            "mean_latency_s": float(np.mean(self.latency_s)),
            "batch_size": self.entry.batch_size,
            "prepare_s": self.notes.get("prepare_s"),
            "envelope": self.entry.envelope(),
            "notes": self.notes,
            "code": code_hash(),
            "files": {k: str(v) for k, v in self.files.items()},
            "created_at": datetime.now(UTC).isoformat(),
        }


def build_tasks(benchmark: Benchmark, setting: str, entry: RetrieverEntry) -> list[Task]:
    """The setting's reranking tasks with the retriever's input envelope applied."""
    queries, docs = benchmark.texts(setting)
    return [
        Task(
            query_id=q.query_id,
            query=entry.envelope_query(text),
            documents=tuple(entry.envelope_document(d) for d in candidates),
            jaccard=q.jaccard,
            doc_ids=tuple(q.candidates),
        )
        for q, text, candidates in zip(benchmark.queries, queries, docs, strict=True)
    ]


def run_retriever(
    benchmark: Benchmark,
    retriever: Retriever,
    setting: str,
    entry: RetrieverEntry,
    k: int = K,
    progress: Callable[[int, int], None] | None = None,
) -> RunResult:
    """Score every task (timed one by one), then nDCG@k per query."""
    tasks = build_tasks(benchmark, setting, entry)
    started = time.perf_counter()
    retriever.prepare(tasks)  # model load and cache preload: reported apart, never in latency
    prepare_s = time.perf_counter() - started
    scores: list[np.ndarray] = []
    latency = np.zeros(len(tasks))
    for i, task in enumerate(tasks):
        start = time.perf_counter()
        values, charged = retriever.score(task)
        latency[i] = time.perf_counter() - start + charged
        values = np.asarray(values, dtype=np.float64)
        if values.shape != (len(task.documents),) or not np.all(np.isfinite(values)):
            raise ValueError(
                f"{retriever.spec}: query {task.query_id}: expected {len(task.documents)} finite "
                f"scores, got shape {values.shape}"
            )
        scores.append(values)
        if progress:
            progress(i + 1, len(tasks))
    notes = {**retriever.finish(), "prepare_s": round(prepare_s, 3)}
    matrix = np.full((len(tasks), benchmark.width), np.nan)
    for i, values in enumerate(scores):
        matrix[i, : len(values)] = values
    candidates = [q.candidates for q in benchmark.queries]
    return RunResult(
        spec=retriever.spec,
        setting=setting,
        benchmark_hash=benchmark.hash,
        benchmark_dir=str(benchmark.path),
        query_ids=[q.query_id for q in benchmark.queries],
        domains=[q.domain for q in benchmark.queries],
        candidates=candidates,
        scores=scores,
        ndcg=ndcg_at_k(
            matrix, benchmark.ratings(), k, tiebreak=trec_tiebreak(candidates, benchmark.width)
        ),
        ndcg_trec=ndcg_trec(matrix, integer_labels(benchmark.ratings()), candidates, k),
        latency_s=latency,
        tied_top10=np.array([tied_top_share(v, k) for v in scores]),
        entry=entry,
        notes=notes,
        k=k,
    )


def write_outputs(result: RunResult, out_dir: Path) -> dict[str, Path]:
    """Write the run file, per-query CSV and summary JSON under ``out_dir/runs/<slug>/``."""
    folder = Path(out_dir) / "runs" / retriever_slug(result.spec)
    folder.mkdir(parents=True, exist_ok=True)
    run_file = write_run(
        folder / f"{result.setting}.trec",
        result.query_ids,
        result.candidates,
        result.scores,
        tag=result.spec,
    )
    per_query = folder / f"{result.setting}.per_query.csv"
    result.per_query().write_csv(per_query)
    summary = folder / f"{result.setting}.json"
    result.files = {"run_file": run_file, "per_query": per_query, "summary": summary}
    summary.write_text(json.dumps(result.summary(), indent=2, default=str))
    return result.files


def evaluate_specs(
    benchmark: Benchmark,
    specs: Sequence[str],
    settings: Sequence[str],
    out_dir: Path,
    *,
    registry: Registry,
    make: Callable[[str], Retriever],
    log: Callable[[str], None] | None = None,
) -> list[RunResult]:
    """Every spec × setting: run, write outputs under ``out_dir`` (one retriever per spec).

    Every retriever is made, preflighted (folders, devices, servers) and checked against every
    setting's tasks (run-file ids) before the first one runs, so a misconfigured spec fails the
    evaluation before anything is written."""
    retrievers = {spec: make(spec) for spec in specs}
    for spec, retriever in retrievers.items():
        retriever.preflight()
        for setting in settings:
            retriever.check_tasks(build_tasks(benchmark, setting, registry.get(spec)))
    results = []
    for spec, retriever in retrievers.items():
        entry = registry.get(spec)
        try:
            for setting in settings:
                result = run_retriever(benchmark, retriever, setting, entry)
                write_outputs(result, out_dir)
                if log:
                    log(describe(result))
                results.append(result)
        finally:
            retriever.close()
    return results


def describe(result: RunResult) -> str:
    """One line: spec · setting · nDCG@k (per domain) · median latency · queries."""
    domains = ", ".join(f"{d} {v:.3f}" for d, v in result.per_domain.items())
    return (
        f"{result.spec} · {result.setting}: nDCG@{result.k} {result.mean:.4f} ({domains}), "
        f"trec {result.mean_trec:.4f} · "
        f"median latency {result.median_latency_s:.4g} s · {len(result.query_ids)} queries"
    )


def per_query_ndcg(
    benchmarks: dict[str, Benchmark],
    specs: Sequence[str],
    make: Callable[[str], Retriever],
    registry: Registry,
    setting: str,
    log: Callable[[str], None] | None = None,
) -> pl.DataFrame:
    """``retriever, variant, query_id, ndcg@10`` of every spec on every named benchmark
    (no files written)."""
    rows = []
    for spec in specs:
        retriever = make(spec)
        try:
            for variant, benchmark in benchmarks.items():
                result = run_retriever(benchmark, retriever, setting, registry.get(spec))
                if log:
                    log(f"{spec} on {variant}: {METRIC} {result.mean:.3f}")
                rows += [
                    {"retriever": spec, "variant": variant, "query_id": q, METRIC: v}
                    for q, v in zip(result.query_ids, result.ndcg.tolist(), strict=True)
                ]
        finally:
            retriever.close()
    return pl.DataFrame(rows)


def result_tables(results: Sequence[RunResult], folder: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(per query: ``retriever, setting, query_id, domain, ndcg@k, ndcg@k_trec, tied_top10,
    latency_s``; per run: ``retriever, setting, display_name, kind, ndcg@k, ndcg@k_trec,
    median_latency_s, n_queries, tied_top10_share, per_domain (JSON), run_file, eval_dir,
    benchmark_hash``) of evaluated runs."""
    per_query = pl.concat(
        [
            r.per_query().select(
                pl.lit(r.spec).alias("retriever"), pl.lit(r.setting).alias("setting"), pl.all()
            )
            for r in results
        ]
    )
    summaries = pl.DataFrame(
        [
            {
                "retriever": r.spec,
                "setting": r.setting,
                "display_name": r.entry.display_name,
                "kind": r.entry.kind,
                METRIC: r.mean,
                TREC_METRIC: r.mean_trec,
                "median_latency_s": r.median_latency_s,
                "n_queries": len(r.query_ids),
                "tied_top10_share": r.tied_top10_share,
                "per_domain": json.dumps(r.per_domain, sort_keys=True),
                "run_file": str(r.files["run_file"]),
                "eval_dir": str(folder),
                "benchmark_hash": r.benchmark_hash,
            }
            for r in results
        ]
    )
    return per_query, summaries


def stored_tables(
    folder: Path, specs: Sequence[str], settings: Sequence[str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The tables of :func:`result_tables` read back from stored runs (a SLURM job's)."""
    per_query, rows = [], []
    for spec in specs:
        for setting in settings:
            run = Path(folder) / "runs" / retriever_slug(spec)
            summary = json.loads((run / f"{setting}.json").read_text())
            frame = pl.read_csv(
                run / f"{setting}.per_query.csv",
                schema_overrides={"query_id": pl.String, "domain": pl.String},
            )
            per_query.append(
                frame.select(
                    pl.lit(spec).alias("retriever"), pl.lit(setting).alias("setting"), pl.all()
                )
            )
            rows.append(
                {
                    "retriever": spec,
                    "setting": setting,
                    "display_name": summary["display_name"],
                    "kind": summary["kind"],
                    METRIC: summary[METRIC],
                    TREC_METRIC: summary[TREC_METRIC],
                    "median_latency_s": summary["median_latency_s"],
                    "n_queries": summary["n_queries"],
                    "tied_top10_share": summary["tied_top10_share"],
                    "per_domain": json.dumps(summary["per_domain"], sort_keys=True),
                    "run_file": summary["files"]["run_file"],
                    "eval_dir": str(folder),
                    "benchmark_hash": summary["benchmark_hash"],
                }
            )
    return pl.concat(per_query), pl.DataFrame(rows)
