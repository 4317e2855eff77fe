"""The house rules: the Definitions hold every asset, check and job; each asset lives in the
module of its group and stays thin; the README's asset map is generated from the Definitions;
code versions cover every module an asset runs; the Dagster-free commands stay Dagster-free."""

import importlib
import inspect
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import dagster as dg
import pytest

from saber_assets.definitions import BUILD_JOB, EVAL_JOB, build_definitions
from saber_cli.catalog import asset_map, readme_section
from saber_cli.generated_docs import CONFIGURATION, configuration_markdown, readme_with_budget
from saber_config import load_build_config
from saber_lineage.code_version import PACKAGES, PROJECT_ROOT, code_version, module_closure

STAGES = {
    "inputs": ["corpus", "ontology"],
    "annotation": ["summaries", "topic_annotations"],
    "discovery": ["queries", "topic_similarity", "summary_similarity", "candidate_pools"],
    "tournament": ["pointwise_grades", "judgments", "bt_ratings"],
    "validity": ["rating_intervals", "recipe_sensitivity", "validity_report"],
    "export": ["benchmark_export", "build_manifest", "build_report"],
    "evaluation": ["retriever_runs", "leaderboard"],
}
CHECKS = {
    ("corpus", "counts_reconcile"),
    ("candidate_pools", "pool_size_and_split"),
    ("candidate_pools", "no_self_or_duplicate_candidates"),
    ("judgments", "once_per_round_no_rematch"),
    ("bt_ratings", "ratings_in_range"),
    ("bt_ratings", "no_missing_ratings"),
    ("validity_report", "no_contaminated_queries"),
    ("recipe_sensitivity", "recipe_tournament_valid"),
}
MAX_ASSET_LINES = 60


def _defs(tmp_path, profile: str = "default") -> dg.Definitions:
    return build_definitions(load_build_config(profile, home=str(tmp_path)))


def test_definitions_hold_every_asset_check_and_job(tmp_path):
    build = load_build_config("default", home=str(tmp_path))
    defs = build_definitions(build)
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    rounds = {f"tournament_round_{r:02d}" for r in range(1, build.tournament.rounds + 1)}
    assert keys == {a for stage in STAGES.values() for a in stage} | rounds
    checks = {(k.asset_key.to_user_string(), k.name) for k in graph.asset_check_keys}
    assert checks == CHECKS
    build_job = {
        k.to_user_string()
        for k in defs.resolve_job_def(BUILD_JOB).asset_layer.executable_asset_keys
    }
    assert build_job == keys - set(STAGES["evaluation"])
    eval_job = {
        k.to_user_string() for k in defs.resolve_job_def(EVAL_JOB).asset_layer.executable_asset_keys
    }
    assert eval_job == set(STAGES["evaluation"])
    refresh = defs.resolve_job_def("refresh_benchmark").asset_layer.executable_asset_keys
    # schedules rebuild and refresh the leaderboard; the retriever partitions have their sensor
    assert {k.to_user_string() for k in refresh} == keys - {"retriever_runs"}
    # each round depends on the previous one's standings
    parents = graph.get(dg.AssetKey("tournament_round_02")).parent_keys
    assert dg.AssetKey("tournament_round_01") in parents


def test_each_asset_lives_in_the_module_of_its_group_and_is_thin(tmp_path):
    too_long = {}
    for assets_def in _defs(tmp_path).resolve_asset_graph().assets_defs:
        fn = assets_def.op.compute_fn.decorated_fn
        (spec,) = assets_def.specs_by_key.values()
        module = fn.__module__
        assert module.split(".")[:2] == ["saber_assets", spec.group_name], (spec.key, module)
        lines = len(inspect.getsourcelines(fn)[0])
        if lines > MAX_ASSET_LINES:
            too_long[spec.key.to_user_string()] = lines
    assert too_long == {}


