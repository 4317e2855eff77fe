"""The Dagster instance of ``saber build``: by default the one ``make ui`` shows.

Dagster is imported only inside :func:`saber_instance`: the supervisor of ``saber build``
calls :func:`dagster_home` without paying for it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from saber_store.paths import SaberPaths

if TYPE_CHECKING:
    import dagster as dg

PROJECT_ROOT = Path(__file__).resolve().parents[1]
NO_CAPTURE = {
    "compute_logs": {
        "module": "dagster._core.storage.noop_compute_log_manager",
        "class": "NoOpComputeLogManager",
    }
}


def dagster_home(home: Path) -> Path:
    """``$DAGSTER_HOME`` when set, else ``<home>/dagster_home`` — the folder ``make ui`` uses —
    created with the project's ``dagster.yaml`` (an existing one is kept as it is)."""
    given = os.environ.get("DAGSTER_HOME")
    if given:
        return Path(given)
    path = SaberPaths.at(home).dagster_home
    path.mkdir(parents=True, exist_ok=True)
    config = path / "dagster.yaml"
    if not config.exists():
        shutil.copyfile(PROJECT_ROOT / "dagster.yaml", config)
    return path


def saber_instance(home: Path) -> dg.DagsterInstance:
    """The persistent instance under :func:`dagster_home` (run history kept, shown in the UI),
    without Dagster's per-step capture of stdout and stderr: that capture mirrors the output
    through ``tail`` processes (three processes a step) that can drop its last lines; the
    worker's output is the build's log file already."""
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    ref = InstanceRef.from_dir(str(dagster_home(home)), overrides=NO_CAPTURE)
    return dg.DagsterInstance.from_ref(ref)
