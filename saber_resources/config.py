"""Build configuration: one resource holding every size, threshold and seed of a build.

Profiles are YAML files in ``profiles/`` (``default``, ``paper``, ``tiny``), chosen by
``SABER_PROFILE`` (a profile name or a path to a YAML file); any field can be overridden by the
environment variable ``SABER_<FIELD>`` (e.g. ``SABER_N_QUERIES=100``). The environment is read in
``load_build_config`` only, never at import time.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import dagster as dg
import yaml

from saber_core.pools import PoolConfig

PROFILES_DIR = Path(__file__).resolve().parents[1] / "profiles"


class BuildConfig(dg.ConfigurableResource):
    """Sizes, thresholds and seeds of a build (recorded in provenance via ``config_hash``)."""

    profile: str = "default"
    home: str = ".saber"
    corpus: str = "champ"
    ontology: str = "champ"
    synth_scale: float = 1.0
    corpus_limit: int = 0
    summaries: Literal["corpus", "llm"] = "corpus"
    topics: Literal["corpus", "llm"] = "corpus"
    judge: Literal["embedding", "lexical", "llm"] = "embedding"
    llm_backend: Literal["embedded", "openai", "vllm"] = "embedded"
    llm_model: str = ""
    llm_base_url: str = ""
    llm_tensor_parallel: int = 1
    llm_reasoning_effort: str = ""
    llm_max_concurrency: int = 16
    judge_mode: Literal["choice", "generate"] = "choice"
    judge_both_orders: bool = True
    judge_max_tokens: int = 4096
    summary_max_tokens: int = 96
    topics_max_tokens: int = 48
    topic_shortlist: int = 12
    max_topics: int = 5
    seed: int = 0
    n_queries: int = 30
    n_topic_only: int = 10
    n_summary_only: int = 10
    n_both: int = 10
    threshold_mode: Literal["quantile", "absolute"] = "quantile"
    topic_high: float = 0.9
    topic_low: float = 0.5
    summary_high: float = 0.9
    summary_low: float = 0.5
    near_duplicate_cut: float = 0.8
    pool_fallback: Literal["relax", "skip"] = "relax"
    rounds: int = 8
    pairing: Literal["swiss", "information"] = "swiss"  # swiss: the published method
    bt_soft: bool = False  # fit BT (and information pairing) on the judge's probabilities
    bt_c: float = 1.0
    neighbours_kept: int = 50
    max_text_chars: int = 100_000
    execution: Literal["local", "slurm"] = "local"
    slurm_profile: str = "dev"
    slurm_shard_size: int = 0
    slurm_max_retries: int = -1
    slurm_partition: str = ""
    slurm_account: str = ""
    slurm_time_limit: str = ""
    slurm_gpus_per_node: int = -1
    rebuild_cron: str = ""
    watch_inputs: bool = False
    validity_bootstrap: int = 200
    validity_rr_queries: int = 3
    contamination_corpus: str = ""
    contam_ngram: int = 8
    contam_threshold: float = 0.35
    recipe_summaries: str = "auto"  # auto | none | a {doc_id, summary} JSONL/parquet file
    recipe_queries: int = 0  # queries in the other-recipe tournament (seeded sample; 0 = all)

    def pool_config(self) -> PoolConfig:
        """The pool-selection part of the config."""
        return PoolConfig(
            n_topic_only=self.n_topic_only,
            n_summary_only=self.n_summary_only,
            n_both=self.n_both,
            threshold_mode=self.threshold_mode,
            topic_high=self.topic_high,
            topic_low=self.topic_low,
            summary_high=self.summary_high,
            summary_low=self.summary_low,
            near_duplicate_cut=self.near_duplicate_cut,
            fallback=self.pool_fallback,
        )

    @property
    def home_path(self) -> Path:
        """The SABER home folder (database, artifacts, export)."""
        return Path(self.home).resolve()

    @property
    def database_path(self) -> Path:
        """The build's DuckDB file."""
        return self.home_path / "saber.duckdb"

    @property
    def export_dir(self) -> Path:
        """Where ``benchmark_export`` writes."""
        return self.home_path / "export"

    @property
    def artifacts_dir(self) -> Path:
        """Where score matrices and plots are kept."""
        return self.home_path / "artifacts"


def load_build_config(profile: str | None = None, **overrides: object) -> BuildConfig:
    """Build config from a profile, ``SABER_*`` environment overrides, then explicit overrides."""
    name = profile or os.environ.get("SABER_PROFILE") or "default"
    path = Path(name) if name.endswith((".yaml", ".yml")) else PROFILES_DIR / f"{name}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))
        raise ValueError(f"unknown SABER profile {name!r}: no {path} (known: {known})")
    values = yaml.safe_load(path.read_text()) or {}
    values["profile"] = path.stem
    values["home"] = os.environ.get("SABER_HOME", values.get("home", ".saber"))
    for field, info in BuildConfig.model_fields.items():
        env = os.environ.get(f"SABER_{field.upper()}")
        if env is not None and field not in ("profile", "home"):
            values[field] = env
        del info
    values.update(overrides)
    unknown = set(values) - set(BuildConfig.model_fields)
    if unknown:
        raise ValueError(f"profile {path}: unknown setting(s) {sorted(unknown)}")
    return BuildConfig(**values)
