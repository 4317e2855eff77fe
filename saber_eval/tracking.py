"""MLflow logging: each evaluation (retriever × setting) is one run in a local store.

Default store: the file store ``$SABER_HOME/mlruns`` (URI ``Path(...).as_uri()``); any MLflow
tracking URI (e.g. ``sqlite:///…``) can be passed instead. MLflow ≥ 3.7 refuses file stores
unless ``MLFLOW_ALLOW_FILE_STORE=true``; this module sets that (if unset) for file URIs only.
Params: retriever, setting, benchmark hash (+ display name, kind, benchmark folder, code hash);
metrics: ``ndcg_at_10``, ``ndcg_at_10_trec``, ``ndcg_at_10.<domain>``, ``median_latency_s``,
``mean_latency_s`` and, from the refreshed leaderboard, the bootstrap intervals
(``ndcg_at_10_ci_low`` …) and the MTEB score when there is one; params also record the bootstrap
seed and resamples; artifacts: the run file, the per-query CSV, the leaderboard and
rank-stability files and the plots. ``mlflow`` is imported
only when logging.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

EXPERIMENT = "saber-eval"


def tracking_uri(store: str | Path) -> str:
    """A tracking URI: URIs (``scheme:…``) unchanged, folders as ``file://`` URIs."""
    text = str(store)
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]+:", text):
        return text
    path = Path(text).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path.as_uri()


def _client(uri: str):
    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


def metric_name(name: str) -> str:
    """An MLflow-safe metric name (``@`` → ``_at_``, other unsafe characters → ``_``)."""
    return re.sub(r"[^A-Za-z0-9_.\-/]", "_", name.replace("@", "_at_"))


def log_run(
    store: str | Path,
    *,
    run_name: str,
    params: Mapping[str, Any],
    metrics: Mapping[str, float],
    artifacts: Iterable[Path] = (),
    tags: Mapping[str, str] | None = None,
    experiment: str = EXPERIMENT,
) -> str:
    """Create one finished MLflow run; returns its run id."""
    uri = tracking_uri(store)
    client = _client(uri)
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else _create_experiment(client, experiment)
    run = client.create_run(experiment_id, run_name=run_name, tags=dict(tags or {}))
    run_id = run.info.run_id
    try:
        for key, value in params.items():
            client.log_param(run_id, key, str(value)[:6000])
        for key, value in metrics.items():
            client.log_metric(run_id, metric_name(key), float(value))
        for path in artifacts:
            if Path(path).exists():
                client.log_artifact(run_id, str(path))
    except Exception:
        client.set_terminated(run_id, status="FAILED")
        raise
    client.set_terminated(run_id)
    return run_id


def _create_experiment(client: Any, name: str) -> str:
    """Create the experiment; when another process created it first, use theirs."""
    from mlflow.exceptions import MlflowException

    try:
        return client.create_experiment(name)
    except MlflowException:
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def board_metrics(board: Any, spec: str, setting: str) -> dict[str, float]:
    """The interval (and MTEB) columns of one leaderboard row, nulls left out."""
    from saber_eval.leaderboard import NDCG_COLUMNS

    frame = board.frame
    row = frame.filter((frame["spec"] == spec) & (frame["setting"] == setting))
    if row.height == 0:
        return {}
    values = row.select([c for c in NDCG_COLUMNS if c in row.columns]).row(0, named=True)
    return {k: float(v) for k, v in values.items() if v is not None}


def log_result(
    result: Any,
    store: str | Path,
    plots: Iterable[Path] = (),
    board: Any = None,
    files: Iterable[Path] = (),
) -> str:
    """Log one ``RunResult`` (after ``write_outputs``) with the leaderboard plots; given the
    refreshed ``Leaderboard``, its intervals, bootstrap settings and files too."""
    metrics = {f"ndcg@{result.k}": result.mean, f"ndcg@{result.k}_trec": result.mean_trec}
    if board is not None:
        metrics |= board_metrics(board, result.spec, result.setting)
    metrics |= {f"ndcg@{result.k}.{d}": v for d, v in result.per_domain.items()}
    metrics |= {
        "median_latency_s": result.median_latency_s,
        "mean_latency_s": float(result.latency_s.mean()),
    }
    from saber_eval.version import code_hash

    params = {
        "retriever": result.spec,
        "setting": result.setting,
        "benchmark_hash": result.benchmark_hash,
        "benchmark_dir": result.benchmark_dir,
        "display_name": result.entry.display_name,
        "kind": result.entry.kind,
        "n_queries": len(result.query_ids),
        "k": result.k,
        "code": code_hash(),
    }
    if board is not None:
        params |= {f"bootstrap_{k}": v for k, v in board.bootstrap.items()}
    run_files = [result.files[k] for k in ("run_file", "per_query") if k in result.files]
    return log_run(
        store,
        run_name=f"{result.spec} · {result.setting}",
        params=params,
        metrics=metrics,
        artifacts=[*run_files, *files, *plots],
        tags={"saber.benchmark": result.benchmark_hash},
    )
