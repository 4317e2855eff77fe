"""Loading a benchmark directory: the export format (``queries.jsonl`` + ``corpus.jsonl``) or
the released SaberMath schema (:mod:`saber_eval.sabermath_format`), also from the Hugging Face
hub (``hf:NAME[:REVISION]``). Errors name the offending query or document."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np

from saber_eval.benchmark import Benchmark, Query
from saber_eval.sabermath_format import (
    HF_PREFIX,
    is_sabermath,
    load_hf_sabermath,
    read_sabermath,
)


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
    """Load and validate a benchmark (errors name the offending query or document): a directory
    in the export format or the released SaberMath schema (:mod:`saber_eval.sabermath_format`),
    or the string ``hf:NAME[:REVISION]`` for that schema on the Hugging Face hub."""
    if isinstance(path, str) and path.startswith(HF_PREFIX):
        return load_hf_sabermath(path)
    path = Path(path).resolve()
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
