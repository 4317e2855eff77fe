"""Where a build keeps its files (Dagster-free, so ``saber eval`` can use it).

The SABER home is ``$SABER_HOME``, else the profile's ``home`` setting, else ``.saber``. The
embedding cache lives in the home unless ``embedding_cache`` (``$SABER_EMBEDDING_CACHE``) names a
file: homes may share one, as its vectors are keyed by model and exact text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

PROFILES_DIR = Path(__file__).resolve().parents[1] / "profiles"


def profile_path(name: str | None = None) -> Path:
    """The YAML file of a profile (a name in ``profiles/`` or a path; default
    ``$SABER_PROFILE`` or ``default``); ValueError naming the known profiles."""
    name = name or os.environ.get("SABER_PROFILE") or "default"
    path = Path(name) if name.endswith((".yaml", ".yml")) else PROFILES_DIR / f"{name}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))
        raise ValueError(f"unknown SABER profile {name!r}: no {path} (known: {known})")
    return path


@dataclass(frozen=True)
class SaberPaths:
    """The files under one SABER home."""

    home: Path
    shared_embedding_cache: Path | None = None

    @classmethod
    def at(cls, home: str | Path, embedding_cache: str | Path = "") -> SaberPaths:
        """The files under ``home`` (resolved to an absolute path); ``embedding_cache``: a
        cache file shared with other homes ("": the home's own)."""
        shared = Path(embedding_cache).resolve() if embedding_cache else None
        return cls(Path(home).resolve(), shared)

    @classmethod
    def for_profile(cls, profile: str | None = None) -> SaberPaths:
        """The files of a profile (``$SABER_HOME`` and ``$SABER_EMBEDDING_CACHE`` win over the
        profile's ``home`` and ``embedding_cache``)."""
        values = yaml.safe_load(profile_path(profile).read_text()) or {}
        home = os.environ.get("SABER_HOME") or values.get("home") or ".saber"
        cache = os.environ.get("SABER_EMBEDDING_CACHE") or values.get("embedding_cache") or ""
        return cls.at(home, cache)

    @property
    def database(self) -> Path:
        """The build's DuckDB file."""
        return self.home / "saber.duckdb"

    @property
    def export_dir(self) -> Path:
        """Where ``benchmark_export`` writes."""
        return self.home / "export"

    @property
    def artifacts_dir(self) -> Path:
        """Score matrices and other large artifacts."""
        return self.home / "artifacts"

    @property
    def eval_dir(self) -> Path:
        """Retriever evaluations (runs, leaderboards, plots)."""
        return self.home / "eval"

    @property
    def embedding_cache(self) -> Path:
        """Embeddings (and evaluation LLM calls) by model and exact text."""
        return self.shared_embedding_cache or self.home / "cache" / "eval_cache.duckdb"

    @property
    def mlruns(self) -> Path:
        """The MLflow file store."""
        return self.home / "mlruns"

    @property
    def dagster_home(self) -> Path:
        """Dagster's run history: the instance ``make ui`` shows and ``saber build`` uses."""
        return self.home / "dagster_home"

    @property
    def chosen_c(self) -> Path:
        """Where ``saber study budget --choose-c`` writes its chosen C (``rating.c: auto``)."""
        return self.home / "study" / "budget" / "chosen_c.json"

    @property
    def logs_dir(self) -> Path:
        """The full output of each ``saber build`` (Dagster's event log included)."""
        return self.home / "logs"
