"""``saber build --reference-home DIR``: the agreement runs after a successful build only."""

from pathlib import Path

import pytest

import saber_cli.reference
import saber_cli.supervise
from saber_cli.main import main


@pytest.mark.parametrize("status", [0, 1])
def test_the_reference_agreement_follows_a_successful_build(monkeypatch, status):
    calls = []
    monkeypatch.setattr(saber_cli.supervise, "supervise_build", lambda profile, debug: status)
    monkeypatch.setattr(
        saber_cli.reference,
        "agree_with_reference",
        lambda profile, ref: calls.append((profile, ref)) or 7,
    )
    code = main(["build", "--profile", "tiny", "--reference-home", "/tmp/full"])
    assert calls == ([("tiny", Path("/tmp/full"))] if status == 0 else [])
    assert code == (7 if status == 0 else status)
