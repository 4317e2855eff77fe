"""§12 options: fix parsing and validation, provenance, the published constants."""

from __future__ import annotations

import json

import pytest

from saber_core.sabermath.options import DOMAIN_MAP, FIXES, SabermathOptions, parse_fixes


def test_fixes_parse_from_names_or_a_comma_separated_string():
    assert parse_fixes("bt_exact, sit_outs,,bt_exact") == ("sit_outs", "bt_exact")
    options = SabermathOptions(fixes=["presentation", "ancestor_check"])
    assert options.fixes == ("ancestor_check", "presentation")
    assert options.ancestor_check and options.presentation
    assert not (options.sit_outs or options.bt_exact or options.root_self_similarity)
    assert not options.empty_idea_jaccard
    everything = SabermathOptions(fixes=",".join(FIXES))
    assert all(getattr(everything, name) for name in FIXES)
    assert len(FIXES) == 6


def test_an_unknown_fix_is_rejected_listing_the_known_ones():
    with pytest.raises(ValueError, match=r"\['bt_exakt'\].*'ancestor_check'.*'bt_exact'"):
        SabermathOptions(fixes=("bt_exakt",))
    with pytest.raises(ValueError, match="per_group_count"):
        SabermathOptions(per_group_count=0)


def test_provenance_is_json_ready_and_records_the_published_constants():
    published = SabermathOptions().as_provenance()
    assert json.loads(json.dumps(published)) == published
    assert published["published"] is True and published["fixes"] == []
    assert published["per_group_count"] == 50
    assert published["threshold_quantile"] == 0.99
    assert published["swiss_rounds"] == 20
    assert published["swiss_seed"] == 42 and published["final_sampler_seed"] == 0
    assert published["domain_quotas"][0] == [["Algebra"], 150]
    assert published["domain_map"]["CalculusandAnalysis"] == "Calculus and Analysis"
    assert len(DOMAIN_MAP) == 7
    fixed = SabermathOptions(fixes="bt_exact").as_provenance()
    assert fixed["published"] is False and fixed["fixes"] == ["bt_exact"]
