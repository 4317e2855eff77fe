"""The leaderboard of one benchmark: every run summary found under its eval folder.

Columns (CSV): ``retriever`` (display name), ``setting``, ``ndcg@10`` (SABER: gain 2^rel − 1 on
the float ratings, ideal over all candidates) with ``ndcg@10_ci_low/high`` (paired bootstrap
95% interval over queries, :mod:`saber_eval.stability`), ``ndcg@10_trec`` (linear gain on the
exported integer qrels ``round_half_up(rating)``, as trec_eval/BEIR/MTEB compute it) with its
interval, ``ndcg@10_mteb`` (the score the ``mteb`` package itself reported for the run, ``saber
eval --via mteb``; empty otherwise), one column per domain (mean nDCG@10 of its queries),
``median_latency_s``, ``n_queries``, ``tied_top10_share`` (the share of a run's top-10
positions whose score is tied with another candidate's: how much of its ranking the tie rule
decides; empty for runs stored before it). Ties are broken by
:data:`saber_eval.runfile.TIE_RULE` (trec_eval's doc id order, never pool position); the
Markdown states the rule under the table and shows each nDCG as ``value [low, high]``. The
DuckDB table ``leaderboard`` (``leaderboard.duckdb`` in the same folder) adds ``spec, kind,
release_date, mean_latency_s, benchmark_hash``; its table ``rank_stability`` (also
``rank_stability.csv``/``.md``) holds each adjacent pair's interval overlap, order-flip share
and paired test (raw ``p_value``, Holm-adjusted ``p_holm`` over the pairs of its setting and
metric, ``significant`` = ``p_holm ≤ α``), and ``leaderboard.json`` the bootstrap settings
(seed, resamples), the tie rule, the registry hash and how often the #1 stays #1. Rows:
settings in canonical order, then nDCG@10 descending. Display name, kind and release date come
from the registry at refresh time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import duckdb
import polars as pl

from saber_eval.benchmark import SETTINGS
from saber_eval.plots import (
    confidence_plot,
    per_domain_plot,
    quality_latency_plot,
    release_date_plot,
)
from saber_eval.registry import Registry, parse_date
from saber_eval.runfile import TIE_RULE
from saber_eval.runner import METRIC, TREC_METRIC
from saber_eval.stability import ALPHA, METRICS, BootstrapSettings, board_confidence

TABLE = "leaderboard"
STABILITY_TABLE = "rank_stability"
MTEB_METRIC = f"{METRIC}_mteb"
NDCG_COLUMNS = [c for m in METRICS for c in (m, f"{m}_ci_low", f"{m}_ci_high")] + [MTEB_METRIC]
TIED = "tied_top10_share"


def summary_files(folder: Path) -> list[Path]:
    """Every run summary (``runs/<slug>/<setting>.json``) under an eval folder, sorted."""
    return sorted(p for p in (Path(folder) / "runs").glob("*/*.json") if p.stem in SETTINGS)


def load_summaries(folder: Path) -> list[dict]:
    """The run summaries of an eval folder."""
    return [json.loads(p.read_text()) for p in summary_files(folder)]


def mteb_result_files(folder: Path) -> list[Path]:
    """Every MTEB-path result (``mteb/<slug>/<setting>.json``) under an eval folder, sorted."""
    return sorted(p for p in (Path(folder) / "mteb").glob("*/*.json") if p.stem in SETTINGS)


def mteb_results(folder: Path) -> list[dict]:
    """The MTEB-path results of an eval folder."""
    return [json.loads(p.read_text()) for p in mteb_result_files(folder)]


def domains_of(summaries: list[dict]) -> list[str]:
    """Every domain named in any summary, sorted."""
    return sorted({d for s in summaries for d in s["per_domain"]})


def domain_columns(frame: pl.DataFrame) -> list[str]:
    """The per-domain nDCG@10 columns of a leaderboard frame, in frame order."""
    fixed = {"retriever", "setting", *NDCG_COLUMNS, "median_latency_s", "n_queries", TIED}
    extra = {
        "spec",
        "kind",
        "release_date",
        "mean_latency_s",
        "batch_size",
        "prepare_s",
        "benchmark_hash",
    }
    return [c for c in frame.columns if c not in fixed | extra]


def public_columns(frame: pl.DataFrame) -> list[str]:
    """``retriever, setting, ndcg@10 (+ interval), ndcg@10_trec (+ interval), ndcg@10_mteb,
    <domains…>, median_latency_s, n_queries, tied_top10_share``."""
    return [
        "retriever",
        "setting",
        *NDCG_COLUMNS,
        *domain_columns(frame),
        "median_latency_s",
        "n_queries",
        TIED,
    ]


def release_of(summary: dict) -> date | None:
    """The release date an engine recorded with its run (``mteb``: the zoo's metadata)."""
    value = (summary.get("notes") or {}).get("release_date")
    try:
        return parse_date(str(value)[:10]) if value else None
    except ValueError:
        return None


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
                TREC_METRIC: s.get(TREC_METRIC),
                **{d: s["per_domain"].get(d) for d in domains},
                "median_latency_s": float(s["median_latency_s"]),
                "n_queries": int(s["n_queries"]),
                TIED: s.get(TIED),
                "spec": s["spec"],
                "kind": entry.kind,
                "release_date": entry.release_date or release_of(s),
                "mean_latency_s": float(s.get("mean_latency_s", s["median_latency_s"])),
                "batch_size": s.get("batch_size"),
                "prepare_s": s.get("prepare_s"),
                "benchmark_hash": s["benchmark_hash"],
            }
        )
    schema = {
        "retriever": pl.String,
        "setting": pl.String,
        METRIC: pl.Float64,
        TREC_METRIC: pl.Float64,
        **dict.fromkeys(domains, pl.Float64),
        "median_latency_s": pl.Float64,
        "n_queries": pl.Int64,
        TIED: pl.Float64,
        "spec": pl.String,
        "kind": pl.String,
        "release_date": pl.Date,
        "mean_latency_s": pl.Float64,
        "batch_size": pl.Int64,
        "prepare_s": pl.Float64,
        "benchmark_hash": pl.String,
    }
    frame = pl.DataFrame(rows, schema=schema)
    order = {s: i for i, s in enumerate(SETTINGS)}
    return (
        frame.with_columns(pl.col("setting").replace_strict(order, default=99).alias("_order"))
        .sort(["_order", METRIC, "spec"], descending=[False, True, False])
        .drop("_order")
    )


