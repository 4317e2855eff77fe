"""The evaluation code's version: every module a ``saber eval`` run imports, transitively (the
core metrics included), and the pointwise prompt of the ``llm:`` retriever."""

from __future__ import annotations

import hashlib
from functools import lru_cache

from saber_lineage.code_version import PROJECT_ROOT, code_version


@lru_cache(maxsize=1)
def code_hash() -> str:
    """sha256 (first 12 hex) of the code version of ``saber_eval.cli`` and the pointwise
    prompt."""
    digest = hashlib.sha256(code_version("saber_eval.cli").encode())
    prompt = PROJECT_ROOT / "prompts" / "pointwise.md"
    if prompt.exists():
        digest.update(prompt.read_bytes())
    return digest.hexdigest()[:12]
