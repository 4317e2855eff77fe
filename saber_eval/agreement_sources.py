"""Label sources that ``saber judge agree`` compares, their coverage, and CHAMP's concept qrels.

A source spec is one of

* a SABER home (a folder holding ``export/queries.jsonl``) or an export folder (holding
  ``queries.jsonl``): the build's float ratings of each query's candidates
  (``relevance_scores``, :mod:`saber_eval.loading`); its evaluated runs are looked up under
  ``<home>/eval/<export name>-<hash[:8]>/runs``;
* a TREC run file (``qid Q0 docid rank score tag``), e.g. a pointwise judge's scores: the label
  of a pair is its score (:func:`saber_eval.runfile.read_run`);
* a TREC qrels file (``qid 0 docid rel``, graded, rel ≥ 0).

A file's kind is read from its first non-empty line (six fields with ``Q0``: run; four: qrels),
or forced with a ``run:`` or ``qrels:`` prefix. Malformed lines are errors naming the file and
line.

**CHAMP concept qrels** (:func:`champ_qrels`): CHAMP's human annotators list the concepts each
problem's solution uses. A (query, candidate) pair of CHAMP problems is graded by the number of
annotated concepts the two share: 0 none, 1 one, 2 two or more. Pairs where either problem has
no annotated concept (47 of CHAMP's 270 problems carry hints only) or is not a CHAMP problem are
left out, so they show as coverage rather than as irrelevant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from saber_eval.benchmark import Benchmark
from saber_eval.loading import load_benchmark
from saber_eval.runfile import read_run

Labels = dict[str, dict[str, float]]  # query id -> candidate id -> label
CHAMP_GRADES = "shared annotated concepts: 0 → 0, 1 → 1, ≥ 2 → 2"
EXAMPLES = 5  # ids listed per coverage gap


class SourceError(ValueError):
    """A label source that cannot be read (the message names the file and line)."""


@dataclass(frozen=True)
class LabelSource:
    """One label source: its labels and, for a build's export, the benchmark and its runs."""

    spec: str
    kind: str
    path: Path
    labels: Labels
    benchmark: Benchmark | None = None

    @property
    def runs_dir(self) -> Path | None:
        """``<home>/eval/<export label>/runs`` of an export inside a SABER home, if present."""
        if self.benchmark is None:
            return None
        runs = self.benchmark.path.parent / "eval" / self.benchmark.label / "runs"
        return runs if runs.is_dir() else None

    def describe(self) -> dict[str, str | int]:
        """JSON form: spec, kind, path, queries and pairs labelled."""
        return {
            "spec": self.spec,
            "kind": self.kind,
            "path": str(self.path),
            "queries": len(self.labels),
            "pairs": sum(len(v) for v in self.labels.values()),
        }


def read_qrels(path: Path) -> Labels:
    """Parse a TREC qrels file ``qid 0 docid rel`` (graded, finite rel ≥ 0; a pair once)."""
    labels: Labels = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split()
        where = f"{path}:{number}"
        if len(fields) != 4:
            raise SourceError(f"{where}: expected 'query_id 0 doc_id relevance', got {line!r}")
        qid, _, doc, rel = fields
        try:
            value = float(rel)
        except ValueError:
            raise SourceError(f"{where}: relevance {rel!r} is not a number") from None
        if not math.isfinite(value) or value < 0:
            raise SourceError(f"{where}: relevance {rel!r} must be finite and >= 0")
        pool = labels.setdefault(qid, {})
        if doc in pool:
            raise SourceError(f"{where}: ({qid}, {doc}) is judged twice")
        pool[doc] = value
    if not labels:
        raise SourceError(f"{path}: no qrels line")
    return labels


def format_qrels(labels: Labels) -> str:
    """The qrels text of ``labels`` (queries and candidates sorted; integer grades as ints)."""
    lines = []
    for qid in sorted(labels):
        for doc in sorted(labels[qid]):
            value = labels[qid][doc]
            grade = int(value) if float(value).is_integer() else value
            lines.append(f"{qid} 0 {doc} {grade}")
    return "\n".join(lines) + "\n"


