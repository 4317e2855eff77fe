"""The retriever registry (``retrievers.yaml``): display name, kind, release date, envelopes.

An entry is keyed by the exact retriever spec (``bm25``, ``st:minilm``, ``st:BAAI/...``). Its
input envelope is what the vendor documents for the model and is applied to every text before
it reaches the model (and before the embedding cache, which is keyed by the text sent)::

    query    = query_prefix + template.format(instruction=instruction, query=text)  # instruction
    query    = query_prefix + text                                                  # otherwise
    document = document_prefix + text

with the default template ``Instruct: {instruction}\\nQuery: {query}``. A spec without an entry
gets a default one: no envelope, display name = the spec, kind ``reranker`` for reranker engines
and ``single-pass`` otherwise.

Which engine runs an entry: its ``engine`` field, else the spec's prefix (:data:`PREFIX_ENGINES`:
``st:NAME`` → ``sentence-transformers`` with model NAME, ``run:PATH`` → ``run``, …); its
``model`` field, else the spec after the prefix; ``options`` are the engine's own (checked by the
engine); ``batch_size`` is how many texts or pairs go to the model at once (the paper serves its
rerankers at B = 16); ``resources`` size the SLURM job that evaluates the entry (``gpus``,
``cpus``, ``mem``, ``time``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Literal

import yaml

REGISTRY_PATH = Path(__file__).resolve().parents[1] / "retrievers.yaml"
INSTRUCTION_TEMPLATE = "Instruct: {instruction}\nQuery: {query}"
Kind = Literal["single-pass", "reranker"]
KINDS: tuple[str, ...] = ("single-pass", "reranker")
DEFAULT_BATCH_SIZE = 16
# spec prefix -> engine name (an entry's ``engine`` field overrides it)
PREFIX_ENGINES = {
    "st": "sentence-transformers",
    "vllm": "vllm-embed",
    "openai": "openai-embed",
    "ce": "cross-encoder",
    "vllm-score": "vllm-score",
    "seqcls": "seq-cls",
    "llm": "llm-pointwise",
    "yesno": "llm-yesno",
    "colbert": "colbert",
    "mteb": "mteb",
    "run": "run",
}
BARE_ENGINES = ("bm25", "jaccard", "random")
RERANKER_ENGINES = ("cross-encoder", "vllm-score", "seq-cls", "llm-pointwise", "llm-yesno")
RESOURCE_FIELDS = ("gpus", "cpus", "mem", "time")
FIELDS = {
    "engine",
    "model",
    "options",
    "batch_size",
    "resources",
    "display_name",
    "kind",
    "release_date",
    "query_prefix",
    "document_prefix",
    "instruction",
    "instruction_template",
    "notes",
}


@dataclass(frozen=True)
class RetrieverEntry:
    """One registry entry."""

    spec: str
    display_name: str
    kind: Kind
    release_date: date | None = None
    query_prefix: str = ""
    document_prefix: str = ""
    instruction: str = ""
    instruction_template: str = INSTRUCTION_TEMPLATE
    notes: str = ""
    engine: str = ""
    model: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    batch_size: int = DEFAULT_BATCH_SIZE
    resources: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        engine, model = engine_of(self.spec)
        if not self.engine:
            object.__setattr__(self, "engine", engine)
        if not self.model:
            object.__setattr__(self, "model", model)

    def as_item(self) -> dict[str, Any]:
        """The entry as a ``retrievers.yaml`` item (loads back to an equal entry)."""
        item = {f: getattr(self, f) for f in sorted(FIELDS)}
        item["release_date"] = self.release_date.isoformat() if self.release_date else None
        return item

    def envelope_query(self, text: str) -> str:
        """The query text sent to the model."""
        if self.instruction:
            text = self.instruction_template.format(instruction=self.instruction, query=text)
        return self.query_prefix + text

    def envelope_document(self, text: str) -> str:
        """The document text sent to the model."""
        return self.document_prefix + text

    def envelope(self) -> dict[str, str]:
        """The envelope as a dict (recorded with every run)."""
        return {
            "query_prefix": self.query_prefix,
            "document_prefix": self.document_prefix,
            "instruction": self.instruction,
            "instruction_template": self.instruction_template if self.instruction else "",
        }


def engine_of(spec: str) -> tuple[str, str]:
    """(engine, model) a spec names by itself: ``bm25`` → (bm25, ""), ``st:NAME`` →
    (sentence-transformers, NAME); ("", spec) when the prefix names no engine."""
    if spec in BARE_ENGINES:
        return spec, ""
    prefix, sep, rest = spec.partition(":")
    if sep and prefix in PREFIX_ENGINES:
        return PREFIX_ENGINES[prefix], rest
    return "", spec


def default_kind(spec: str, engine: str = "") -> Kind:
    """``reranker`` for cross-encoders and LLM scorers, ``single-pass`` otherwise."""
    return "reranker" if (engine or engine_of(spec)[0]) in RERANKER_ENGINES else "single-pass"


def parse_date(value: object) -> date | None:
    """``YYYY-MM-DD``, ``YYYY-MM`` (day 1) or ``YYYY`` (1 January); empty/None → None."""
    if value is None or value == "":
        return None
    if isinstance(value, date):
        return value
    text = str(value)
    parts = [int(p) for p in text.split("-")]
    if not 1 <= len(parts) <= 3:
        raise ValueError(f"release_date {text!r}: use YYYY-MM-DD, YYYY-MM or YYYY")
    return date(*(parts + [1] * (3 - len(parts))))


@dataclass(frozen=True)
class Registry:
    """All entries of a registry file, with its content hash."""

    entries: dict[str, RetrieverEntry]
    hash: str

    def get(self, spec: str) -> RetrieverEntry:
        """The entry of a spec (a default entry when it has none)."""
        found = self.entries.get(spec)
        if found is not None:
            return found
        return RetrieverEntry(spec=spec, display_name=spec, kind=default_kind(spec))


def load_registry(path: str | Path | None = None) -> Registry:
    """Load ``retrievers.yaml`` (default: the one at the repository root); validates fields."""
    path = Path(path) if path else REGISTRY_PATH
    if not path.exists():
        return Registry(entries={}, hash="")
    raw = path.read_bytes()
    data = yaml.safe_load(raw) or {}
    entries: dict[str, RetrieverEntry] = {}
    for spec, item in (data.get("retrievers") or {}).items():
        item = item or {}
        unknown = set(item) - FIELDS
        if unknown:
            raise ValueError(f"{path}: retriever {spec!r} has unknown field(s) {sorted(unknown)}")
        kind = item.get("kind") or default_kind(spec, str(item.get("engine") or ""))
        if kind not in KINDS:
            raise ValueError(f"{path}: retriever {spec!r}: kind must be one of {KINDS}")
        entries[spec] = RetrieverEntry(
            spec=spec,
            display_name=str(item.get("display_name") or spec),
            kind=kind,
            release_date=parse_date(item.get("release_date")),
            query_prefix=str(item.get("query_prefix") or ""),
            document_prefix=str(item.get("document_prefix") or ""),
            instruction=str(item.get("instruction") or ""),
            instruction_template=str(item.get("instruction_template") or INSTRUCTION_TEMPLATE),
            notes=str(item.get("notes") or ""),
            **engine_fields(path, spec, item),
        )
    return Registry(entries=entries, hash=hashlib.sha256(raw).hexdigest()[:16])


def engine_fields(path: Path, spec: str, item: dict[str, Any]) -> dict[str, Any]:
    """The engine fields of an entry (``engine``, ``model``, ``options``, ``batch_size``,
    ``resources``), type-checked with errors naming the file and the spec."""
    out: dict[str, Any] = {
        "engine": str(item.get("engine") or ""),
        "model": str(item.get("model") or ""),
    }
    for name in ("options", "resources"):
        value = item.get(name) or {}
        if not isinstance(value, dict):
            raise ValueError(f"{path}: retriever {spec!r}: {name} must be a mapping")
        out[name] = dict(value)
    unknown = sorted(set(out["resources"]) - set(RESOURCE_FIELDS))
    if unknown:
        raise ValueError(
            f"{path}: retriever {spec!r}: unknown resources {unknown} (known: {RESOURCE_FIELDS})"
        )
    batch = item.get("batch_size", DEFAULT_BATCH_SIZE)
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise ValueError(f"{path}: retriever {spec!r}: batch_size must be a positive integer")
    out["batch_size"] = batch
    return out


def load_registries(files: Sequence[str | Path] = (), *, only: bool = False) -> Registry:
    """The default ``retrievers.yaml`` with ``files`` merged over it in order (an entry of a
    later file replaces the earlier entry of the same spec wholesale), or with ``only`` the
    ``files`` alone. Hash = sha256 of the merged files' bytes joined by NUL, first 16 hex (one
    file: the hash :func:`load_registry` gives it)."""
    paths = [Path(p) for p in files]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"registry file(s) not found: {', '.join(missing)}")
    if only and not paths:
        raise ValueError("a registry of only the given files needs at least one file")
    if not only and REGISTRY_PATH.exists():
        paths.insert(0, REGISTRY_PATH)
    if not paths:
        return Registry(entries={}, hash="")
    entries: dict[str, RetrieverEntry] = {}
    for path in paths:
        try:
            entries |= load_registry(path).entries
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from exc
    digest = hashlib.sha256(b"\0".join(p.read_bytes() for p in paths))
    return Registry(entries=entries, hash=digest.hexdigest()[:16])
