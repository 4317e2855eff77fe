"""``saber build --reference-home DIR``: after the build, how far its labels agree with those of
a reference build (e.g. the same profile with every pair judged, ``tournament.triage: off``).

The comparison is ``saber judge agree <this build's export> <DIR>`` (:mod:`saber_eval.agreement`)
on the 0–5 rating scale (cuts 0.5, 1.5, …, 4.5): per query the within-query Spearman ρ of the two
builds' ratings over the (query, candidate) pairs both label, R², exact agreement on the cut
levels, and the leaderboard τ of the evaluated retrievers when there are runs. Written to
``<this home>/agreement-reference``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from saber_config import BuildConfig

RATING_CUTS = "0.5,1.5,2.5,3.5,4.5"


def agree_with_reference(profile: str | None, reference: Path) -> int:
    """Print ``saber judge agree`` of the profile's export against ``reference``; its status."""
    from saber_cli.config_errors import load_config

    return build_agreement(load_config("build", profile), reference)


def build_agreement(build: BuildConfig, reference: Path) -> int:
    """Print ``saber judge agree`` of ``build``'s export against ``reference``; its status."""
    from saber_cli.judge_agree import agree_main

    out = build.home_path / "agreement-reference"
    print(f"agreement with the reference build {reference} (saber judge agree):")
    argv = [str(build.export_dir), str(reference), "--cuts", RATING_CUTS, "--out", str(out)]
    return agree_main(argv)
