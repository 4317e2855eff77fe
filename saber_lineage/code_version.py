"""Code versions that cover all the code an asset runs.

An asset's code version hashes the source of its own module and of every project module that
module imports, transitively (imports anywhere in a file count, function-level ones included,
and a package's ``__init__.py`` counts whenever one of its modules is imported). Editing any
helper an asset uses therefore makes the asset stale; editing a module it never reaches does not.
The import graph is read statically (``ast``) from the source files, never by importing them.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "saber_core",
    "saber_compute",
    "saber_store",
    "saber_llm",
    "saber_config",
    "saber_slurm",
    "saber_lineage",
    "saber_allpairs",
    "saber_eval",
    "saber_study",
    "saber_runtime",
    "saber_assets",
    "saber_cli",
)


def module_file(module: str, root: Path = PROJECT_ROOT) -> Path | None:
    """The source file of a project module (``pkg/mod.py`` or ``pkg/__init__.py``), or None."""
    if module.split(".", 1)[0] not in PACKAGES:
        return None
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported(module: str, path: Path) -> frozenset[str]:
    """Absolute names of the modules a source file imports (``from m import x`` adds ``m.x``
    too, in case ``x`` is a submodule); computed once per file content."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    return _imports_of(path.read_text(encoding="utf-8"), str(path), package)


@lru_cache(maxsize=1024)
def _imports_of(source: str, filename: str, package: str) -> frozenset[str]:
    names: set[str] = set()
    for node in _import_statements(_parsed(source, filename).body):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        else:
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{node.module}" if node.module else anchor
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return frozenset(names)


def _import_statements(body: list) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement in a block and the blocks nested in it (functions, classes,
    ``if``/``try``/``with``/loops/``match``): an import is a statement, so the expressions —
    most of a syntax tree — need not be walked."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                yield from _import_statements(block)


@lru_cache(maxsize=1024)
def _parsed(source: str, filename: str, retries: int = 2) -> ast.Module:
    """``ast.parse`` once per source text. CPython 3.11 can raise ``SystemError: AST constructor
    recursion depth mismatch`` when another thread builds an AST at the same moment (its
    recursion counter is shared; CPython gh-106905, seen here under Dagster's threads): the
    parse is then repeated."""
    for _ in range(retries):
        try:
            return ast.parse(source, filename)
        except SystemError:
            continue
    return ast.parse(source, filename)


def _with_parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


# Packages whose effect on a stage is the values it reads from them, every one recorded in the
# stage's fingerprint (the build plan: fields, properties and method results — see
# saber_config.reads): their own files count, what they import does not (the plan
# holds core rule objects, but a stage runs their code only through its own imports).
VALUES_ONLY = ("saber_config",)


def module_closure(module: str, root: Path = PROJECT_ROOT) -> list[Path]:
    """The project source files ``module`` runs: itself, its packages' ``__init__`` files and
    everything they import, transitively (a :data:`VALUES_ONLY` package contributes its own
    files only); sorted."""
    seen: set[str] = set()
    files: set[Path] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        for part in _with_parents(name):
            if part in seen:
                continue
            seen.add(part)
            path = module_file(part, root)
            if path is None:
                continue
            files.add(path)
            imported = _imported(part, path)
            if part.startswith(VALUES_ONLY):
                imported = {m for m in imported if m.startswith(VALUES_ONLY)}
            todo.extend(imported)
    return sorted(files)


@lru_cache(maxsize=128)
def code_version(module: str, root: Path = PROJECT_ROOT) -> str:
    """sha256 (first 12 hex) over the paths and bytes of :func:`module_closure` (``module``)."""
    digest = hashlib.sha256()
    for path in module_closure(module, root):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]
