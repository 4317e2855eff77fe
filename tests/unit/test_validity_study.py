"""The simulation study: the judge model and reproducibility of ``saber study tournament``."""

from __future__ import annotations

import json

import numpy as np
from scipy.special import expit

from saber_core.validity.reliability import kendall_tau_b
from saber_study.cli import study_main
from saber_study.simulation import StudyConfig, run_designs, run_study, simulate_judge

SMALL = [
    "--queries", "3", "--players", "16", "--rounds", "4",
    "--noise-sweep", "1.0,0.5", "--cheap-noise", "0.5", "--thresholds", "0.3",
    "--triage-judge-noise", "0.5", "--split-half-repeats", "2",
    "--bootstrap-queries", "2", "--bootstrap-draws", "10", "--quiet",
]  # fmt: skip


def test_simulated_judge_model():
    judge = simulate_judge(4, 30, strength_sd=1.5, judge_noise=1.0, position_bias=0.3, seed=1)
    p = judge.perception
    np.testing.assert_allclose(p, -p.transpose(0, 2, 1))
    q, a, b = np.repeat(np.arange(4), 3), np.tile([0, 1, 2], 4), np.tile([5, 6, 7], 4)
    np.testing.assert_allclose(judge.p_first(q, a, b), expit(p[q, a, b]))
    np.testing.assert_array_equal(judge.hard(q, a, b), (p[q, a, b] > 0).astype(float))
    s = judge.strengths
    np.testing.assert_allclose(judge.expected(q, a, b), expit(s[q, a] - s[q, b] + 0.3))
    # same seed: same strengths whatever the noise (common random numbers); no noise = truth
    exact = simulate_judge(4, 30, strength_sd=1.5, judge_noise=0.0, seed=1)
    np.testing.assert_array_equal(exact.strengths, s)
    i, j = np.triu_indices(30, k=1)
    qq = np.repeat(np.arange(4), len(i))
    ii, jj = np.tile(i, 4), np.tile(j, 4)
    np.testing.assert_array_equal(exact.hard(qq, ii, jj), (s[qq, ii] > s[qq, jj]).astype(float))


def test_judge_noise_one_is_the_bradley_terry_model():
    judge = simulate_judge(40, 60, strength_sd=1.0, judge_noise=1.0, seed=2)
    i, j = np.triu_indices(60, k=1)
    q = np.repeat(np.arange(40), len(i))
    a, b = np.tile(i, 40), np.tile(j, 40)
    p = judge.expected(q, a, b)
    bins = np.digitize(p, [0.2, 0.4, 0.6, 0.8])
    hard = judge.hard(q, a, b)
    for k in range(5):  # empirical win rate matches σ(s_a − s_b) within each bin
        sel = bins == k
        assert abs(hard[sel].mean() - p[sel].mean()) < 0.02


def test_study_is_reproducible_per_seed(tmp_path, capsys):
    out1, out2, out3 = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    assert study_main([*SMALL, "--out", str(out1)]) == 0
    printed = capsys.readouterr().out
    assert "| strategy | outcomes |" in printed and "### Targets" in printed
    assert study_main([*SMALL, "--out", str(out2)]) == 0
    assert study_main([*SMALL, "--seed", "1", "--out", str(out3)]) == 0
    r1, r2, r3 = (json.loads(p.read_text()) for p in (out1, out2, out3))
    for r in (r1, r2, r3):
        r.pop("seconds")
    assert r1 == r2
    assert r1 != r3
    rows = {(r["design"], r["outcomes"]): r for r in r1["strategies"]["rows"]}
    assert rows[("round_robin", "hard")]["tau_rr_hard"]["mean"] == 1.0
    assert rows[("swiss", "hard")]["comparisons_per_query"] == 16 // 2 * 4
    assert [s["judge_noise"] for s in r1["triage_sweep"]] == [0.5, 1.0]
    triage = r1["triage"][0]
    assert 0.0 <= triage["round_robin"]["saved"] <= 1.0
    assert "swiss_in_loop" in triage


def test_study_rejects_impossible_sizes(capsys):
    assert study_main(["--players", "4", "--rounds", "4", "--quiet"]) == 2
    assert "rounds < players" in capsys.readouterr().err


def test_run_study_config_roundtrip():
    cfg = StudyConfig(
        n_queries=2, n_players=10, n_rounds=3, noise_sweep=(1.0,), cheap_noise=(0.5,),
        thresholds=(0.3,), triage_judge_noise=(), split_half_repeats=2, bootstrap_queries=1,
        bootstrap_draws=5,
    )  # fmt: skip
    res = run_study(cfg)
    assert res["config"]["n_players"] == 10
    assert res["reliability"]["bootstrap_queries"] == 1
    assert len(res["triage_sweep"]) == 1


def test_reference_designs():
    """Nearest-rival pairing on the true strengths plays by the tournament rules and pairs
    closer strengths than random pairing; the true strengths order themselves perfectly and the
    round robin's BT, fitted on noisy verdicts, does not."""
    cfg = StudyConfig(n_queries=12, n_players=30, n_rounds=6, seed=4)
    judge = simulate_judge(12, 30, strength_sd=1.5, judge_noise=1.0, seed=4)
    designs = run_designs(judge, cfg)
    oracle = designs["oracle"].rows
    q, a, b = oracle.q, oracle.a, oracle.b
    assert len(q) == 12 * 15 * 6
    keys = (q * 30 + a) * 30 + b
    assert len(np.unique(keys)) == len(keys) and (a < b).all()  # no rematch, id order
    for r in range(6):  # once per round
        block = slice(r * 180, (r + 1) * 180)
        seen = q[block] * 30
        assert len(np.unique(np.r_[seen + a[block], seen + b[block]])) == 360
    s = judge.strengths

    def gap(rows):
        return np.abs(s[rows.q, rows.a] - s[rows.q, rows.b]).mean()

    assert gap(designs["oracle"].rows) < 0.5 * gap(designs["random"].rows)
    truth = kendall_tau_b(designs["truth"].fits["exact"], s)
    assert truth.min() == 1.0
    assert kendall_tau_b(designs["round_robin"].fits["hard"], s).mean() < 0.99


def test_default_output_lands_under_saber_home_not_the_working_folder(tmp_path, monkeypatch):
    cwd, home = tmp_path / "cwd", tmp_path / "home"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("SABER_HOME", str(home))
    assert study_main(SMALL) == 0
    assert json.loads((home / "study" / "study_tournament.json").read_text())["config"]
    assert list(cwd.iterdir()) == []
