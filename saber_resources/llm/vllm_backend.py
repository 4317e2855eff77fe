"""The vLLM backend resource: offline ``LLM.chat`` batches (the engine:
:mod:`saber_compute.llm.vllm_offline`; vLLM is imported only where the engine runs)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from saber_resources.llm.base import EngineBackend


class VLLMBackend(EngineBackend):
    """vLLM offline ``LLM.chat``, batched by sampling parameters, prefix caching on."""

    ENGINE: ClassVar[str] = "saber_compute.llm.vllm_offline:VLLMEngine"

    model: str = Field(description="Hugging Face model id or local path")
    tensor_parallel_size: int = Field(default=1, description="GPUs per model (tensor parallel)")
    max_model_len: int | None = Field(default=None, description="Context length (None: model's)")
    gpu_memory_utilization: float = Field(default=0.9, description="Fraction of GPU memory used")
    enable_prefix_caching: bool = Field(default=True, description="Reuse shared prompt prefixes")
    reasoning_effort: str = Field(
        default="", description="chat_template_kwargs reasoning_effort (gpt-oss: low/medium/high)"
    )
    dtype: str = Field(default="auto", description="Weights/activations dtype")
    download_dir: str | None = Field(default=None, description="Where weights are downloaded")
    top_logprobs: int = Field(default=5, description="Top-k log-probs asked for when logprobs")