def _with_interval(row: dict, metric: str) -> str:
    value, low, high = row.get(metric), row.get(f"{metric}_ci_low"), row.get(f"{metric}_ci_high")
    if value is None:
        return "–"
    if low is None or high is None:
        return f"{value:.3f}"
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


def to_markdown(frame: pl.DataFrame) -> str:
    """The public columns as a Markdown table: each nDCG as ``value [95% CI]`` (3 decimals),
    latency 4 significant digits."""
    columns = public_columns(frame)
    interval_columns = {f"{m}_{end}" for m in METRICS for end in ("ci_low", "ci_high")}
    shown = [c for c in columns if c not in interval_columns]
    titles = {m: f"{m} [95% CI]" for m in METRICS}

    def cell(column: str, row: dict) -> str:
        value = row[column]
        if column in METRICS:
            return _with_interval(row, column)
        if value is None:
            return "–"
        if column == "median_latency_s":
            return f"{value:.4g}"
        if isinstance(value, float):
            return f"{value:.3f}"
        return str(value).replace("|", "\\|")

    lines = [
        "| " + " | ".join(titles.get(c, c) for c in shown) + " |",
        "|" + "---|" * len(shown),
    ]
    for row in frame.select(columns).iter_rows(named=True):
        lines.append("| " + " | ".join(cell(c, row) for c in shown) + " |")
    lines += [
        "",
        f"Ties in retriever scores: {TIE_RULE}; {TIED} = share of top-10 positions "
        "whose score equals another candidate's.",
    ]
    return "\n".join(lines) + "\n"


