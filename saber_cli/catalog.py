"""The README's map of the asset graph, generated from the ``Definitions``: one row per asset
with its module, group, upstream assets and checks (``saber catalog`` prints it; a test keeps
the README's copy equal)."""

from __future__ import annotations

import dagster as dg

from saber_assets.definitions import build_definitions
from saber_config import load_build_config

START, END = "<!-- asset-map:start -->", "<!-- asset-map:end -->"


def _rows(defs: dg.Definitions) -> list[tuple[str, str, str, str, str]]:
    graph = defs.resolve_asset_graph()
    checks: dict[str, list[str]] = {}
    for key in graph.asset_check_keys:
        checks.setdefault(key.asset_key.to_user_string(), []).append(key.name)
    rows, rounds = [], []
    for assets_def in graph.assets_defs:
        for key, spec in assets_def.specs_by_key.items():
            name = key.to_user_string()
            module = assets_def.op.compute_fn.decorated_fn.__module__
            deps = [d.asset_key.to_user_string() for d in spec.deps]
            round_deps = [d for d in deps if d.startswith("tournament_round_")]
            if len(round_deps) > 1:  # the rounds of one tournament, named once
                others = [d for d in deps if d not in round_deps]
                deps = ["every tournament_round_NN", *others]
            deps = ", ".join(deps)
            row = (
                name,
                module,
                spec.group_name or "",
                deps,
                ", ".join(sorted(checks.get(name, []))),
            )
            (rounds if name.startswith("tournament_round_") else rows).append(row)
    if rounds:  # one row stands for every round
        first = rounds[0]
        rows.append(
            (
                "tournament_round_NN",
                first[1],
                first[2],
                "corpus, candidate_pools, pointwise_grades, every earlier round",
                first[4],
            )
        )
    order = ["inputs", "annotation", "discovery", "tournament", "validity", "export", "evaluation"]
    return sorted(rows, key=lambda r: (order.index(r[2]) if r[2] in order else 99, r[0]))


def asset_map(method: str = "platform") -> str:
    """The Markdown table of the default profile's graph under ``method`` (between the
    README's asset-map markers)."""
    defs = build_definitions(load_build_config("default", method=method))
    lines = ["| asset | module | group | upstream | checks |", "|---|---|---|---|---|"]
    lines += [f"| `{a}` | `{m}` | {g} | {u} | {c} |" for a, m, g, u, c in _rows(defs)]
    return "\n".join(lines)


def readme_section(readme: str, method: str = "platform") -> str:
    """The table currently between ``method``'s markers of ``readme``."""
    start, end = (START, END) if method == "platform" else markers(method)
    return readme.split(start, 1)[1].split(end, 1)[0].strip()


def markers(method: str) -> tuple[str, str]:
    """The README markers around ``method``'s table."""
    if method == "platform":
        return START, END
    return f"<!-- asset-map-{method}:start -->", f"<!-- asset-map-{method}:end -->"
