"""The published constants and fix parsing."""

from __future__ import annotations

import pytest

from saber_core.published import (
    DOMAIN_MAP,
    DOMAIN_QUOTAS,
    FIXES,
    PUBLISHED_BMA_THRESHOLD,
    PUBLISHED_JACCARD_THRESHOLD,
    parse_fixes,
)


def test_fixes_parse_from_names_or_a_comma_separated_string():
    assert parse_fixes("bt_exact, sit_outs,,bt_exact") == ("sit_outs", "bt_exact")
    assert parse_fixes(["presentation", "ancestor_check"]) == ("ancestor_check", "presentation")
    assert parse_fixes(",".join(FIXES)) == FIXES
    assert len(FIXES) == 6


def test_an_unknown_fix_is_rejected_listing_the_known_ones():
    with pytest.raises(ValueError, match=r"\['bt_exakt'\].*'ancestor_check'.*'bt_exact'"):
        parse_fixes(("bt_exakt",))


def test_the_published_constants():
    assert sum(quota for _, quota in DOMAIN_QUOTAS) == 1000
    assert sum(quota for key, quota in DOMAIN_QUOTAS if len(key) > 1) == 156
    assert dict(DOMAIN_MAP)["CalculusandAnalysis"] == "Calculus and Analysis"
    assert len(DOMAIN_MAP) == 7
    assert PUBLISHED_BMA_THRESHOLD == 0.8579101562504547
    assert PUBLISHED_JACCARD_THRESHOLD == 0.21057128906295475
