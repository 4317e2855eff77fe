"""Integration fixtures: a tiny build in a temporary SABER home, run once per test session."""

import dagster as dg
import pytest


@pytest.fixture(scope="session")
def tiny_build(tmp_path_factory):
    """A finished tiny build: (config, store, first run result)."""
    from saber_cli.build import run_build
    from saber_config import load_build_config
    from saber_store.database import DuckDBStore

    home = tmp_path_factory.mktemp("saber_home")
    build = load_build_config("tiny", home=str(home))
    result = run_build(build, dagster_instance=dg.DagsterInstance.ephemeral())
    return build, DuckDBStore(database=str(build.database_path)), result
