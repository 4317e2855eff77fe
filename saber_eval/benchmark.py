"""A benchmark directory in the export format, its task settings and the texts they compare.

Read: ``queries.jsonl`` (``query_id, problem, solution, domain, candidates, relevance_scores``,
optionally ``jaccard_scores``) and ``corpus.jsonl`` (``doc_id, problem, solution``); other fields
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
import math
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


def benchmark_hash(path: Path) -> str:
    """sha256 (first 16 hex) of ``queries.jsonl`` and ``corpus.jsonl`` bytes."""
    digest = hashlib.sha256()
    for name in ("queries.jsonl", "corpus.jsonl"):
        with (path / name).open("rb") as handle:
            for block in iter(lambda h=handle: h.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def _read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist (a benchmark directory needs it)")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not JSON ({exc})") from exc
    return rows


def _check_id(value: object, what: str) -> str:
    text = str(value)
    if not text or any(c.isspace() for c in text):
        raise ValueError(f"{what} {text!r} is empty or contains whitespace (TREC run files)")
    return text


def _domain_label(row: dict) -> str:
    """A query's domain: ``domain``, or its multi-label ``domains`` joined by ``|`` (sorted;
    per-domain means count the query in each)."""
    domains = row.get("domains")
    if domains:
        return "|".join(sorted({str(d) for d in domains}))
    return str(row.get("domain") or "unknown")


def load_benchmark(path: str | Path) -> Benchmark:
    """Load and validate a benchmark directory (errors name the offending query or document):
    the export format, or the released SaberMath schema (:mod:`saber_eval.sabermath_format`)."""
    path = Path(path).resolve()
    from saber_eval.sabermath_format import is_sabermath, read_sabermath

    if is_sabermath(path):
        return read_sabermath(path)
    corpus: dict[str, tuple[str, str]] = {}
    for row in _read_jsonl(path / "corpus.jsonl"):
        doc_id = _check_id(row.get("doc_id"), "doc_id")
        corpus[doc_id] = (str(row.get("problem") or ""), str(row.get("solution") or ""))
    queries: list[Query] = []
    seen: set[str] = set()
    for row in _read_jsonl(path / "queries.jsonl"):
        missing = [
            k
            for k in ("query_id", "problem", "candidates", "relevance_scores")
            if row.get(k) is None
        ]
        if missing:
            raise ValueError(f"{path / 'queries.jsonl'}: a row lacks {missing}")
        qid = _check_id(row["query_id"], "query_id")
        if qid in seen:
            raise ValueError(f"duplicate query_id {qid!r}")
        seen.add(qid)
        candidates = tuple(_check_id(c, "candidate doc_id") for c in row["candidates"])
        ratings = np.asarray(row["relevance_scores"], dtype=np.float64)
        if len(candidates) == 0 or len(candidates) != len(ratings):
            raise ValueError(
                f"query {qid}: {len(candidates)} candidates but {len(ratings)} relevance_scores"
            )
        if not np.all(np.isfinite(ratings)) or np.any(ratings < 0):
            raise ValueError(f"query {qid}: relevance_scores must be finite and >= 0")
        if len(set(candidates)) != len(candidates):
            raise ValueError(f"query {qid}: duplicate candidates")
        unknown = [c for c in candidates if c not in corpus]
        if unknown:
            raise ValueError(f"query {qid}: candidates not in corpus.jsonl: {unknown[:5]}")
        jaccard = row.get("jaccard_scores")
        jac = None
        if jaccard is not None:
            jac = np.asarray([math.nan if v is None else v for v in jaccard], dtype=np.float64)
            if len(jac) != len(candidates):
                raise ValueError(f"query {qid}: jaccard_scores length differs from candidates")
        queries.append(
            Query(
                query_id=qid,
                problem=str(row["problem"]),
                solution=str(row.get("solution") or ""),
                domain=_domain_label(row),
                candidates=candidates,
                relevance=ratings,
                jaccard=jac,
            )
        )
    if not queries:
        raise ValueError(f"{path / 'queries.jsonl'} holds no query")
    return Benchmark(path=path, queries=tuple(queries), corpus=corpus, hash=benchmark_hash(path))


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
