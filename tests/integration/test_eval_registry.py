"""``saber eval --registry FILE`` merges registry files over ``retrievers.yaml`` (an entry of the
same spec replaced wholesale, later files winning); ``--registry-only FILE`` uses only the
given files. The hash covers every merged file; bad files are named."""

import hashlib
import json

import polars as pl
import pytest
import yaml
from test_eval_data import write_tiny_benchmark

from saber_eval.cli import eval_main
from saber_eval.registry import REGISTRY_PATH, load_registries, load_registry

EXTRA = """retrievers:
  st:minilm:
    display_name: MiniLM, as I name it
  random:
    display_name: Coin flips
    release_date: 2025-02
  st:my/new-model:
    display_name: New model
    kind: single-pass
    query_prefix: 'q: '
"""
LATER = """retrievers:
  random:
    display_name: Dice
"""


def digest(*contents: bytes) -> str:
    """sha256 of the files' bytes joined by NUL, first 16 hex (the documented hash)."""
    return hashlib.sha256(b"\0".join(contents)).hexdigest()[:16]


@pytest.fixture
def files(tmp_path):
    extra, later = tmp_path / "extra.yaml", tmp_path / "later.yaml"
    extra.write_text(EXTRA)
    later.write_text(LATER)
    return extra, later


def test_added_files_merge_over_the_default(files):
    extra, later = files
    default = yaml.safe_load(REGISTRY_PATH.read_text())["retrievers"]
    merged = load_registries([extra])
    assert set(merged.entries) == set(default) | {"st:my/new-model"}
    assert merged.get("bm25").display_name == default["bm25"]["display_name"]  # kept
    minilm = merged.get("st:minilm")  # replaced wholesale: the default's release date is gone
    assert default["st:minilm"]["release_date"] and minilm.release_date is None
    assert (minilm.display_name, minilm.notes) == ("MiniLM, as I name it", "")
    assert merged.get("random").release_date.isoformat() == "2025-02-01"
    assert merged.get("st:my/new-model").envelope_query("x") == "q: x"
    both = load_registries([extra, later])  # the later file wins
    assert both.get("random").display_name == "Dice" and both.get("random").release_date is None
    assert both.get("st:my/new-model").display_name == "New model"


def test_the_hash_covers_every_merged_file(files):
    extra, later = files
    base = REGISTRY_PATH.read_bytes()
    assert load_registries().hash == load_registry().hash == digest(base)
    assert load_registries([extra]).hash == digest(base, extra.read_bytes())
    assert load_registries([extra, later]).hash == digest(base, extra.read_bytes(), LATER.encode())
    assert load_registries([later, extra]).hash != load_registries([extra, later]).hash
    assert load_registries([extra], only=True).hash == digest(extra.read_bytes())
    extra.write_text(EXTRA.replace("Coin flips", "Coins"))
    assert load_registries([extra]).hash == digest(base, extra.read_bytes())


def test_only_uses_just_the_given_files(files):
    extra, _ = files
    only = load_registries([extra], only=True)
    assert set(only.entries) == {"st:minilm", "random", "st:my/new-model"}
    assert only.get("bm25").display_name == "bm25"  # no entry: the default one


def test_bad_files_are_named(tmp_path):
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("retrievers:\n  st:x:\n    display_name: X\n    colour: red\n")
    with pytest.raises(ValueError) as err:
        load_registries([unknown])
    assert str(err.value) == f"{unknown}: retriever 'st:x' has unknown field(s) ['colour']"
    broken = tmp_path / "broken.yaml"
    broken.write_text("retrievers:\n  st:x: [unclosed\n")
    with pytest.raises(ValueError, match=rf"^{broken}: not valid YAML \(") as err:
        load_registries([broken])
    assert "\n" not in str(err.value)
    with pytest.raises(FileNotFoundError, match=r"registry file\(s\) not found: .*absent.yaml"):
        load_registries([tmp_path / "absent.yaml"])
    with pytest.raises(ValueError, match="needs at least one file"):
        load_registries([], only=True)


def test_cli_registry_and_registry_only(files, tmp_path, capsys):
    extra, _ = files
    bench = write_tiny_benchmark(tmp_path / "tinybench")
    out = tmp_path / "eval"
    args = ["--benchmark", str(bench), "--out", str(out), "--no-mlflow", "--bootstrap", "50"]
    args += ["--retriever", "random", "--retriever", "bm25"]
    assert eval_main([*args, "--registry", str(extra)]) == 0
    (folder,) = out.iterdir()
    names = set(pl.read_csv(folder / "leaderboard.csv")["retriever"])
    assert names == {"Coin flips", "BM25 (bm25s, per query)"}
    expected = digest(REGISTRY_PATH.read_bytes(), extra.read_bytes())
    assert json.loads((folder / "leaderboard.json").read_text())["registry_hash"] == expected
    assert f"registry: {REGISTRY_PATH} + {extra} (hash {expected})" in capsys.readouterr().out
    assert eval_main([*args, "--registry-only", str(extra)]) == 0
    assert set(pl.read_csv(folder / "leaderboard.csv")["retriever"]) == {"Coin flips", "bm25"}
    assert f"registry: {extra} (hash {digest(extra.read_bytes())})" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        eval_main([*args, "--registry", str(extra), "--registry-only", str(extra)])
    assert "not allowed with argument" in capsys.readouterr().err
