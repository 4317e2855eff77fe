"""The benchmark as an MTEB reranking task, and running the real ``mteb`` package on it offline.

``write_mteb_task(benchmark_dir, out)`` reads any folder in the export format (not the build's
DuckDB store) and writes, for one setting (default ``statement-full``: query = problem
statement, document = ``Problem: …\\n\\nSolution: …``)::

    corpus.jsonl           {"_id", "title": "", "text"}       every candidate document
    queries.jsonl          {"_id", "text"}
    qrels/test.tsv         query-id  corpus-id  score          integer 0–100 for every candidate
    top_ranked/test.jsonl  {"query-id", "corpus-ids": [...]}  the candidate list (reranking)
    metadata.json          MTEB ``TaskMetadata`` fields (revision = the benchmark's content hash)
                           and how the labels were made
    descriptive_stats.json computed by mteb's own retrieval statistics

Labels: MTEB evaluates with pytrec_eval, which needs integer relevance, so float grades are put
on a 0–100 integer scale: ``label = floor(20 · rating + 1/2)`` (rating / 5 × 100, rounded half
up; :func:`saber_core.evaluation.metrics.integer_labels` with ``scale = 20``). The exported
``beir/qrels/test.tsv`` keeps the coarser 0–5 labels (``scale = 1``) of ``ndcg@10_trec``. With
linear gain the scale cancels in nDCG, so MTEB's nDCG@10 is nDCG with linear gain on the
ratings quantised to 0.05 — :func:`ndcg_mteb_convention` computes it from our own scores.

``load_mteb_task(folder)`` defines the task as an ``AbsTaskRetrieval`` subclass whose
``load_data`` reads these files (MTEB's own loader would fetch ``metadata.dataset.path`` from
the Hugging Face hub). ``run_mteb`` evaluates an ``st:`` retriever with ``mteb.evaluate``
through :class:`CachedEncoder`, an ``mteb.models.AbsEncoder`` that applies the registry's input
envelope and serves vectors from the SABER embedding cache (keyed by model and exact text):
no ``mteb.get_model``, no hub access, and texts our own run already embedded are not encoded
again. ``mteb`` is imported only inside these functions (the optional ``[mteb]`` extra).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from saber_core.evaluation.metrics import integer_labels, ndcg_trec
from saber_eval.benchmark import MAIN_SETTING, Benchmark
from saber_eval.engines.bi_encoders import EmbeddingRetriever
from saber_eval.loading import load_benchmark
from saber_eval.mteb_metadata import MTEB_MAIN_SCORE, SPLIT, task_metadata
from saber_eval.registry import RetrieverEntry
from saber_llm.embeddings.cache import EmbeddingCache, Encoder

MTEB_SCALE = 20.0  # 0–5 ratings → 0–100 integer labels
K_VALUES = (1, 3, 5, 10, 20, 100)


def mteb_labels(ratings: np.ndarray) -> np.ndarray:
    """0–100 integer labels: ``floor(20 · rating + 1/2)``."""
    return integer_labels(ratings, MTEB_SCALE)


def write_mteb_task(
    benchmark: Benchmark | str | Path, out: Path, setting: str = MAIN_SETTING
) -> dict[str, int]:
    """Write the MTEB task folder for ``setting``; returns the row count of each file."""
    bench = benchmark if isinstance(benchmark, Benchmark) else load_benchmark(benchmark)
    out = Path(out).resolve()
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    (out / "top_ranked").mkdir(parents=True, exist_ok=True)
    queries, docs = bench.texts(setting)
    text_of: dict[str, str] = {}
    for q, texts in zip(bench.queries, docs, strict=True):
        text_of.update(zip(q.candidates, texts, strict=True))
    pl.DataFrame(
        {"_id": sorted(text_of), "title": "", "text": [text_of[d] for d in sorted(text_of)]}
    ).write_ndjson(out / "corpus.jsonl")
    pl.DataFrame({"_id": [q.query_id for q in bench.queries], "text": queries}).write_ndjson(
        out / "queries.jsonl"
    )
    qrels = pl.DataFrame(
        {
            "query-id": [q.query_id for q in bench.queries for _ in q.candidates],
            "corpus-id": [d for q in bench.queries for d in q.candidates],
            "score": np.concatenate([mteb_labels(q.relevance) for q in bench.queries]),
        }
    )
    qrels.write_csv(out / "qrels" / f"{SPLIT}.tsv", separator="\t")
    with (out / "top_ranked" / f"{SPLIT}.jsonl").open("w") as handle:
        for q in bench.queries:
            handle.write(json.dumps({"query-id": q.query_id, "corpus-ids": list(q.candidates)}))
            handle.write("\n")
    meta = {
        "task": task_metadata(bench.hash, out, setting),
        "saber": {
            "setting": setting,
            "benchmark_dir": str(bench.path),
            "benchmark_hash": bench.hash,
            "label_scale": MTEB_SCALE,
            "label_rule": "floor(20 * rating + 0.5): ratings 0-5 -> integers 0-100",
            "k_values": list(K_VALUES),
        },
    }
    (out / "metadata.json").write_text(json.dumps(meta, indent=2))
    stats = descriptive_statistics(out)
    (out / "descriptive_stats.json").write_text(json.dumps(stats, indent=2, default=str))
    return {
        "corpus.jsonl": len(text_of),
        "queries.jsonl": len(bench.queries),
        f"qrels/{SPLIT}.tsv": qrels.height,
        f"top_ranked/{SPLIT}.jsonl": len(bench.queries),
    }


def quiet() -> None:
    """Silence the progress bars and info logs of ``datasets`` and ``mteb``."""
    import datasets

    datasets.disable_progress_bars()
    logging.getLogger("mteb").setLevel(logging.WARNING)


def read_split(folder: Path) -> dict[str, Any]:
    """The split in MTEB's v2 in-memory format (corpus/queries as ``datasets.Dataset``)."""
    from datasets import Dataset

    quiet()

    folder = Path(folder)
    corpus = pl.read_ndjson(folder / "corpus.jsonl", schema_overrides={"_id": pl.String})
    queries = pl.read_ndjson(folder / "queries.jsonl", schema_overrides={"_id": pl.String})
    qrels = pl.read_csv(
        folder / "qrels" / f"{SPLIT}.tsv",
        separator="\t",
        schema_overrides={"query-id": pl.String, "corpus-id": pl.String, "score": pl.Int64},
    )
    relevant: dict[str, dict[str, int]] = {}
    for qid, doc, score in qrels.iter_rows():
        relevant.setdefault(qid, {})[doc] = int(score)
    top_ranked = {
        row["query-id"]: list(row["corpus-ids"])
        for row in map(json.loads, (folder / "top_ranked" / f"{SPLIT}.jsonl").open())
    }
    return {
        "corpus": Dataset.from_dict(
            {
                "id": corpus["_id"].to_list(),
                "title": corpus["title"].to_list(),
                "text": corpus["text"].to_list(),
            }
        ),
        "queries": Dataset.from_dict(
            {"id": queries["_id"].to_list(), "text": queries["text"].to_list()}
        ),
        "relevant_docs": relevant,
        "top_ranked": top_ranked,
    }


