"""The leaderboard of one benchmark: every run summary found under its eval folder.

Columns (CSV and Markdown): ``retriever`` (display name), ``setting``, ``ndcg@10``, one column
per domain (mean nDCG@10 of its queries), ``median_latency_s``, ``n_queries``. The DuckDB table
``leaderboard`` (``leaderboard.duckdb`` in the same folder) adds ``spec, kind, release_date,
mean_latency_s, benchmark_hash``. Rows: settings in canonical order, then nDCG@10 descending.
Display name, kind and release date come from the registry at refresh time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl

from saber_eval.benchmark import SETTINGS
from saber_eval.registry import Registry
from saber_eval.runner import METRIC

TABLE = "leaderboard"


def summary_files(folder: Path) -> list[Path]:
    """Every run summary (``runs/<slug>/<setting>.json``) under an eval folder, sorted."""
    return sorted(p for p in (Path(folder) / "runs").glob("*/*.json") if p.stem in SETTINGS)


def load_summaries(folder: Path) -> list[dict]:
    """The run summaries of an eval folder."""
    return [json.loads(p.read_text()) for p in summary_files(folder)]


def domains_of(summaries: list[dict]) -> list[str]:
    """Every domain named in any summary, sorted."""
    return sorted({d for s in summaries for d in s["per_domain"]})


def public_columns(frame: pl.DataFrame) -> list[str]:
    """``retriever, setting, ndcg@10, <domains…>, median_latency_s, n_queries``."""
    fixed = {"retriever", "setting", METRIC, "median_latency_s", "n_queries"}
    extra = {"spec", "kind", "release_date", "mean_latency_s", "benchmark_hash"}
    domains = [c for c in frame.columns if c not in fixed | extra]
    return ["retriever", "setting", METRIC, *domains, "median_latency_s", "n_queries"]


def leaderboard_frame(summaries: list[dict], registry: Registry) -> pl.DataFrame:
    """One row per (retriever, setting), public columns first, then the extra ones."""
    domains = domains_of(summaries)
    rows = []
    for s in summaries:
        entry = registry.get(s["spec"])
        rows.append(
            {
                "retriever": entry.display_name,
                "setting": s["setting"],
                METRIC: float(s[METRIC]),
                **{d: s["per_domain"].get(d) for d in domains},
                "median_latency_s": float(s["median_latency_s"]),
                "n_queries": int(s["n_queries"]),
                "spec": s["spec"],
                "kind": entry.kind,
                "release_date": entry.release_date,
                "mean_latency_s": float(s.get("mean_latency_s", s["median_latency_s"])),
                "benchmark_hash": s["benchmark_hash"],
            }
        )
    schema = {
        "retriever": pl.String,
        "setting": pl.String,
        METRIC: pl.Float64,
        **dict.fromkeys(domains, pl.Float64),
        "median_latency_s": pl.Float64,
        "n_queries": pl.Int64,
        "spec": pl.String,
        "kind": pl.String,
        "release_date": pl.Date,
        "mean_latency_s": pl.Float64,
        "benchmark_hash": pl.String,
    }
    frame = pl.DataFrame(rows, schema=schema)
    order = {s: i for i, s in enumerate(SETTINGS)}
    return (
        frame.with_columns(pl.col("setting").replace_strict(order, default=99).alias("_order"))
        .sort(["_order", METRIC, "spec"], descending=[False, True, False])
        .drop("_order")
    )


def to_markdown(frame: pl.DataFrame) -> str:
    """The public columns as a Markdown table (nDCG 3 decimals, latency 4 significant)."""
    columns = public_columns(frame)

    def cell(column: str, value: object) -> str:
        if value is None:
            return "–"
        if column == "median_latency_s":
            return f"{value:.4g}"
        if isinstance(value, float):
            return f"{value:.3f}"
        return str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in frame.select(columns).iter_rows(named=True):
        lines.append("| " + " | ".join(cell(c, row[c]) for c in columns) + " |")
    return "\n".join(lines) + "\n"


@dataclass
class Leaderboard:
    """The leaderboard frame and the files and plots written for it."""

    frame: pl.DataFrame
    files: dict[str, Path] = field(default_factory=dict)
    plots: dict[str, Path] = field(default_factory=dict)


def write_leaderboard(frame: pl.DataFrame, folder: Path) -> dict[str, Path]:
    """``leaderboard.csv``, ``leaderboard.md`` and the DuckDB table in ``leaderboard.duckdb``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    csv, md, db = (
        folder / "leaderboard.csv",
        folder / "leaderboard.md",
        folder / "leaderboard.duckdb",
    )
    frame.select(public_columns(frame)).write_csv(csv)
    md.write_text(to_markdown(frame))
    con = duckdb.connect(str(db))
    try:
        con.register("_board", frame.to_arrow())
        con.execute(f"CREATE OR REPLACE TABLE {TABLE} AS SELECT * FROM _board")
    finally:
        con.close()
    return {"csv": csv, "markdown": md, "duckdb": db}


def refresh_leaderboard(folder: Path, registry: Registry, plots: bool = True) -> Leaderboard:
    """Rebuild the leaderboard files (and plots) of an eval folder from its run summaries."""
    from saber_eval.plots import write_plots

    frame = leaderboard_frame(load_summaries(folder), registry)
    board = Leaderboard(frame=frame, files=write_leaderboard(frame, folder))
    if plots and frame.height:
        board.plots = write_plots(frame, Path(folder))
    return board
