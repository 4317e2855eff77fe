"""Input sources: the embedded CHAMP default and user files (corpus and ontology).

CHAMP (the ``champ-dataset`` package: 270 competition problems with human-written solutions,
hints and concept annotations) becomes:

* corpus rows: ``doc_id`` = CHAMP problem id, ``problem``, ``solution`` (the solution steps
  joined by spaces), ``source = "champ"``, ``domain`` from ``CHAMP_DOMAINS``, ``summary`` = the
  problem's human-written hints joined by spaces (problems without hints: the statements of their
  annotated concepts), ``topics`` = the annotated concept ids (problems without concepts: their
  category node ``CAT:<category>``);
* ontology: one node per CHAMP category (``CAT:<category>``, a root each, so the builder adds a
  virtual root above them) and one per concept; a concept's parents are its parent concept and,
  when the parent lies in another category (or there is none), its own category node — so a
  concept can have two parents. Virtual root → category → concept chain.

CHAMP has no geometry problems. Domain mapping (SABER domains): Number-Theory → Number Theory,
Combinatorics → Combinatorics, Inequality → Algebra, Polynomial → Algebra, Sequence → Calculus
(CHAMP's sequence problems are limits, recurrences and asymptotics).
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path

import polars as pl

from saber_core.errors import InputError
from saber_core.inputs.formats import read_ontology_frame

CHAMP_DOMAINS = {
    "Number-Theory": "Number Theory",
    "Combinatorics": "Combinatorics",
    "Inequality": "Algebra",
    "Polynomial": "Algebra",
    "Sequence": "Calculus",
}
CATEGORY_PREFIX = "CAT:"


@lru_cache(maxsize=1)
def _champ():
    """The packaged CHAMP dataset, parsed once per process (~0.8 s; read-only here)."""
    import champ_dataset

    return champ_dataset.load("v0")


def champ_corpus() -> pl.DataFrame:
    """The CHAMP problems as a corpus frame (schema of ``saber_core.inputs.corpus``)."""
    data = _champ()
    rows = []
    for pid, problem in data.problems.items():
        hints = [data.hints[c].text for c in problem.ch_list if c.startswith("H_")]
        concepts = list(dict.fromkeys(c for c in problem.ch_list if c.startswith("C_")))
        summary = " ".join(hints) if hints else " ".join(data.concepts[c].text for c in concepts)
        rows.append(
            {
                "doc_id": pid,
                "problem": problem.text,
                "solution": " ".join(step.text for step in problem.solution.steps),
                "source": "champ",
                "domain": CHAMP_DOMAINS[problem.category],
                "summary": summary,
                "topics": concepts or [CATEGORY_PREFIX + problem.category],
            }
        )
    return pl.DataFrame(rows, schema_overrides={"topics": pl.List(pl.String)})


def champ_concepts() -> dict[str, tuple[str, ...]]:
    """CHAMP problem id → its human-annotated concept ids (``C_…``, first-mention order; empty
    for the problems annotated with hints only)."""
    return {
        pid: tuple(dict.fromkeys(c for c in problem.ch_list if c.startswith("C_")))
        for pid, problem in _champ().problems.items()
    }


CHAMP_LLM_SOLUTIONS = "GPT-4|0-Shot"


def champ_llm_summaries(conversation: str = CHAMP_LLM_SOLUTIONS) -> pl.DataFrame:
    """CHAMP's stored model-written solutions as an LLM-written summary recipe.

    ``doc_id, summary``: the model's first answer in the CHAMP ``conversation`` (default GPT-4
    asked zero-shot to solve the problem and show its work), written without access to the
    human solution or hints. A problem without that conversation gets no row.
    """
    rows = []
    for pid, problem in _champ().problems.items():
        talk = problem.conversations.get(conversation)
        answers = [m.text for m in (talk.messages if talk else []) if m.role.startswith("Model")]
        if answers and answers[0].strip():
            rows.append({"doc_id": pid, "summary": answers[0]})
    return pl.DataFrame(rows, schema={"doc_id": pl.String, "summary": pl.String})


def read_summary_file(path: str | Path) -> pl.DataFrame:
    """``doc_id, summary`` rows from a ``.parquet`` or ``.jsonl`` file (other columns ignored);
    the error names the file and the missing column."""
    frame = read_corpus_file(path)
    missing = [c for c in ("doc_id", "summary") if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: summary file lacks column(s) {missing}")
    return frame.select(pl.col("doc_id").cast(pl.String), pl.col("summary").cast(pl.String))


def alternative_summaries(
    spec: str, corpus: str, own_origin: str, corpus_frame: pl.DataFrame
) -> tuple[pl.DataFrame | None, str, str]:
    """The other summary recipe for recipe sensitivity: ``(doc_id/summary frame or None,
    its origin "human"|"llm", a description or the reason there is none)``.

    ``spec``: ``"none"``; a summary file (its origin is the opposite of the build's);
    ``"auto"``: for a build with LLM-written summaries the corpus' human summaries, for a
    human-summary build on CHAMP its stored GPT-4 solutions (:func:`champ_llm_summaries`).
    """
    other = "human" if own_origin == "llm" else "llm"
    if spec == "none":
        return None, other, "recipe_summaries: none"
    if spec != "auto":
        return read_summary_file(spec), other, f"{other}-written summaries from {spec}"
    if own_origin == "llm":
        human = corpus_frame.select("doc_id", "summary").filter(pl.col("summary").is_not_null())
        return human, "human", "the corpus' human-written summaries"
    if corpus == "champ":
        return (
            champ_llm_summaries(),
            "llm",
            f"CHAMP's stored model-written solutions ({CHAMP_LLM_SOLUTIONS})",
        )
    return (
        None,
        other,
        (
            "no LLM-written summaries to compare: set recipe_summaries to a {doc_id, summary} file "
            "or build with summaries: llm"
        ),
    )


def champ_ontology() -> pl.DataFrame:
    """CHAMP's concept hierarchy as an ontology frame (node_id, name, parent_ids)."""
    data = _champ()
    concepts = {}

    def visit(concept) -> None:
        concepts[concept.identifier] = concept
        if concept.parent is not None:
            visit(concept.parent)

    for concept in data.concepts.values():
        visit(concept)
    categories = sorted(
        {c.category for c in concepts.values()} | {p.category for p in data.problems.values()}
    )
    rows = [{"node_id": CATEGORY_PREFIX + c, "name": c, "parent_ids": []} for c in categories]
    for cid in sorted(concepts):
        concept = concepts[cid]
        parents = []
        if concept.parent is not None:
            parents.append(concept.parent.identifier)
        if concept.parent is None or concept.parent.category != concept.category:
            parents.append(CATEGORY_PREFIX + concept.category)
        rows.append({"node_id": cid, "name": concept.name or concept.text, "parent_ids": parents})
    return pl.DataFrame(rows, schema_overrides={"parent_ids": pl.List(pl.String)})


def read_jsonl_rows(path: Path) -> pl.DataFrame:
    """JSONL rows; a line that is not UTF-8 or not a JSON object becomes a row whose
    ``_read_error`` says why (and where), so validation quarantines it instead of failing."""
    rows: list[dict] = []
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            rows.append({"_read_error": f"line {number}: invalid UTF-8 at byte {err.start}"})
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as err:
            rows.append({"_read_error": f"line {number}: invalid JSON ({err.msg})"})
            continue
        if not isinstance(value, dict):
            rows.append({"_read_error": f"line {number}: not a JSON object"})
            continue
        rows.append(value)
    return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()


def read_corpus_file(path: str | Path) -> pl.DataFrame:
    """Read a user corpus from ``.parquet`` or ``.jsonl`` (schema:
    ``saber_core.inputs.corpus``)."""
    path = Path(path)
    if path.suffix.lower() == ".parquet":
        return pl.read_parquet(path)
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        return read_jsonl_rows(path)
    raise InputError(
        f"{path}: unsupported corpus format {path.suffix!r}",
        fix="give the corpus as .parquet or .jsonl (inputs.corpus, SABER_CORPUS)",
    )


def load_corpus_frame(spec: str, synth_scale: float = 1.0, seed: int = 0) -> pl.DataFrame:
    """``"champ"`` (the embedded default), ``"synthetic"`` (the seeded paper-shaped corpus of
    ``saber_core.inputs.synth`` at ``synth_scale``), else a corpus file path."""
    if spec == "champ":
        return champ_corpus()
    if spec == "synthetic":
        return _synthetic(synth_scale, seed).corpus
    return read_corpus_file(spec)


def load_ontology_frame(spec: str, synth_scale: float = 1.0, seed: int = 0) -> pl.DataFrame:
    """``"champ"`` (CHAMP's concept hierarchy), ``"synthetic"``, else an ontology file path."""
    if spec == "champ":
        return champ_ontology()
    if spec == "synthetic":
        return _synthetic(synth_scale, seed).ontology
    return read_ontology_frame(spec)


@lru_cache(maxsize=1)
def _synthetic(scale: float, seed: int):
    from saber_core.inputs.synth import synthesize

    return synthesize(scale=scale, seed=seed)


def source_fingerprint(spec: str, synth_scale: float = 1.0, seed: int = 0) -> str:
    """Identity of an input: the package version for ``champ``, the generator version and
    parameters for ``synthetic``, else the file's sha256."""
    if spec == "champ":
        return f"champ-dataset=={version('champ-dataset')}"
    if spec == "synthetic":
        from saber_core.inputs.synth import SYNTH_VERSION

        return f"synthetic:{SYNTH_VERSION}:scale={synth_scale}:seed={seed}"
    path = Path(spec)
    if not path.exists():
        raise InputError(
            f"input file {spec} does not exist",
            fix="check the path given as inputs.corpus / inputs.ontology (SABER_CORPUS, "
            "SABER_ONTOLOGY), or use champ or synthetic",
        )
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"
