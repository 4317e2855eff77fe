"""Shared by both tiers: offline model loading (no hub access, ever), and the work units of
``make test-all``, which runs both tiers in two pytest-xdist workers."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HEAVY_GROUP = "dev-cluster-and-vllm"


def _modules_with(items: list[pytest.Item], marker: str) -> set[str]:
    return {i.module.__name__ for i in items if i.get_closest_marker(marker)}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Work units for ``--dist loadgroup``: a module's tests stay together (they share its
    fixtures: a vLLM server, a reference build), and every module with a dev-cluster or a vLLM
    test is in one unit: no two of them queue for the cluster's one node at once, and no two
    vLLM engines spin on the same two cores (measured: three at once made a run slower than
    one worker). Longest units first: that one (it waits on the cluster a lot, while the other
    worker computes), then the modules with end-to-end tests."""
    if getattr(config.option, "dist", "no") != "loadgroup":
        return
    heavy = _modules_with(items, "slurm") | _modules_with(items, "vllm")
    e2e = _modules_with(items, "e2e")

    def rank(item: pytest.Item) -> int:
        name = item.module.__name__
        return 0 if name in heavy else 1 if name in e2e else 2

    items.sort(key=rank)  # stable: each unit keeps its order
    for item in items:
        name = item.module.__name__
        item.add_marker(pytest.mark.xdist_group(HEAVY_GROUP if name in heavy else name))
