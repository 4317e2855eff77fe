"""A benchmark in the export format, its task settings and the texts they compare.

Loading a directory: :mod:`saber_eval.loading`. The export format: ``queries.jsonl``
(``query_id, problem, solution, domain, candidates, relevance_scores``, optionally
``jaccard_scores``) and ``corpus.jsonl`` (``doc_id, problem, solution``); other fields
are ignored, so any directory in this format works, whoever built it. Queries may have different
numbers of candidates; metrics pad the missing columns with rating 0 and a NaN score (ranked
last), which changes neither DCG nor IDCG.

Settings (query side → document side): ``statement-statement``, ``statement-full`` (the main
setting) and ``full-full``, where statement = the problem text and
full = ``Problem: {problem}\\n\\nSolution: {solution}``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from saber_core.inputs.corpus import full_text

Side = Literal["statement", "full"]
SETTINGS: dict[str, tuple[Side, Side]] = {
    "statement-statement": ("statement", "statement"),
    "statement-full": ("statement", "full"),
    "full-full": ("full", "full"),
}
MAIN_SETTING = "statement-full"


def side_text(problem: str, solution: str, side: Side) -> str:
    """The text of one side of a setting: the statement alone or the full text."""
    return problem if side == "statement" else full_text(problem, solution)


def parse_settings(value: str | list[str]) -> list[str]:
    """``all`` → every setting (in canonical order); otherwise the named, validated settings."""
    names = [value] if isinstance(value, str) else list(value)
    if "all" in names:
        return list(SETTINGS)
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        raise ValueError(f"unknown setting(s) {unknown}; known: {[*SETTINGS, 'all']}")
    return [s for s in SETTINGS if s in names]


@dataclass(frozen=True)
class Query:
    """One query: its texts, domain, candidates and their float ratings (0–5)."""

    query_id: str
    problem: str
    solution: str
    domain: str
    candidates: tuple[str, ...]
    relevance: np.ndarray
    jaccard: np.ndarray | None


@dataclass(frozen=True)
class Benchmark:
    """A loaded benchmark directory."""

    path: Path
    queries: tuple[Query, ...]
    corpus: dict[str, tuple[str, str]]  # doc_id -> (problem, solution)
    hash: str

    @property
    def label(self) -> str:
        """``<folder name>-<hash[:8]>``: the benchmark's folder name under the eval output."""
        return f"{self.path.name}-{self.hash[:8]}"

    @property
    def width(self) -> int:
        """The largest number of candidates of any query."""
        return max((len(q.candidates) for q in self.queries), default=0)

    def ratings(self) -> np.ndarray:
        """Ratings (Q, width), zero-padded on the right."""
        out = np.zeros((len(self.queries), self.width))
        for i, q in enumerate(self.queries):
            out[i, : len(q.candidates)] = q.relevance
        return out

    def texts(self, setting: str) -> tuple[list[str], list[list[str]]]:
        """(query texts, candidate texts per query) of a setting, before any input envelope."""
        query_side, doc_side = SETTINGS[setting]
        queries = [side_text(q.problem, q.solution, query_side) for q in self.queries]
        docs = [[side_text(*self.corpus[d], doc_side) for d in q.candidates] for q in self.queries]
        return queries, docs


def in_memory_benchmark(
    name: str,
    query_ids: Sequence[str],
    pools: Sequence[Sequence[str]],
    ratings: Sequence[Sequence[float]],
    texts: dict[str, tuple[str, str]],
    domains: dict[str, str],
) -> Benchmark:
    """A benchmark that was never written to disk (e.g. a variant built in a validity stage):
    ``pools[q]`` / ``ratings[q]`` are query ``q``'s candidates and ratings, ``texts`` maps every
    doc id to (problem, solution); its hash covers query ids, pools and ratings."""
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
    content = {
        "q": list(query_ids),
        "p": [list(p) for p in pools],
        "r": [np.round(np.asarray(r, dtype=float), 9).tolist() for r in ratings],
    }
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]
    return Benchmark(path=Path(name), queries=queries, corpus=texts, hash=digest)
