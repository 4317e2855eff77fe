"""Triage of a round's pairs by pointwise grades (saber_core.validity.triage_round)."""

import numpy as np
import polars as pl
import pytest
from scipy.special import expit

from saber_config import PlanError, load_build_config
from saber_core.rating.comparisons import Comparisons
from saber_core.tournament.judgment_table import judge_pairs
from saber_core.validity.triage_round import (
    TRIAGE_JUDGE_KIND,
    TriageRule,
    calibration_slope,
    decided_verdicts,
    split_round,
    triage_budget,
)

# one query, 6 candidates on a 0–2 scale; three planned pairs and an empty slot
GRADES = np.array([[2.0, 0.1, 1.0, 1.8, 0.0, 1.6]])
PAIRS = np.array([[[0, 1], [2, 3], [4, 5], [-1, -1]]])


def test_band_rule_decides_only_relevant_against_irrelevant():
    split = split_round(PAIRS, GRADES, TriageRule("band", low=0.5, high=1.5), k=0.0)
    # (0, 1): 2.0 vs 0.1 → a wins; (4, 5): 0.0 vs 1.6 → b wins; (2, 3): 1.0 is uncertain
    assert split.decided[0].tolist() == [[0, 1], [-1, -1], [4, 5], [-1, -1]]
    assert split.judged[0].tolist() == [[-1, -1], [2, 3], [-1, -1], [-1, -1]]
    assert split.p_decided[0, [0, 2]].tolist() == [1.0, 0.0]
    assert np.isnan(split.p_decided[0, [1, 3]]).all()
    assert (split.n_decided, split.n_judged) == (2, 1)


def test_calibrated_rule_without_a_slope_sends_everything_to_the_judge():
    split = split_round(PAIRS, GRADES, TriageRule("calibrated", threshold=0.1), k=0.0)
    assert split.n_decided == 0
    np.testing.assert_array_equal(split.judged, PAIRS)


def test_calibrated_rule_decides_by_the_calibrated_probability():
    k = 2.0
    split = split_round(PAIRS, GRADES, TriageRule("calibrated", threshold=0.4), k=k)
    p = expit(k * np.array([2.0 - 0.1, 1.0 - 1.8, 0.0 - 1.6]))  # 0.978, 0.168, 0.039
    assert split.decided[0].tolist() == [[0, 1], [-1, -1], [4, 5], [-1, -1]]
    np.testing.assert_allclose(split.p_decided[0, [0, 2]], p[[0, 2]])


def test_calibration_slope_fits_the_judges_rows_and_is_zero_when_grades_predict_nothing():
    rng = np.random.default_rng(0)
    grades = rng.normal(size=(1, 40))
    a, b = np.arange(0, 40, 2), np.arange(1, 40, 2)
    agree = (grades[0, a] > grades[0, b]).astype(float)
    rows = Comparisons(np.zeros(20), a, b, agree, 1, 40)
    assert calibration_slope(rows, grades) > 5.0  # the judge follows the grades: steep
    rows = Comparisons(np.zeros(20), a, b, 1.0 - agree, 1, 40)
    assert calibration_slope(rows, grades) == 0.0


def test_decided_pairs_become_judgment_rows_answered_by_the_grades():
    split = split_round(PAIRS, GRADES, TriageRule("band"), k=0.0)
    texts = {d: d for d in ["q", *(f"d{i}" for i in range(6))]}
    docs = np.array([[f"d{i}" for i in range(6)]], dtype=object)
    table = judge_pairs(1, split.decided, ["q"], docs, texts, decided_verdicts(split, GRADES), 0)
    assert table.select("slot", "pos_a", "pos_b", "outcome", "winner").rows() == [
        (0, 0, 1, 1.0, "a"),
        (2, 4, 5, 0.0, "b"),
    ]
    assert table["raw"].to_list() == ["grades 2 vs 0.1", "grades 0 vs 1.6"]
    with pytest.raises(ValueError, match="1 pairs asked, 2 decided"):
        decided_verdicts(split, GRADES)(["q"], ["a"], ["b"])


def test_budget_counts_only_judged_pairs_as_calls():
    per_query = pl.DataFrame({"query_id": ["q1", "q2"], "pairs": [3, 2], "judge_calls": [6, 4]})
    judgments = pl.DataFrame(
        {
            "query_id": ["q1", "q1", "q1", "q2", "q2"],
            "judge_kind": [TRIAGE_JUDGE_KIND, "llm", TRIAGE_JUDGE_KIND, "llm", "llm"],
        }
    )
    out, totals = triage_budget(per_query, judgments, calls_per_pair=2)
    assert out["judge_calls"].to_list() == [2, 4]
    assert totals == {
        "n_decided_by_triage": 2,
        "n_judged": 3,
        "judge_calls_saved_by_triage": 4,
    }


def test_plan_refuses_triage_without_grades_or_with_a_bad_threshold(tmp_path):
    with pytest.raises(PlanError, match=r"tournament\.pointwise_judge"):
        load_build_config("tiny", home=str(tmp_path), triage="band").plan()
    with pytest.raises(PlanError, match="triage_threshold"):
        load_build_config(
            "tiny",
            home=str(tmp_path),
            pointwise_judge="bm25",
            triage="calibrated",
            triage_threshold=0.7,
        ).plan()
    with pytest.raises(ValueError, match="triage mode"):
        TriageRule("sometimes")