def export_labels(benchmark: Benchmark) -> Labels:
    """The float ratings of a loaded export, per query and candidate."""
    return {
        q.query_id: dict(zip(q.candidates, q.relevance.tolist(), strict=True))
        for q in benchmark.queries
    }


def _sniff(path: Path) -> str:
    for line in path.read_text().splitlines():
        fields = line.split()
        if not fields:
            continue
        if len(fields) == 6 and fields[1] == "Q0":
            return "run"
        if len(fields) == 4:
            return "qrels"
        raise SourceError(
            f"{path}: first line is neither a qrels line ('qid 0 docid rel') nor a run line "
            "('qid Q0 docid rank score tag'); prefix the path with qrels: or run:"
        )
    raise SourceError(f"{path}: empty")


def load_source(spec: str) -> LabelSource:
    """The label source of a spec (module docstring)."""
    kind, _, rest = spec.partition(":")
    if kind in ("run", "qrels") and rest:
        path = Path(rest)
    else:
        kind, path = "", Path(spec)
    if not path.exists():
        raise SourceError(f"{spec}: no such file or folder")
    if path.is_dir():
        folder = path / "export" if (path / "export" / "queries.jsonl").exists() else path
        if not (folder / "queries.jsonl").exists():
            raise SourceError(f"{path}: neither a SABER home nor an export (no queries.jsonl)")
        benchmark = load_benchmark(folder)
        return LabelSource(spec, "export", folder, export_labels(benchmark), benchmark)
    kind = kind or _sniff(path)
    if kind == "run":
        try:
            run = read_run(path)
        except ValueError as exc:
            raise SourceError(str(exc)) from exc
        labels = {q: {doc: score for doc, _, score in entries} for q, entries in run.items()}
        return LabelSource(spec, "run", path, labels)
    return LabelSource(spec, "qrels", path, read_qrels(path))


@dataclass(frozen=True)
class Common:
    """The pairs both sources label (sorted by query, then candidate) and the coverage gaps."""

    query_ids: list[str]
    doc_ids: list[str]
    a: list[float]
    b: list[float]
    coverage: dict


def _gap(items: list) -> dict:
    return {"count": len(items), "examples": [" ".join(i) for i in items[:EXAMPLES]]}


def common_pairs(a: Labels, b: Labels) -> Common:
    """Join two sources on (query, candidate); the coverage report counts (with examples) the
    queries only one source labels and the pairs only one source labels."""
    qa, qb = set(a), set(b)
    only_a = [(q, d) for q in sorted(a) for d in sorted(a[q]) if d not in b.get(q, {})]
    only_b = [(q, d) for q in sorted(b) for d in sorted(b[q]) if d not in a.get(q, {})]
    rows = [(q, d) for q in sorted(qa & qb) for d in sorted(a[q].keys() & b[q].keys())]
    coverage = {
        "pairs_both": len(rows),
        "queries_both": len({q for q, _ in rows}),
        "queries_only_a": _gap([(q,) for q in sorted(qa - qb)]),
        "queries_only_b": _gap([(q,) for q in sorted(qb - qa)]),
        "pairs_only_a": _gap(only_a),
        "pairs_only_b": _gap(only_b),
    }
    return Common(
        query_ids=[q for q, _ in rows],
        doc_ids=[d for _, d in rows],
        a=[a[q][d] for q, d in rows],
        b=[b[q][d] for q, d in rows],
        coverage=coverage,
    )


def champ_qrels(benchmark: Benchmark, concepts: dict[str, tuple[str, ...]]) -> Labels:
    """Grades of a benchmark's (query, candidate) pairs by the CHAMP concepts they share
    (``min(|C_q ∩ C_d|, 2)``, module docstring); pairs lacking concepts on either side are left
    out."""
    labels: Labels = {}
    for query in benchmark.queries:
        mine = set(concepts.get(query.query_id, ()))
        if not mine:
            continue
        graded = {
            doc: float(min(len(mine & set(concepts[doc])), 2))
            for doc in query.candidates
            if concepts.get(doc)
        }
        if graded:
            labels[query.query_id] = graded
    return labels
