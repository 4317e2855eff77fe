"""TREC run files: ``query_id Q0 doc_id rank score tag``, one line per candidate.

Per query, lines are in rank order 1..n; the ranking is by descending score with ties broken by
:data:`TIE_RULE` — trec_eval's rule (``comp_sim_docno`` in its ``form_res_rels.c``: score
descending, then ``strcmp`` of the doc ids descending), never by pool position, so a tie-heavy
retriever does not inherit the pool's group order. It is the order the runner scores
(``saber_core.evaluation.metrics`` with its ``trec_tiebreak``) and the order trec_eval,
pytrec_eval and ir_measures rebuild from the scores (they ignore the rank column), so nDCG
computed from a parsed run file (via its ranks) equals nDCG computed from the scores. Scores are
written with ``repr`` (shortest round-trip), so they parse back to the same floats. Scores must
be finite.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

import numpy as np

from saber_core.evaluation.metrics import trec_tiebreak

RunEntry = tuple[str, int, float]  # (doc_id, rank, score)
TIE_RULE = "score descending, ties by doc id descending (byte order), as trec_eval"


def run_tag(spec: str) -> str:
    """A run tag without whitespace (TREC fields are space-separated)."""
    return re.sub(r"\s+", "_", spec) or "run"


def ranking(scores: np.ndarray, doc_ids: Sequence[str]) -> np.ndarray:
    """Candidate indices by descending score, ties by descending doc id (:data:`TIE_RULE`)."""
    values = np.asarray(scores, dtype=np.float64)
    keys = trec_tiebreak([doc_ids], len(doc_ids))[0]
    return np.lexsort((-keys, -values))


def tied_top_share(scores: np.ndarray, k: int = 10) -> float:
    """Share of the top ``min(k, n)`` positions whose score equals another candidate's score
    (their place, or whether they are in the top ``k`` at all, is set by the tie rule)."""
    values = np.asarray(scores, dtype=np.float64)
    if values.size == 0:
        return 0.0
    top = np.sort(values)[::-1][: min(k, values.size)]
    distinct, counts = np.unique(values, return_counts=True)
    return float((counts[np.searchsorted(distinct, top)] > 1).mean())


def format_run(
    query_ids: Sequence[str],
    candidates: Sequence[Sequence[str]],
    scores: Sequence[np.ndarray],
    tag: str,
) -> str:
    """The run file text of every query (queries in the given order)."""
    tag = run_tag(tag)
    lines = []
    for qid, docs, values in zip(query_ids, candidates, scores, strict=True):
        values = np.asarray(values, dtype=np.float64)
        if len(values) != len(docs):
            raise ValueError(f"query {qid}: {len(values)} scores for {len(docs)} candidates")
        if not np.all(np.isfinite(values)):
            raise ValueError(f"query {qid}: scores must be finite")
        for rank, index in enumerate(ranking(values, docs), start=1):
            lines.append(f"{qid} Q0 {docs[index]} {rank} {float(values[index])!r} {tag}")
    return "\n".join(lines) + "\n"


def write_run(
    path: Path,
    query_ids: Sequence[str],
    candidates: Sequence[Sequence[str]],
    scores: Sequence[np.ndarray],
    tag: str,
) -> Path:
    """Write a run file (parent folders created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(format_run(query_ids, candidates, scores, tag))
    return path


def read_run(path: Path) -> dict[str, list[RunEntry]]:
    """Parse and validate a run file: six fields, ``Q0``, ranks 1..n, non-increasing scores."""
    run: dict[str, list[RunEntry]] = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 6 or fields[1] != "Q0":
            raise ValueError(f"{path}:{number}: expected 'query_id Q0 doc_id rank score tag'")
        qid, _, doc, rank, score, _tag = fields
        run.setdefault(qid, []).append((doc, int(rank), float(score)))
    for qid, entries in run.items():
        ranks = [r for _, r, _ in entries]
        if ranks != list(range(1, len(entries) + 1)):
            raise ValueError(f"{path}: query {qid}: ranks are not 1..{len(entries)} in order")
        values = [s for _, _, s in entries]
        if any(b > a for a, b in pairwise(values)):
            raise ValueError(f"{path}: query {qid}: scores increase with rank")
        if len({d for d, _, _ in entries}) != len(entries):
            raise ValueError(f"{path}: query {qid}: a document is ranked twice")
    return run


def run_scores(
    run: dict[str, list[RunEntry]],
    query_ids: Sequence[str],
    candidates: Sequence[Sequence[str]],
) -> np.ndarray:
    """A (Q, width) score matrix reproducing the run's order: score = −rank, NaN when absent."""
    width = max((len(c) for c in candidates), default=0)
    out = np.full((len(query_ids), width), np.nan)
    for i, (qid, docs) in enumerate(zip(query_ids, candidates, strict=True)):
        rank_of = {doc: rank for doc, rank, _ in run.get(qid, [])}
        for j, doc in enumerate(docs):
            if doc in rank_of:
                out[i, j] = -float(rank_of[doc])
    return out