def stability_markdown(
    frame: pl.DataFrame, stability: pl.DataFrame, tops: list[dict], alpha: float
) -> str:
    """The rank-stability table (display names; raw and Holm-adjusted paired p, significance
    decided on the adjusted one) and the #1-stays-#1 lines."""
    names = dict(zip(frame["spec"], frame["retriever"], strict=True))
    lines = [
        "| setting | metric | rank | retriever | next | Δ | 95% CIs overlap | order flips "
        f"| paired p (raw) | Holm p | significant (Holm p ≤ {alpha:g}) | Δ 95% CI |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in stability.iter_rows(named=True):
        lines.append(
            f"| {r['setting']} | {r['metric']} | {r['rank']} | {names.get(r['spec'], r['spec'])} "
            f"| {names.get(r['next_spec'], r['next_spec'])} | {r['difference']:+.3f} "
            f"| {'yes' if r['ci_overlap'] else 'no'} | {100 * r['flip_share']:.1f}% "
            f"| {r['p_value']:.4g} | {r['p_holm']:.4g} | {'yes' if r['significant'] else 'no'} "
            f"| [{r['difference_ci_low']:+.3f}, {r['difference_ci_high']:+.3f}] |"
        )
    lines += [
        "",
        "Paired p: seeded sign-flip randomization test over queries. Holm p: Holm–Bonferroni "
        "adjusted over the adjacent pairs of the same setting and metric (n_tests in the CSV), "
        "so the chance of any false 'yes' in one ranking stays at most α.",
        "",
    ]
    for t in tops:
        lines.append(
            f"- {t['setting']} · {t['metric']}: #1 {names.get(t['top'], t['top'])} stays #1 in "
            f"{100 * t['top_stays']:.1f}% of resamples ({t['n_systems']} retrievers, "
            f"{t['n_queries']} queries)"
        )
    return "\n".join(lines) + "\n"


@dataclass
class Leaderboard:
    """The leaderboard frame and the files and plots written for it."""

    frame: pl.DataFrame
    stability: pl.DataFrame = field(default_factory=pl.DataFrame)
    top_stays: list[dict] = field(default_factory=list)
    bootstrap: dict = field(default_factory=dict)
    registry_hash: str = ""
    files: dict[str, Path] = field(default_factory=dict)
    plots: dict[str, Path] = field(default_factory=dict)


def write_leaderboard(board: Leaderboard, folder: Path) -> dict[str, Path]:
    """``leaderboard.csv``/``.md``/``.json``, ``rank_stability.csv``/``.md`` and the DuckDB
    tables ``leaderboard`` and ``rank_stability`` in ``leaderboard.duckdb``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "csv": folder / "leaderboard.csv",
        "markdown": folder / "leaderboard.md",
        "json": folder / "leaderboard.json",
        "stability_csv": folder / "rank_stability.csv",
        "stability_markdown": folder / "rank_stability.md",
        "duckdb": folder / "leaderboard.duckdb",
    }
    frame = board.frame
    frame.select(public_columns(frame)).write_csv(files["csv"])
    files["markdown"].write_text(to_markdown(frame))
    board.stability.write_csv(files["stability_csv"])
    files["stability_markdown"].write_text(
        stability_markdown(
            frame, board.stability, board.top_stays, board.bootstrap.get("alpha", ALPHA)
        )
    )
    summary = {
        "bootstrap": board.bootstrap,
        "tie_rule": TIE_RULE,
        "registry_hash": board.registry_hash,
        "top_stays": board.top_stays,
    }
    files["json"].write_text(json.dumps(summary, indent=2))
    con = duckdb.connect(str(files["duckdb"]))
    try:
        for table, data in ((TABLE, frame), (STABILITY_TABLE, board.stability)):
            con.register("_board", data.to_arrow())
            con.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM _board")
            con.unregister("_board")
    finally:
        con.close()
    return files


def with_confidence(frame: pl.DataFrame, folder: Path, bootstrap: BootstrapSettings) -> Leaderboard:
    """The frame with interval and MTEB columns (after ``ndcg@10`` and ``ndcg@10_trec``)."""
    runs = list(zip(frame["spec"], frame["setting"], strict=True))
    found = board_confidence(folder, runs, bootstrap)
    mteb = pl.DataFrame(
        [
            {"spec": m["spec"], "setting": m["setting"], MTEB_METRIC: m[MTEB_METRIC]}
            for m in mteb_results(folder)
        ],
        schema={"spec": pl.String, "setting": pl.String, MTEB_METRIC: pl.Float64},
    )
    joined = frame.join(found.intervals, on=["spec", "setting"], how="left").join(
        mteb, on=["spec", "setting"], how="left"
    )
    columns = public_columns(joined)
    joined = joined.select([*columns, *[c for c in joined.columns if c not in columns]])
    return Leaderboard(
        frame=joined,
        stability=found.stability,
        top_stays=found.top_stays,
        bootstrap=bootstrap.as_dict(),
    )


def refresh_leaderboard(
    folder: Path,
    registry: Registry,
    plots: bool = True,
    bootstrap: BootstrapSettings | None = None,
) -> Leaderboard:
    """Rebuild the leaderboard files (and plots) of an eval folder from its run summaries."""
    frame = leaderboard_frame(load_summaries(folder), registry)
    board = with_confidence(frame, Path(folder), bootstrap or BootstrapSettings())
    board.registry_hash = registry.hash
    board.files = write_leaderboard(board, folder)
    if plots and frame.height:
        board.plots = write_plots(board.frame, Path(folder))
    return board


def write_plots(frame: pl.DataFrame, folder: Path) -> dict[str, Path]:
    """Every plot of a leaderboard frame, written into ``folder``."""
    domains = domain_columns(frame)
    plots = {
        "quality_latency": quality_latency_plot(frame, folder / "quality_latency.png"),
        "per_domain": per_domain_plot(frame, domains, folder / "per_domain.png"),
    }
    if f"{METRIC}_ci_low" in frame.columns:
        plots["confidence"] = confidence_plot(frame, folder / "confidence.png")
    dated = release_date_plot(frame, folder / "release_date.png")
    if dated is not None:
        plots["release_date"] = dated
    elif (folder / "release_date.png").exists():
        (folder / "release_date.png").unlink()
    return plots
