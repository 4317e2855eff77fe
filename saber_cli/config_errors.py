"""The build config of a ``saber`` subcommand, or one line naming what is wrong with it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from saber_config import BuildConfig


def load_config(command: str, profile: str | None, **overrides: Any) -> BuildConfig:
    """:func:`load_build_config`, exiting with ``saber <command>: <reason>`` (status 1) instead
    of a traceback when a setting is invalid: two settings that conflict (``PlanError``), a
    value of the wrong type (pydantic's ``ValidationError``), an unknown profile — each a
    ``ValueError`` whose message names the setting and where it was given."""
    from saber_config import load_build_config

    try:
        return load_build_config(profile, **overrides)
    except ValueError as exc:
        raise SystemExit(f"saber {command}: {exc}") from None
