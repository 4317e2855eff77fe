"""The presets' one table (``CHOICES``), its vocabulary and the checks of a resolved
construction, against values written out by hand from the method text."""

from __future__ import annotations

import pytest

from saber_core.construction import METHODS, STEPS, choices, preset, resolve


def test_each_preset_is_one_column_of_the_table():
    paper, platform = preset("sabermath"), preset("platform")
    assert METHODS == ("sabermath", "platform")
    assert (paper.thresholds, paper.targets, paper.pairing, paper.bt) == (
        "global_percentile", "eligible_rows", "published_swiss", "sklearn_lbfgs")  # fmt: skip
    assert (platform.thresholds, platform.targets, platform.pairing, platform.bt) == (
        "quantile", "sampled_queries", "swiss", "exact")  # fmt: skip
    assert (paper.engine, platform.engine) == ("all_pairs", "per_query")
    assert {getattr(paper, s) for s in STEPS} != {getattr(platform, s) for s in STEPS}


def test_options_no_preset_picks_are_choices_too():
    assert choices("thresholds") == ("global_percentile", "quantile", "absolute")
    assert choices("pairing") == ("published_swiss", "swiss", "information", "adaptive")
    assert choices("bt") == ("sklearn_lbfgs", "exact")
    absolute = resolve("platform", thresholds="absolute", pairing="adaptive")
    assert (absolute.engine, absolute.pairing) == ("per_query", "adaptive")


def test_unknown_method_and_option_are_named():
    with pytest.raises(ValueError, match=r"method must be one of \('sabermath', 'platform'\)"):
        preset("paper")
    with pytest.raises(ValueError, match="pairing='published'; choose one of"):
        resolve("sabermath", pairing="published")


def test_global_thresholds_go_with_every_row_and_only_with_it():
    with pytest.raises(ValueError, match="thresholds='global_percentile' with targets="):
        resolve("platform", thresholds="global_percentile")
    with pytest.raises(ValueError, match="thresholds='absolute' with targets='eligible_rows'"):
        resolve("sabermath", thresholds="absolute")


def test_a_fix_of_the_published_pairing_needs_that_pairing():
    assert resolve("sabermath", fixes=["sit_outs"]).has_fix("sit_outs")
    with pytest.raises(ValueError, match="needs pairing='published_swiss', not 'swiss'"):
        resolve("sabermath", fixes=["sit_outs"], pairing="swiss")
