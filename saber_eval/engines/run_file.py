"""``run:PATH`` — scores read from a file, no model: score(q, d) = the file's score of (q, d).

PATH is a TREC run file (``query_id Q0 doc_id rank score tag``, parsed and validated by
:func:`saber_eval.runfile.read_run`) or MTEB predictions: the ``<task>_predictions.json`` that
``mteb.evaluate(..., prediction_folder=...)`` writes (``{"mteb_model_meta": …, subset: {split:
{query_id: {doc_id: score}}}}``), a folder holding one, or a plain ``{query_id: {doc_id:
score}}`` JSON. Query or document ids the benchmark does not have are an ``EngineError`` (checked
in ``prepare``, before any task is scored or anything written). A candidate the run does not
score gets min − 1 of the query's scored candidates (0 when none is), counted as ``unscored``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from saber_eval.engines.base import EngineContext, EngineError, Retriever, Task
from saber_eval.mteb_metadata import SPLIT
from saber_eval.registry import RetrieverEntry
from saber_eval.runfile import read_run

Scores = dict[str, dict[str, float]]
SHOWN = 3  # foreign ids named in an error


def mteb_predictions(data: dict[str, Any], path: Path) -> Scores:
    """``{query: {doc: score}}`` of an mteb predictions JSON (subset ``default``, split
    ``test``, or the only ones there are)."""
    if "mteb_model_meta" not in data:
        return data
    subsets = {k: v for k, v in data.items() if k != "mteb_model_meta"}
    subset = subsets.get("default") or (next(iter(subsets.values())) if len(subsets) == 1 else None)
    if not isinstance(subset, dict):
        raise ValueError(f"{path}: expected one subset (or 'default'), found {sorted(subsets)}")
    split = subset.get(SPLIT) or (next(iter(subset.values())) if len(subset) == 1 else None)
    if not isinstance(split, dict):
        raise ValueError(f"{path}: expected one split (or {SPLIT!r}), found {sorted(subset)}")
    return split


def read_scores(path: Path) -> Scores:
    """The (query, doc) → score table of a TREC run file or MTEB predictions (module doc)."""
    if path.is_dir():
        found = sorted(path.glob("*_predictions.json"))
        if len(found) != 1:
            raise ValueError(f"{path}: expected one *_predictions.json, found {len(found)}")
        path = found[0]
    if path.suffix != ".json":
        return {q: {d: s for d, _, s in rows} for q, rows in read_run(path).items()}
    table = mteb_predictions(json.loads(path.read_text()), path)
    for qid, row in table.items():
        if not isinstance(row, dict) or not all(
            isinstance(s, int | float) and np.isfinite(s) for s in row.values()
        ):
            raise ValueError(f"{path}: query {qid}: expected {{doc_id: finite score}}")
    return {str(q): {str(d): float(s) for d, s in row.items()} for q, row in table.items()}


def foreign(kind: str, ids: Iterable[str]) -> str:
    """``N <kind> id(s) the benchmark does not have: a, b, c, …``."""
    ids = sorted(ids)
    more = ", …" if len(ids) > SHOWN else ""
    return f"{len(ids)} {kind} id(s) the benchmark does not have: {', '.join(ids[:SHOWN])}{more}"


class RunFileRetriever(Retriever):
    """Scores from a run file or MTEB predictions (module doc)."""

    engine = "run"

    def __init__(self, spec: str, path: str) -> None:
        self.spec, self.kind, self.path = spec, "single-pass", Path(path).expanduser()
        self._scores: Scores | None = None
        self.unscored = 0

    @classmethod
    def from_entry(cls, entry: RetrieverEntry, ctx: EngineContext) -> RunFileRetriever:
        """The run at the entry's model path."""
        return cls(entry.spec, entry.model)

    def scores(self) -> Scores:
        """The file's scores (read once; a missing or malformed file is an ``EngineError``)."""
        if self._scores is None:
            if not self.path.exists():
                raise EngineError(f"retriever {self.spec!r}: run {self.path} does not exist")
            try:
                self._scores = read_scores(self.path)
            except (ValueError, OSError) as exc:
                raise EngineError(f"retriever {self.spec!r}: {exc}") from exc
        return self._scores

    def preflight(self) -> None:
        """The file exists and parses."""
        self.scores()

    def prepare(self, tasks: Sequence[Task]) -> None:
        """Check the ids (:meth:`check_tasks`); reset the count of unscored candidates."""
        self.check_tasks(tasks)
        self.unscored = 0

    def check_tasks(self, tasks: Sequence[Task]) -> None:
        """Every query and document id of the run is the benchmark's."""
        run = self.scores()
        queries = set(run) - {t.query_id for t in tasks}
        if queries:
            raise EngineError(
                f"retriever {self.spec!r}: {self.path} has {foreign('query', queries)}"
            )
        known = {d for t in tasks for d in t.doc_ids}
        documents = {d for row in run.values() for d in row} - known
        if documents:
            raise EngineError(
                f"retriever {self.spec!r}: {self.path} has {foreign('document', documents)}"
            )

    def score(self, task: Task) -> tuple[np.ndarray, float]:
        """The run's score of each candidate; min − 1 of the scored ones where it has none."""
        row = self.scores().get(task.query_id, {})
        values = np.array([row.get(d, np.nan) for d in task.doc_ids], dtype=np.float64)
        missing = np.isnan(values)
        if missing.any():
            self.unscored += int(missing.sum())
            values[missing] = values[~missing].min() - 1.0 if (~missing).any() else 0.0
        return values, 0.0

    def finish(self) -> dict[str, Any]:
        """The file and how many candidates it did not score."""
        return {"run": str(self.path), "unscored": self.unscored}
