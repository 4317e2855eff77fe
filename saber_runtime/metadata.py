"""Asset metadata and check results: table previews, inlined plots, readable checks."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl


def metadata_value(value: Any) -> Any:
    """Dicts and lists as JSON metadata; anything else as is."""
    if isinstance(value, dict | list):
        return dg.MetadataValue.json(value)
    return value


def markdown_preview(frame: pl.DataFrame, rows: int = 5, width: int = 60) -> str:
    """The first rows of a frame as a Markdown table (long cells shortened)."""
    head = frame.head(rows)
    columns = [c for c in head.columns if not c.startswith("_")]

    def cell(value: Any) -> str:
        text = str(value).replace("|", "\\|").replace("\n", " ")
        return text if len(text) <= width else text[: width - 1] + "…"

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in head.select(columns).rows()]
    return "\n".join(lines)


def png_markdown(path: Path) -> str:
    """A PNG inlined as a Markdown image (the Dagster UI renders it in the metadata panel)."""
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return f"![{Path(path).stem}](data:image/png;base64,{data})"


def check(name: str, passed: bool, description: str, **metadata: Any) -> dg.AssetCheckResult:
    """An asset check result with a readable description and metadata."""
    return dg.AssetCheckResult(
        check_name=name,
        passed=bool(passed),
        description=description,
        metadata={k: metadata_value(v) for k, v in metadata.items()},
    )
