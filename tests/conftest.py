"""Shared by both tiers: offline model loading (no hub access, ever), one embedding cache per
session, and the work units of ``make test-all``, which runs both tiers in two pytest-xdist
workers."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session", autouse=True)
def shared_embedding_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One embedding cache for every build of the session (``SABER_EMBEDDING_CACHE``, which
    subprocess builds inherit): each test's build has a home of its own and embeds each
    (model, text) once per session, as homes sharing a cache do. The embedding judge encodes
    each text alone, so its vectors are the same bits read back or encoded anew; a test of the
    home's own cache unsets the variable (``monkeypatch.delenv``)."""
    path = tmp_path_factory.mktemp("embedding_cache") / "eval_cache.duckdb"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SABER_EMBEDDING_CACHE", str(path))
        yield path


# Two units of their own: the modules with dev-cluster tests (no two of them queue for the
# cluster's one node at once) and the modules with local vLLM engines (no two engines spin on
# the same two cores: three at once made a run slower than one worker). Collection checks that
# every module marked ``slurm`` or ``vllm`` is listed.
HEAVY_UNITS = {
    "dev-cluster": (
        "test_allpairs_slurm",
        "test_eval_slurm",
        "test_slurm",
        "test_slurm_allocation",
        "test_slurm_check",
    ),
    "vllm": ("test_eval_vllm_engines", "test_vllm_engine"),
}
UNIT_OF = {module: unit for unit, modules in HEAVY_UNITS.items() for module in modules}


def _module(item: pytest.Item) -> str:
    return Path(str(item.path)).stem


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker: the longest units first — the dev-cluster one (it waits on the
    cluster a lot while the other worker computes) and the vLLM one, then the modules with
    end-to-end tests. A unit's tests run in this order (a module's vLLM tests may thus come
    after the next module's: pytest sets its module fixtures up again)."""
    if not hasattr(config, "workerinput"):
        return
    marked = {
        _module(i) for i in items if i.get_closest_marker("slurm") or i.get_closest_marker("vllm")
    }
    if marked - UNIT_OF.keys():
        raise pytest.UsageError(
            f"tests/conftest.py: add {sorted(marked - UNIT_OF.keys())} to a unit of HEAVY_UNITS"
        )
    e2e = {_module(i) for i in items if i.get_closest_marker("e2e")}

    def rank(item: pytest.Item) -> int:
        """The dev-cluster unit's vLLM tests last in their unit: by then the other worker is
        past the vLLM unit, so no two vLLM engines share the two cores."""
        unit = UNIT_OF.get(_module(item))
        if unit == "dev-cluster":
            return 2 if item.get_closest_marker("vllm") else 0
        return 1 if unit == "vllm" else 3 if _module(item) in e2e else 4

    items.sort(key=rank)  # stable: each module keeps its order


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Units of work: a module (its tests share its fixtures: a vLLM server, a reference build),
    or one of :data:`HEAVY_UNITS`; handed out in collection order (``--no-loadscope-reorder``)."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return UNIT_OF.get(Path(path).stem, path)

    return ModuleUnits(config, log)


class FailuresAtOnce:
    """Under xdist, each failure is named the moment it happens, not only in the summary at the
    end (which a run cut off by its time limit never prints)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            terminal = self.config.pluginmanager.get_plugin("terminalreporter")
            terminal.write_line(f"\nFAILED ({report.when}) {report.nodeid}", red=True)


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("numprocesses", None) and not hasattr(config, "workerinput"):
        config.pluginmanager.register(FailuresAtOnce(config), "saber-failures-at-once")