def test_every_package_is_versioned_and_no_stage_repeats_a_module_name():
    """Every project package is one code versions cover, one pyproject installs and one the
    import contracts know; the modules of the discovery stage, in whatever package, have
    distinct file names (the all-pairs pass has one owner, not twins by floor)."""
    on_disk = {p.parent.name for p in PROJECT_ROOT.glob("saber_*/__init__.py")}
    assert on_disk == set(PACKAGES)
    pyproject = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())
    installed = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {name.rstrip("*") for name in installed} == on_disk
    assert set(pyproject["tool"]["importlinter"]["root_packages"]) == on_disk
    discovery = [
        *(PROJECT_ROOT / "saber_core" / "discovery").glob("*.py"),
        *(PROJECT_ROOT / "saber_assets" / "discovery").glob("*.py"),
        *(PROJECT_ROOT / "saber_allpairs").glob("*.py"),
        *(PROJECT_ROOT / "saber_compute").glob("*pass*.py"),
        *(PROJECT_ROOT / "saber_slurm").glob("allpairs*.py"),
    ]
    names = [p.name for p in discovery if p.name != "__init__.py"]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def test_generated_documents_are_current():
    """docs/configuration.md and the asset maps (README, docs/sabermath.md) are what
    ``saber docs`` writes."""
    readme = (PROJECT_ROOT / "README.md").read_text()
    sabermath = (PROJECT_ROOT / "docs" / "sabermath.md").read_text()
    assert readme_section(readme, "platform") == asset_map("platform"), "run `saber docs`"
    assert readme_section(sabermath, "sabermath") == asset_map("sabermath"), "run `saber docs`"
    assert CONFIGURATION.read_text() == configuration_markdown(), "run `saber docs`"
    assert readme_with_budget(readme) == readme, "run `saber docs` (the budget table)"


def test_paper_profile_is_one_config_away(tmp_path):
    build = load_build_config("paper", home=str(tmp_path))
    sizes = (build.pools.n_queries, build.plan().pools.config.pool_size, build.tournament.rounds)
    assert sizes == (1000, 150, 20)
    keys = build_definitions(build).resolve_asset_graph().get_all_asset_keys()
    assert dg.AssetKey("tournament_round_20") in keys


def test_workspace_module_loads_definitions():
    code = "import saber_assets.definitions as d; print(type(d.defs).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() in {"Definitions", "function", "LazyDefinitions"}