def load_mteb_task(folder: Path) -> Any:
    """An ``mteb`` retrieval task (type Reranking) reading a task folder; no hub access."""
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.task_metadata import TaskMetadata

    folder = Path(folder).resolve()
    meta = json.loads((folder / "metadata.json").read_text())

    class SaberMathReranking(AbsTaskRetrieval):
        """SABER-Math as a local MTEB reranking task (``top_ranked`` = the candidates)."""

        metadata = TaskMetadata(**meta["task"])
        k_values = tuple(meta["saber"]["k_values"])

        def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
            """Read the local files instead of ``datasets.load_dataset(<hub path>)``."""
            if self.data_loaded:
                return
            self.dataset = {"default": {SPLIT: read_split(folder)}}
            self.data_loaded = True

    return SaberMathReranking()


def descriptive_statistics(folder: Path) -> dict[str, Any]:
    """mteb's own retrieval statistics of the task's split (what ``calculate_descriptive_
    statistics`` computes, without writing into the installed mteb package)."""
    task = load_mteb_task(folder)
    task.load_data()
    return {SPLIT: dict(task._calculate_descriptive_statistics_from_split(SPLIT))}


def model_meta(spec: str, model_id: str) -> Any:
    """A minimal ``ModelMeta`` (cosine similarity, text) for an ``st:`` spec."""
    import hashlib

    from mteb.models.model_meta import ModelMeta, ScoringFunction

    return ModelMeta.create_empty(
        overwrites={
            "name": f"saber/{spec.replace(':', '-').replace('/', '__')}",
            "revision": hashlib.sha256(model_id.encode()).hexdigest()[:12],
            "similarity_fn_name": ScoringFunction.COSINE,
            "modalities": ["text"],
            "framework": ["Sentence Transformers"],
        }
    )


