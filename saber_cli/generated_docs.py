"""The generated documents: ``docs/configuration.md`` (from the config schema), the asset maps
of the README (platform) and of ``docs/sabermath.md`` (from the ``Definitions``) and the README's
label-budget table (from the study's ``docs/budget-study/budget.json``). ``saber docs`` rewrites
them; a test keeps them equal."""

from __future__ import annotations

import inspect
import json
import re
import typing
from pathlib import Path

import pydantic

from saber_cli.catalog import asset_map, markers
from saber_config.loading import LEGACY, LEGACY_FLAT, RENAMED, SECTION_PREFIX
from saber_config.schema import SECTIONS, BuildConfig, Registered
from saber_core.construction import METHODS

ROOT = Path(__file__).resolve().parents[1]
CONFIGURATION = ROOT / "docs" / "configuration.md"
README = ROOT / "README.md"
SABERMATH = ROOT / "docs" / "sabermath.md"
INTRO = """# Configuration

Generated from the config schema (`saber_config/schema.py`) by `saber docs`; do not
edit by hand. A build's settings come from a profile (`profiles/<name>.yaml`, chosen by
`SABER_PROFILE`; nested by section or flat), then `SABER_<NAME>` environment variables, then
explicit overrides. Every setting has one home below. An empty value (`""`, `null`) means *the
preset of `method`*; the resolved plan (`saber_config/plan.py`) decides it, and two
given settings that contradict each other stop the build with both names and where each came
from. Lists and mappings take JSON in the environment (`SABER_DOMAIN_QUOTAS='{"Algebra": 4}'`).
"""


def _comments(cls: type) -> dict[str, str]:
    """Trailing ``# comments`` of a class's field lines."""
    out = {}
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return out
    for line in lines:
        match = re.match(r"\s+(\w+):[^#]*#\s*(.+)$", line)
        if match:
            out[match.group(1)] = match.group(2).strip()
    return out


def _type(field: pydantic.fields.FieldInfo) -> str:
    for check in field.metadata:  # a name of a registry table: its names today
        if isinstance(getattr(check, "func", None), Registered):
            return f"one of {check.func.names()}"
    annotation = field.annotation
    text = getattr(annotation, "__name__", None) if not typing.get_args(annotation) else None
    text = text or str(annotation).replace("typing.", "")
    text = text.replace("NoneType", "None").replace("Literal", "one of ")
    return text.replace(" | ", " or ")


def _default(field: pydantic.fields.FieldInfo) -> str:
    value = field.get_default(call_default_factory=True)
    return "`" + (repr(value) if value != "" else '""') + "`"


def _flat(section: str | None, field: str) -> str:
    if section is None:
        return field
    return RENAMED.get((section, field), SECTION_PREFIX.get(section, "") + field)


def _rows(section: str | None, cls: type) -> list[str]:
    comments = _comments(cls)
    rows = []
    for name, field in cls.model_fields.items():
        if section is None and (name in SECTIONS or name == "explicit"):
            continue
        doc = field.description or comments.get(name, "")
        flat = _flat(section, name).upper()
        dotted = f"{section}.{name}" if section else name
        rows.append(
            f"| `{dotted}` | `SABER_{flat}` | {_type(field)} | {_default(field)} "
            f"| {doc.replace('|', '/')} |"
        )
    return rows


def configuration_markdown() -> str:
    """The whole ``docs/configuration.md``."""
    parts = [INTRO, "## Top level\n", "| setting | variable | type | default | meaning |"]
    parts += ["|---|---|---|---|---|", *_rows(None, BuildConfig), ""]
    for section, cls in SECTIONS.items():
        doc = inspect.cleandoc(cls.__doc__ or "")
        parts += [f"## `{section}`\n", doc, "", "| setting | variable | type | default | meaning |"]
        parts += ["|---|---|---|---|---|", *_rows(section, cls), ""]
    parts += [
        "## Names of earlier releases\n",
        "Still accepted (in a profile, nested or flat, or as `SABER_<NAME>`); each is translated "
        "into the setting that now holds it, and contradicting that setting is an error.\n",
        "| earlier name | flat name | now |",
        "|---|---|---|",
    ]
    flat_of = {dotted: flat for flat, dotted in LEGACY_FLAT.items()}
    for dotted, legacy in LEGACY.items():
        flat = flat_of.get(dotted, "")
        parts.append(f"| `{dotted}` | {f'`{flat}`' if flat else ''} | `{legacy.target}` |")
    return "\n".join(parts) + "\n"


BUDGET = ROOT / "docs" / "budget-study" / "budget.json"


def readme_with_budget(readme: str) -> str:
    """``readme`` with the label-budget table regenerated from the study's ``budget.json``."""
    from saber_study.label_budget.report import readme_section, replace_section

    return replace_section(readme, readme_section(json.loads(BUDGET.read_text())))


def with_maps(text: str) -> str:
    """``text`` with every asset map between its markers regenerated."""
    for method in METHODS:
        start, end = markers(method)
        if start in text:
            head, rest = text.split(start, 1)
            tail = rest.split(end, 1)[1]
            text = f"{head}{start}\n{asset_map(method)}\n{end}{tail}"
    return text


def write_generated() -> list[Path]:
    """Rewrite the generated documents; returns the files that changed."""
    changed = []
    for path, text in (
        (CONFIGURATION, configuration_markdown()),
        (README, readme_with_budget(with_maps(README.read_text()))),
        (SABERMATH, with_maps(SABERMATH.read_text())),
    ):
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(path)
    return changed
