"""The SABER-Math reranking task as mteb names it: task name, split and ``TaskMetadata`` fields
(shared by :mod:`saber_eval.mteb_task`, which writes and runs the task, and the ``mteb`` and
``run`` engines, which encode with it and read its predictions)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from saber_eval.benchmark import SETTINGS

TASK_NAME = "SaberMathReranking"
SPLIT = "test"
MTEB_MAIN_SCORE = "ndcg_at_10"


def task_metadata(revision: str, folder: Path | str, setting: str) -> dict[str, Any]:
    """The ``TaskMetadata`` fields of the task (``dataset.revision`` = the benchmark's content
    hash)."""
    query_side, doc_side = SETTINGS[setting]
    return {
        "name": TASK_NAME,
        "description": (
            "SABER-Math reranking: rerank each mathematical problem's candidate problems by how "
            f"useful they are to solve it (query: {query_side}, documents: {doc_side} text). "
            "Graded relevance from a pairwise LLM-judged Swiss tournament and Bradley-Terry "
            "ratings (0-5), stored as integers 0-100."
        ),
        "reference": "https://github.com/sabermath/sabermath",
        "dataset": {"path": str(folder), "revision": revision},
        "type": "Reranking",
        "category": "t2t",
        "modalities": ["text"],
        "eval_splits": [SPLIT],
        "eval_langs": ["eng-Latn"],
        "main_score": MTEB_MAIN_SCORE,
        "domains": ["Academic", "Written"],
        "task_subtypes": [],
        "license": "not specified",
        "annotations_creators": "LM-generated",
        "dialect": [],
        "sample_creation": "found",
        "bibtex_citation": "",
    }