def cached_encoder(
    spec: str, cache: EmbeddingCache, entry: RetrieverEntry, encoder: Encoder | None = None
) -> Any:
    """An ``mteb`` encoder for an ``st:`` spec over the SABER embedding cache."""
    from mteb.models.abs_encoder import AbsEncoder
    from mteb.types import PromptType

    retriever = EmbeddingRetriever(spec, cache, encoder=encoder)

    class CachedEncoder(AbsEncoder):
        """Envelope, then the embedding cache (model loaded only for texts never embedded)."""

        def __init__(self) -> None:
            self.mteb_model_meta = model_meta(spec, retriever.model_id)
            self.retriever = retriever
            self.texts: dict[str, int] = {"query": 0, "document": 0}

        def encode(self, inputs: Any, *, prompt_type: Any = None, **kwargs: Any) -> np.ndarray:
            """Unit vectors (float32) of the batches' texts, enveloped as the registry says."""
            is_query = prompt_type == PromptType.query
            wrap = entry.envelope_query if is_query else entry.envelope_document
            texts = [wrap(t) for batch in inputs for t in batch["text"]]
            self.texts["query" if is_query else "document"] += len(texts)
            cache.preload(retriever.model_id, texts)
            vectors, _ = cache.embed(retriever.model_id, texts, retriever._encode)
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            return (vectors / np.where(norms > 0, norms, 1.0)).astype(np.float32)

    return CachedEncoder()


@dataclass(frozen=True)
class MTEBRun:
    """The mteb package's scores of one retriever on the task, and ours on the same labels."""

    spec: str
    setting: str
    scores: dict[str, float]
    ours: float
    encoded: int
    served_from_cache: int

    @property
    def mteb_ndcg(self) -> float:
        """mteb's nDCG@10 (its main score, rounded by mteb to 5 decimals)."""
        return float(self.scores[MTEB_MAIN_SCORE])

    def as_dict(self) -> dict[str, Any]:
        """The JSON written under ``<eval folder>/mteb/<slug>/<setting>.json``."""
        return {
            "spec": self.spec,
            "setting": self.setting,
            "ndcg@10_mteb": self.mteb_ndcg,
            "ndcg@10_mteb_convention_ours": self.ours,
            "difference": self.mteb_ndcg - self.ours,
            "label_rule": "floor(20 * rating + 0.5) (0-100), linear gain, trec_eval ties",
            "encoded": self.encoded,
            "served_from_cache": self.served_from_cache,
            "mteb_scores": self.scores,
        }


def ndcg_mteb_convention(benchmark: Benchmark, scores: list[np.ndarray], k: int = 10) -> np.ndarray:
    """Per-query nDCG@k of our scores as MTEB computes it: linear gain on the 0–100 labels,
    ties by descending doc id (pytrec_eval)."""
    width = benchmark.width
    matrix = np.full((len(scores), width), np.nan)
    for i, values in enumerate(scores):
        matrix[i, : len(values)] = values
    labels = mteb_labels(benchmark.ratings())
    return ndcg_trec(matrix, labels, [q.candidates for q in benchmark.queries], k)


def run_mteb(
    task_folder: Path,
    spec: str,
    cache: EmbeddingCache,
    entry: RetrieverEntry,
    encoder: Encoder | None = None,
    batch_size: int = 64,
    prediction_folder: Path | None = None,
) -> tuple[dict[str, float], Any]:
    """Run ``mteb.evaluate`` offline (no result cache, no hub): (mteb's scores, the encoder);
    with ``prediction_folder``, mteb also writes its ``<task>_predictions.json`` there."""
    if not spec.startswith("st:"):
        raise ValueError(f"--via mteb runs st:<model> bi-encoders, not {spec!r}")
    import mteb

    quiet()
    model = cached_encoder(spec, cache, entry, encoder)
    task = load_mteb_task(task_folder)
    result = mteb.evaluate(
        model,
        task,
        cache=None,
        overwrite_strategy="always",
        encode_kwargs={"batch_size": batch_size, "show_progress_bar": False},
        show_progress_bar=False,
        co2_tracker=False,
        prediction_folder=prediction_folder,
    )
    if result.exceptions:
        raise RuntimeError(f"mteb failed: {result.exceptions}")
    scores = result.task_results[0].scores[SPLIT][0]
    cache.flush()
    return {k: v for k, v in scores.items() if isinstance(v, int | float)}, model


def mteb_results_path(eval_folder: Path, slug: str, setting: str) -> Path:
    """``<eval folder>/mteb/<slug>/<setting>.json``."""
    return Path(eval_folder) / "mteb" / slug / f"{setting}.json"


def write_mteb_result(run: MTEBRun, path: Path) -> Path:
    """Write an MTEB-path result next to our run outputs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run.as_dict(), indent=2))
    return path


def summarise(runs: Mapping[str, MTEBRun]) -> str:
    """One line per MTEB-path run: mteb's nDCG@10 vs ours under its convention."""
    return "\n".join(
        f"mteb · {r.spec} · {r.setting}: mteb nDCG@10 {r.mteb_ndcg:.5f}, ours (0–100 labels, "
        f"linear gain) {r.ours:.5f}, Δ {r.mteb_ndcg - r.ours:+.1e}; encoded {r.encoded}, "
        f"from cache {r.served_from_cache}"
        for r in runs.values()
    )
