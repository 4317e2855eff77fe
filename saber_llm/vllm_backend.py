"""The vLLM backend resource: offline ``LLM.chat`` batches (the engine:
:mod:`saber_compute.llm.vllm_offline`).

vLLM is never imported into the build's process: its pins conflict with the project's, so it has
its own environment (``make vllm-env`` → ``.venv-vllm``). With ``execution: local`` the engine
runs in the local LLM server (:mod:`saber_llm.engine_server`) started from that
environment; with ``execution: slurm`` in the allocation's server job (``env_path`` of the SLURM
profile). Either way a stage's requests reach the engine as one batch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

from pydantic import Field

from saber_compute.llm.embedded import STOP_STRINGS, convert_packaged_model, packaged_model_folder
from saber_compute.llm.interface import LLMRequest, LLMResult
from saber_compute.llm.vllm_offline import VLLM_VERSION
from saber_llm.base import EngineBackend
from saber_llm.engine_server import EngineServerError, LocalEngineServer

if TYPE_CHECKING:
    from saber_config import BuildPlan

PROJECT_ROOT = Path(__file__).resolve().parents[1]
ENV_VAR = "SABER_VLLM_ENV"
# resource fields that say where and how the local server runs, not what the engine answers
LAUNCH_FIELDS = ("env_path", "home", "idle_timeout", "kv_cache_gib")


def default_env_path() -> Path:
    """``$SABER_VLLM_ENV``, else ``.venv-vllm`` in the project root."""
    return Path(os.environ.get(ENV_VAR) or PROJECT_ROOT / ".venv-vllm")


class VLLMBackend(EngineBackend):
    """vLLM offline ``LLM.chat``, batched by sampling parameters, prefix caching on."""

    ENGINE: ClassVar[str] = "saber_compute.llm.vllm_offline:VLLMEngine"
    config_name: ClassVar[str] = "vllm"

    model: str = Field(description="Hugging Face model id or local folder")
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
    enforce_eager: bool = Field(default=False, description="No graph compilation (faster load)")
    block_size: int | None = Field(default=None, description="KV-cache block size in tokens")
    seed: int = Field(default=0, description="The engine's seed")
    version: str = Field(default=VLLM_VERSION, description="The vLLM version the build expects")
    stop: list[str] = Field(default_factory=list, description="Stop strings of free text")
    chat_template: str = Field(
        default="", description='"" (the folder\'s), "plain" (base models), "gemma3" or a file'
    )
    env_path: str = Field(default="", description="The vLLM environment (default .venv-vllm)")
    home: str = Field(default=".saber", description="SABER home (the local server's folder)")
    idle_timeout: float = Field(default=600.0, description="Local server: idle seconds to exit")
    kv_cache_gib: int = Field(default=1, description="CPU KV cache GiB (VLLM_CPU_KVCACHE_SPACE)")

    @classmethod
    def from_plan(cls, plan: BuildPlan) -> Self:
        """The model of ``plan.llm``; no model: the packaged Gemma 3 270M on this machine's CPU
        (a base model: the embedded engine's plain-text prompts and stop strings)."""
        llm, home = plan.llm, str(plan.paths.home)
        if not llm.model:
            return cls(
                model=str(packaged_model_folder()),
                max_model_len=llm.max_model_len or 2048,
                enforce_eager=True,
                block_size=32,
                stop=list(STOP_STRINGS),
                chat_template="plain",
                seed=plan.seed,
                home=home,
            )
        return cls(
            model=llm.model,
            tensor_parallel_size=llm.tensor_parallel,
            reasoning_effort=llm.reasoning_effort,
            max_model_len=llm.max_model_len or None,
            seed=plan.seed,
            home=home,
        )

    def engine_spec(self) -> tuple[str, dict[str, Any]]:
        """The engine class and its config (without the local server's launch settings)."""
        config = {k: v for k, v in self.model_dump().items() if k not in LAUNCH_FIELDS}
        return self.ENGINE, {**config, "stop": tuple(self.stop)}

    def prepare_model(self) -> None:
        """Convert the packaged Gemma 3 270M when it is the model and not converted yet (its
        folder gets Gemma 3's chat template); a missing local folder is a one-line error."""
        if Path(self.model) == packaged_model_folder():
            convert_packaged_model()
        elif self.model.startswith(("/", ".", "~")) and not Path(self.model).expanduser().is_dir():
            raise FileNotFoundError(
                f"model folder {self.model} does not exist: set SABER_LLM_MODEL to a model folder "
                "or Hugging Face id (empty: the packaged Gemma 3 270M)"
            )

    def preflight(self) -> None:
        """The local server can start: its environment and the model folder exist (else
        ``EngineServerError`` naming the fix)."""
        if not self.python().exists():
            raise EngineServerError(
                f"the vLLM environment is missing ({self.python()} does not exist): run "
                "`make vllm-env` (or point SABER_VLLM_ENV at a vLLM environment)"
            )
        try:
            self.prepare_model()
        except FileNotFoundError as exc:
            raise EngineServerError(str(exc)) from exc

    def identity(self) -> dict[str, str]:
        """The engine's identity: vLLM version, model and the model folder's content hash."""
        self.prepare_model()
        return super().identity()

    def python(self) -> Path:
        """The vLLM environment's interpreter."""
        return Path(self.env_path or default_env_path()) / "bin" / "python"

    def local_server(self, log: Callable[[str], None] = print) -> LocalEngineServer:
        """The local LLM server of this configuration (started on first use)."""
        identity = self.identity()
        spec, config = self.engine_spec()
        # this checkout first: the server runs the build's code even when the environment's
        # editable install points at another checkout (the payload version is checked)
        paths = [str(PROJECT_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(":"))]
        env = {
            "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib),
            "SLURM_JOB_ID": "",
            "PYTHONPATH": ":".join(dict.fromkeys(paths)),
        }
        return LocalEngineServer(
            Path(self.home), self.python(), spec, config, identity, env, self.idle_timeout, log=log
        )

    def local_dispatch(self, log: Callable[[str], None]) -> LocalEngineServer:
        """What ``CachedLLM`` sends a stage's cache misses to under ``execution: local``."""
        return self.local_server(log)

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResult]:
        """Answers from the local LLM server (never from vLLM in this process)."""
        results: list[LLMResult] = []
        for _, part in self.local_server().stream(requests):
            results += part
        return results

    def load(self) -> None:
        """Start the local server and wait until its model is loaded."""
        server = self.local_server()
        server.wait_loaded(server.ensure_running())