def test_importing_saber_core_does_not_import_dagster():
    code = (
        "import sys, pkgutil, importlib, saber_core\n"
        "for m in pkgutil.walk_packages(saber_core.__path__, 'saber_core.'):\n"
        "    importlib.import_module(m.name)\n"
        "print('dagster' in sys.modules, 'sklearn' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def test_saber_eval_and_study_commands_run_without_dagster(tiny_build, tmp_path):
    """``saber eval`` (a lexical retriever, and an ``llm:`` one through a profile's plan, its
    backend and the call cache) and ``saber study`` never import Dagster."""
    build, _, _ = tiny_build
    profile = tmp_path / "constant.yaml"
    profile.write_text(f"home: {tmp_path / 'llm-home'}\nllm:\n  backend: constant\n")
    code = (
        "import sys\n"
        "from saber_compute.llm.interface import LLMResult\n"
        "from saber_llm import factory\n"
        "from saber_llm.base import LLMBackend\n"
        "class Constant(LLMBackend):\n"
        "    config_name = 'constant'\n"
        "    def generate(self, requests):\n"
        "        return [LLMResult(text=str(len(r.messages[-1].content) % 11)) for r in requests]\n"
        "    def identity(self):\n"
        "        return {'backend': 'constant', 'model': 'length'}\n"
        "factory.BACKENDS['constant'] = Constant\n"
        "from saber_cli.main import main\n"
        f"assert main(['eval', '--benchmark', {str(build.export_dir)!r}, '--retriever', 'bm25',"
        f" '--retriever', 'llm:{profile}', '--no-mlflow', '--out', {str(tmp_path / 'eval')!r}])"
        " == 0\n"
        "assert main(['study', 'tournament', '--queries', '2', '--players', '8', '--rounds', '2',"
        " '--noise-sweep', '1.0', '--cheap-noise', '0.5', '--thresholds', '0.3',"
        " '--triage-judge-noise', '', '--split-half-repeats', '2', '--bootstrap-queries', '1',"
        f" '--bootstrap-draws', '5', '--quiet', '--out', {str(tmp_path / 's.json')!r}]) == 0\n"
        "print('DAGSTER', sorted(m for m in sys.modules if m.split('.')[0] == 'dagster')[:3])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "DAGSTER []" in out.stdout
    runs = sorted(p.parent.name for p in (tmp_path / "eval").rglob("statement-full.trec"))
    assert len(runs) == 2 and (tmp_path / "s.json").exists(), runs


def _copy_project(target: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(
            PROJECT_ROOT / package, target / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    return target


def test_code_version_covers_every_module_an_asset_runs(tmp_path):
    """``rating_intervals`` runs ``pool_matrix`` (saber_assets.tables, another module of the
    asset layer) and ``PlayedRounds`` (saber_core.rating.comparisons) through its module's
    imports:
    editing such a helper changes its code version, and only the versions of assets that
    reach it."""
    assets_module = "saber_assets.validity.assets"
    closure = {p.relative_to(PROJECT_ROOT).as_posix() for p in module_closure(assets_module)}
    assert {
        "saber_core/rating/comparisons.py",
        "saber_core/rating/bradley_terry.py",
        "saber_assets/tables.py",
        "saber_runtime/stage.py",
    } <= closure
    root = _copy_project(tmp_path / "copy")
    before = {m: code_version(m, root) for m in (assets_module, "saber_assets.inputs")}
    for helper in (
        root / "saber_assets" / "tables.py",
        root / "saber_core" / "rating" / "comparisons.py",
    ):
        helper.write_text(helper.read_text() + "\n# edited\n")
        code_version.cache_clear()
        after = {m: code_version(m, root) for m in before}
        assert after[assets_module] != before[assets_module], helper
        assert after["saber_assets.inputs"] == before["saber_assets.inputs"], helper
        before = after


def test_editing_a_helper_makes_rating_intervals_stale(tiny_build, tmp_path, monkeypatch):
    """End to end: with ``pool_matrix`` (saber_assets.tables) edited, materializing
    ``rating_intervals`` recomputes it (its stored tables are not reused), while ``corpus``
    (which never runs that helper) is reused."""
    import saber_runtime.stage as stage
    from saber_assets.inputs import corpus
    from saber_assets.validity import rating_intervals
    from saber_store.database import DuckDBStore

    build, _, _ = tiny_build
    home = tmp_path / "home"
    shutil.copytree(build.home_path, home)
    root = _copy_project(tmp_path / "copy")
    helper = root / "saber_assets" / "tables.py"
    helper.write_text(helper.read_text() + "\n# edited\n")
    code_version.cache_clear()
    monkeypatch.setattr(stage, "code_version", lambda module: code_version(module, root))
    copy = load_build_config("tiny", home=str(home))
    result = dg.materialize(
        [corpus, rating_intervals],
        resources={"build": copy, "store": DuckDBStore(database=str(copy.database_path))},
        instance=dg.DagsterInstance.ephemeral(),
    )
    reused = {
        e.asset_key.to_user_string(): e.event_specific_data.materialization.metadata["reused"].value
        for e in result.get_asset_materialization_events()
    }
    assert reused == {"corpus": True, "rating_intervals": False}


def _produced_by(store) -> dict[str, str]:
    """Table → the asset that wrote it (from the build manifest)."""
    from saber_store.database import MANIFEST

    manifest = store.read_table(MANIFEST)
    out = {}
    for asset, metadata in manifest.select("asset_key", "metadata").rows():
        for table in __import__("json").loads(metadata)["tables"]:
            out[table] = asset
    return out


@pytest.mark.e2e
def test_each_asset_declares_exactly_the_assets_whose_tables_it_reads(tmp_path, monkeypatch):
    """The table wiring, derived from the code as it runs: every table (or recorded figures) an
    asset reads belongs to one of its ``deps``, and every dep is read — so a reuse decision
    (which looks at the deps' data versions only) never misses an input."""
    from collections import defaultdict

    from saber_store.database import DuckDBStore

    reads: dict[str, set[str]] = defaultdict(set)
    read_table, figures_of = DuckDBStore.read_table, DuckDBStore.figures_of
    versions_of = DuckDBStore.versions_of

    def running() -> str:
        return dg.AssetExecutionContext.get().asset_key.to_user_string()

    def recorded_table(self, name, *args, **kwargs):
        reads[running()].add(("table", name))
        return read_table(self, name, *args, **kwargs)

    def recorded_figures(self, asset):
        reads[running()].add(("asset", asset))
        return figures_of(self, asset)

    def recorded_versions(self, assets):
        reads[running()].update(("asset", a) for a in assets)
        return versions_of(self, assets)

    from saber_assets.discovery import per_query_pools

    stored_matrix = per_query_pools.stored_matrix

    def recorded_matrix(plan, name):  # a matrix file is named after the asset that wrote it
        reads[running()].add(("asset", name))
        return stored_matrix(plan, name)

    monkeypatch.setattr(per_query_pools, "stored_matrix", recorded_matrix)
    monkeypatch.setattr(DuckDBStore, "read_table", recorded_table)
    monkeypatch.setattr(DuckDBStore, "figures_of", recorded_figures)
    monkeypatch.setattr(DuckDBStore, "versions_of", recorded_versions)
    # every optional reader on: the pointwise grades and triage (the rounds read the grades),
    # style control (bt_ratings reads the texts the judge saw)
    build = load_build_config(
        "tiny",
        home=str(tmp_path),
        recipe_queries=2,
        style_control=True,
        pointwise_judge="st:minilm",
        triage="calibrated",
    )
    defs = build_definitions(build)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("retrievers", ["bm25"])  # every asset, one retriever
    defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=instance, partition_key="bm25"
    )
    monkeypatch.undo()
    store = DuckDBStore(database=str(build.database_path))
    # a partition's tables name it (retriever_runs[bm25]): they belong to its asset
    producer = {t: a.split("[")[0] for t, a in _produced_by(store).items()}
    graph = defs.resolve_asset_graph()
    mismatches = {}
    for key in graph.get_all_asset_keys():
        asset = key.to_user_string()
        used = {producer.get(n) if kind == "table" else n for kind, n in reads[asset]}
        used -= {None, asset}  # tables no asset writes (the LLM call cache), its own tables
        used &= {k.to_user_string() for k in graph.get_all_asset_keys()}  # its own matrices
        deps = {p.to_user_string() for p in graph.get(key).parent_keys}
        if used != deps:
            mismatches[asset] = {"read, not a dep": used - deps, "dep, not read": deps - used}
    assert not mismatches, "\n".join(f"{a}: {m}" for a, m in sorted(mismatches.items()))


def test_a_parse_upset_by_another_thread_is_repeated(monkeypatch):
    """CPython 3.11's spurious ``SystemError`` of ast construction under threads (gh-106905)
    is retried; a persistent one still raises."""
    import ast

    from saber_lineage import code_version as cv

    real, failures = ast.parse, [1]

    def flaky(source, filename):
        if failures:
            failures.pop()
            raise SystemError("AST constructor recursion depth mismatch (before=1, after=2)")
        return real(source, filename)

    monkeypatch.setattr(cv.ast, "parse", flaky)
    tree = cv._parsed("import saber_core.rating  # flaky\n", "flaky.py")
    assert isinstance(tree.body[0], ast.Import) and not failures

    def broken(source, filename):
        raise SystemError("AST constructor recursion depth mismatch")

    monkeypatch.setattr(cv.ast, "parse", broken)
    with pytest.raises(SystemError):
        cv._parsed("import saber_core  # broken\n", "broken.py")


def test_the_import_scan_finds_every_import_a_full_walk_finds():
    """Imports are read from statement blocks only (no expression is walked): on every project
    file and on imports nested in functions, classes, branches, handlers, loops and ``match``,
    they are exactly the ``Import``/``ImportFrom`` nodes of a full ``ast.walk``."""
    import ast

    from saber_lineage.code_version import _import_statements

    nested = (
        "def f():\n    import a\n    class C:\n        from b import c\n"
        "if x:\n    import d\nelse:\n    import e\n"
        "try:\n    import g\nexcept ImportError:\n    import h\nelse:\n    import i\n"
        "finally:\n    import j\n"
        "for k in y:\n    import k\nwhile z:\n    import l\nwith m:\n    import n\n"
        "match v:\n    case 1:\n        import o\n"
        "async def p():\n    async with q:\n        import r\n"
    )
    sources = [nested] + [
        f.read_text() for pkg in PACKAGES for f in sorted((PROJECT_ROOT / pkg).rglob("*.py"))
    ]
    for source in sources:
        tree = ast.parse(source)
        walked = [ast.dump(n) for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
        assert sorted(ast.dump(n) for n in _import_statements(tree.body)) == sorted(walked)
    assert len(list(_import_statements(ast.parse(nested).body))) == 13  # a c d e g h i j k l n o r


def test_the_step_forkserver_is_prepared_before_torch_loads():
    """The executor's forkserver imports ``forkserver_setup`` first: passive OpenMP waiting set
    before any module loads torch (a user's own setting kept), the sources parsed once, and no
    heavy library imported by it."""
    from saber_assets.definitions import PRELOAD

    assert PRELOAD[0] == "saber_assets.forkserver_setup" and "sentence_transformers" in PRELOAD
    # the forkserver skips a module it cannot import without a word: each one must exist
    for module in PRELOAD:
        importlib.import_module(module)
    code = (
        "import os, sys; import saber_assets.forkserver_setup as s; "
        "from saber_lineage.code_version import _imports_of; "
        "print(os.environ['OMP_WAIT_POLICY'], s.PARSED_FILES, _imports_of.cache_info().currsize, "
        "'torch' in sys.modules, 'dagster' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    policy, files, cached, torch, dagster = out.stdout.split()
    assert policy == "PASSIVE" and int(files) > 100 and int(cached) == int(files)
    assert torch == dagster == "False"
    env["OMP_WAIT_POLICY"] = "ACTIVE"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.split()[0] == "ACTIVE"
