"""``saber judge probe`` on a finished build: the calls it makes (cached where the build made
them), the figures it writes against a count from its own calls table, and the study reading
the fit back (``saber study budget --judge-fit``)."""

import json

import dagster as dg
import numpy as np
import polars as pl
import pytest
import yaml
from fakes import CALLS, ScriptedBackend

from saber_cli.build import run_build
from saber_cli.judge_probe import probe_main
from saber_config import load_build_config
from saber_store.database import DuckDBStore
from saber_study.label_budget.judge_fit import JudgeFitError, judge_from_probe

PROFILE = {"corpus": "champ", "ontology": "champ", "judge": "llm", "seed": 0, "n_queries": 4,
           "n_topic_only": 3, "n_summary_only": 3, "n_both": 2, "rounds": 2,
           "topic_high": 0.8, "summary_high": 0.8, "judge_both_orders": True}  # fmt: skip


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """A tiny build judged by the scripted LLM judge, then probed (60 pairs, 2 repeats)."""
    root = tmp_path_factory.mktemp("probe")
    profile = root / "probe.yaml"
    profile.write_text(yaml.safe_dump(PROFILE))
    home = root / "home"
    build = load_build_config(str(profile), home=str(home))
    assert run_build(build, dg.DagsterInstance.ephemeral(), ScriptedBackend()).success
    CALLS.clear()
    out = root / "out"
    argv = ["--profile", str(profile), "--home", str(home), "--out", str(out), "--pairs", "60",
            "--bins", "3", "--bootstrap", "4", "--gap", "embedding"]  # fmt: skip
    assert probe_main(argv, backend=ScriptedBackend()) == 0
    result = json.loads((out / "judge-probe.json").read_text())
    calls = pl.read_parquet(out / "judge-probe-calls.parquet")
    return build, result, calls, dict(CALLS), out


def test_probe_asks_each_pair_in_both_orders_per_condition_and_repeat(probed):
    build, result, calls, paid, out = probed
    pairs = calls["pair"].n_unique()
    assert pairs == 60 and (out / "judge-probe.png").stat().st_size > 0
    # configured (greedy) and sampled, 2 repeats, both orders: 8 calls per pair
    assert calls.height == 8 * pairs
    per = calls.group_by("condition", "repeat", "pair").agg(pl.col("a_first").sum(), pl.len())
    assert (per["len"] == 2).all() and (per["a_first"] == 1).all()
    # the build's own greedy calls (repeat 0, seed 0) are cache hits; the rest is paid once
    assert result["calls"]["cached"] + result["calls"]["asked"] == calls.height
    assert result["calls"]["cached"] > 0 and paid["judge"] == result["calls"]["asked"]
    store = DuckDBStore(database=str(build.database_path))
    stored = store.query(f"SELECT count(*) AS n FROM llm_calls WHERE run_id = '{result['run_id']}'")
    assert stored["n"][0] == result["calls"]["asked"]


def test_probe_figures_match_a_count_from_the_calls(probed):
    _, result, calls, _, _ = probed
    for name, part in calls.group_by("condition"):
        figs = result["conditions"][name[0]]["figures"]
        # the first shown won, counted directly
        first = np.where(part["a_first"], part["a_wins"], 1 - part["a_wins"])
        assert figs["first_answer_share"]["k"] == int(np.nansum(first))
        assert figs["first_answer_share"]["n"] == int(np.isfinite(first).sum())
        # test–retest: the same pair and order in repeat 0 and 1 gave the same winner
        wide = part.pivot(on="repeat", index=["pair", "a_first"], values="a_wins")
        same = (wide["0"] == wide["1"]).sum()
        assert figs["test_retest_agreement"]["k"] == same
        lo, hi = figs["first_answer_share"]["ci95"]
        assert lo <= figs["first_answer_share"]["share"] <= hi


def test_scripted_judge_is_order_dependent_and_deterministic(probed):
    """The scripted judge answers from a hash of the prompt text: a repeat with another seed
    repeats the answer, a swapped order is another text."""
    _, result, _, _, _ = probed
    configured = result["conditions"]["configured"]["figures"]
    assert configured["test_retest_agreement"]["share"] == 1.0
    assert 0.2 < configured["order_swap_consistency"]["share"] < 0.8
    assert result["judge"]["judge_backend"] == "scripted"


def test_study_reads_the_fit(probed, tmp_path):
    _, result, _, _, out = probed
    path = out / "judge-probe.json"
    fit = result["conditions"]["configured"]["fit"]
    if fit["judge_model"] is None:  # no signal: only the upper end of the signal is finite
        with pytest.raises(JudgeFitError, match="not representable"):
            judge_from_probe(path)
        model, source = judge_from_probe(path, signal="upper")
        expected = fit["judge_model_upper_signal"]
    else:
        model, source = judge_from_probe(path)
        expected = fit["judge_model"]
    assert model.pair_noise == pytest.approx(expected["pair_noise"])
    assert model.bias_peak == pytest.approx(expected["bias_peak"])
    assert result["run_id"] in source and "configured" in source
    with pytest.raises(JudgeFitError, match="no condition 'nope'"):
        judge_from_probe(path, condition="nope")
    broken = tmp_path / "no-fit.json"
    no_fit = {**result, "conditions": {"configured": {"temperature": 0.0, "figures": {}}}}
    broken.write_text(json.dumps(no_fit))
    with pytest.raises(JudgeFitError, match="has no fit"):
        judge_from_probe(broken)


def test_probe_of_a_home_without_a_build_names_the_missing_tables(tmp_path, capsys):
    profile = tmp_path / "p.yaml"
    profile.write_text(yaml.safe_dump(PROFILE))
    argv = ["--profile", str(profile), "--home", str(tmp_path / "empty"), "--no-fit"]
    assert probe_main(argv, backend=ScriptedBackend()) == 2
    err = capsys.readouterr().err
    assert "no table candidate_pools, corpus" in err and "saber build" in err
