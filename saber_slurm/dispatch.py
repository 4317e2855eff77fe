"""The SLURM dispatch of one asset execution: the run's LLM-server allocation
(``mode: allocation``, :mod:`.allocation`) or one job per shard (:mod:`.dispatcher`)."""

from __future__ import annotations

from typing import Any

import dagster as dg

from saber_llm.base import LLMBackend
from saber_slurm.allocation import AllocationDispatcher
from saber_slurm.dispatcher import ShardDispatch, SlurmDispatcher
from saber_slurm.settings import SlurmDispatch
from saber_store.database import DuckDBStore


def open_dispatch(
    settings: SlurmDispatch,
    context: dg.AssetExecutionContext,
    backend: LLMBackend,
    store: DuckDBStore | None = None,
) -> SlurmDispatcher | AllocationDispatcher:
    """The dispatch for one asset execution by the settings' mode; ``store`` records the
    stage's cost (``slurm_stage_costs``)."""
    if settings.mode == "allocation":
        return AllocationDispatcher(settings, context, backend, store)
    return SlurmDispatcher(settings, context, backend, store)


def maybe_dispatcher(
    execution: str,
    slurm: SlurmDispatch | None,
    context: dg.AssetExecutionContext,
    backend: LLMBackend | None,
    store: DuckDBStore | None = None,
) -> ShardDispatch | Any | None:
    """The SLURM dispatch when ``execution == "slurm"`` (the run's allocation, or one job per
    shard); otherwise the local LLM server of a backend whose engine lives in its own
    environment (vLLM: ``local_dispatch``), else None (in-process calls); ``store`` records the
    stage's cost."""
    if backend is None:
        return None
    if slurm is None or execution != "slurm":
        local = getattr(backend, "local_dispatch", None)
        return local(context.log.info) if local is not None else None
    return open_dispatch(slurm, context, backend, store)
