"""The vLLM pooling worker: an embedding or cross-encoder model loaded once in the vLLM
environment, answering a retriever's batches over stdin/stdout (no Dagster, no project code
beyond this file), on this machine or inside a SLURM job.

    <vllm env>/bin/python -m saber_compute.pooling_worker '<config JSON>'

Config: ``model`` (folder or Hugging Face id), ``runner`` (``pooling``), ``dtype`` (``auto``:
the checkpoint's), ``max_model_len``, ``gpu_memory_utilization``, ``tensor_parallel_size``,
``trust_remote_code``, ``enforce_eager``, ``seed``. Inputs longer than the context are cut to
it. After loading it prints one line ``@@saber {"ready": …, "load_s": …,
"identity": …}``; then each request line on stdin gets one ``@@saber {…}`` answer line (vLLM's
own log lines go to stderr and are ignored by the client):

* ``{"op": "embed", "texts": [...]}`` → ``{"vectors": [[...], ...], "seconds": s}``: one
  ``LLM.embed`` call (the client sends one batch of ``batch_size`` texts per line);
* ``{"op": "score", "query": q, "documents": [...], "activation": bool}`` →
  ``{"scores": [...], "seconds": s}``: ``LLM.score(q, documents)``; ``activation: false`` turns
  the classifier's activation off (``PoolingParams(use_activation=False)``), so a regression head
  returns its raw value, not σ(logit);
* ``{"op": "exit"}`` ends the worker.

An error answers ``{"error": "..."}`` and the worker goes on.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

MARK = "@@saber "
LLM_FIELDS = (
    "dtype",
    "max_model_len",
    "gpu_memory_utilization",
    "tensor_parallel_size",
    "trust_remote_code",
    "enforce_eager",
    "seed",
)
# inputs longer than the model's context are cut to it (as sentence-transformers and the
# tokenizer's truncation do), not refused
TRUNCATE = {"truncate_prompt_tokens": -1}


def reply(out: Any, payload: dict[str, Any]) -> None:
    """One answer line on the real stdout."""
    out.write(MARK + json.dumps(payload) + "\n")
    out.flush()


def checkpoint_dtype(model: str, trust_remote_code: bool = False) -> str:
    """The dtype the checkpoint's config names (float32 when it names none), as
    sentence-transformers and transformers load it; vLLM's own ``auto`` would downcast a float32
    checkpoint to float16."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model, trust_remote_code=trust_remote_code)
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    return str(dtype).removeprefix("torch.") if dtype else "float32"


def load(config: dict[str, Any]) -> Any:
    """``vllm.LLM`` in pooling mode with the config's engine settings (``dtype: auto`` = the
    checkpoint's)."""
    from vllm import LLM

    kwargs = {k: config[k] for k in LLM_FIELDS if config.get(k) is not None}
    if kwargs.get("dtype", "auto") == "auto":
        kwargs["dtype"] = checkpoint_dtype(config["model"], bool(config.get("trust_remote_code")))
        config["dtype"] = kwargs["dtype"]
    return LLM(model=config["model"], runner=config.get("runner", "pooling"), **kwargs)


def answer(llm: Any, request: dict[str, Any]) -> dict[str, Any]:
    """The answer to one request line."""
    start = time.perf_counter()
    if request["op"] == "embed":
        outputs = llm.embed(list(request["texts"]), use_tqdm=False, tokenization_kwargs=TRUNCATE)
        vectors = [list(map(float, o.outputs.embedding)) for o in outputs]
        return {"vectors": vectors, "seconds": time.perf_counter() - start}
    if request["op"] == "score":
        from vllm import PoolingParams

        params = PoolingParams(use_activation=bool(request.get("activation", True)))
        outputs = llm.score(
            request["query"],
            list(request["documents"]),
            use_tqdm=False,
            pooling_params=params,
            tokenization_kwargs=TRUNCATE,
        )
        scores = [float(o.outputs.score) for o in outputs]
        return {"scores": scores, "seconds": time.perf_counter() - start}
    raise ValueError(f"unknown op {request['op']!r}")


def main(argv: list[str]) -> int:
    """Load the model, then answer request lines until ``exit`` or end of input."""
    out = sys.stdout
    sys.stdout = sys.stderr  # vLLM's prints never mix with the answer lines
    config = json.loads(argv[0])
    start = time.perf_counter()
    try:
        llm = load(config)
    except Exception as exc:
        reply(out, {"error": f"{type(exc).__name__}: {exc}"})
        return 1
    import vllm

    identity = {"backend": "vllm", "engine_version": vllm.__version__, "model": config["model"],
                "dtype": config["dtype"]}  # fmt: skip
    reply(out, {"ready": True, "load_s": time.perf_counter() - start, "identity": identity})
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if request.get("op") == "exit":
            break
        try:
            reply(out, answer(llm, request))
        except Exception as exc:
            reply(out, {"error": f"{type(exc).__name__}: {exc}"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
