"""``saber build --from-manifest PATH``: make a build again from what its manifest recorded.

The manifest (``export/manifest.json``, :mod:`saber_lineage.provenance`) holds every setting
as written; they become a profile file in the SABER home, and the build runs supervised as any
``saber build``. Before it starts: an input file whose content differs from the recorded hash
stops it (naming the file and both hashes); another commit, uncommitted changes or other
package versions are printed as warnings; ``SABER_<NAME>`` variables that would change a
setting are refused, since the manifest is the whole configuration.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import yaml

from saber_config import flat_names
from saber_config.loading import LEGACY_FLAT
from saber_config.schema import LOCATIONS
from saber_lineage.provenance import ManifestMismatch, config_from_manifest

KEPT_VARIABLES = ("SABER_HOME", "SABER_PROFILE", "SABER_EMBEDDING_CACHE")  # locations


def manifest_profile(path: Path, home: str) -> tuple[Path, list[str]]:
    """The profile file written from the manifest at ``path`` into ``home``, and warnings."""
    build, warnings = config_from_manifest(path, home)
    settings = build.model_dump()
    for key in (*LOCATIONS, "profile", "explicit"):
        settings.pop(key, None)
    profile = Path(home) / "from-manifest.yaml"
    profile.parent.mkdir(parents=True, exist_ok=True)
    header = f"# the settings of the build recorded in {Path(path).resolve()}\n"
    profile.write_text(header + yaml.safe_dump(settings, sort_keys=False))
    return profile, warnings


def overriding_variables() -> list[str]:
    """``SABER_<NAME>`` variables set in this environment that would change a setting."""
    names = [f"SABER_{n.upper()}" for n in [*flat_names(), *LEGACY_FLAT]]
    return sorted(n for n in names if n in os.environ and n not in KEPT_VARIABLES)


def rebuild_main(path: Path, debug: bool = False) -> int:
    """Check the manifest's inputs, then run the supervised build of its settings."""
    from saber_cli.supervise import supervise_build

    clash = overriding_variables()
    if clash:
        print(
            f"saber build --from-manifest: unset {', '.join(clash)}: the manifest holds every "
            "setting of the build it records",
            file=sys.stderr,
        )
        return 2
    home = os.environ.get("SABER_HOME", ".saber")
    try:
        profile, warnings = manifest_profile(path, home)
    except (ManifestMismatch, FileNotFoundError, KeyError) as exc:
        print(f"saber build --from-manifest: {exc}", file=sys.stderr)
        return 2
    for warning in warnings:
        print(f"saber build --from-manifest: note: {warning}", file=sys.stderr)
    print(f"saber build: the settings of {path} ({profile})", file=sys.stderr)
    return supervise_build(str(profile), debug)
