"""Stage: the build report (Markdown + plots) that states what made the labels."""

from pathlib import Path

import dagster as dg
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import polars as pl

from saber_assets.runtime import StageOutput, materialize_stage
from saber_resources.config import BuildConfig
from saber_resources.judge import PairwiseJudge
from saber_resources.storage import DuckDBStore

REPORT_UPSTREAM = ["benchmark_export", "corpus", "candidate_pools", "judgments", "bt_ratings"]
GROUP_COLOURS = {"topic": "tab:blue", "summary": "tab:orange", "both": "tab:green"}


def _ratings_plot(ratings: pl.DataFrame, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for group, colour in GROUP_COLOURS.items():
        values = ratings.filter(pl.col("group") == group)["rating"].to_numpy()
        ax.hist(
            values, bins=20, range=(0, 5), alpha=0.6, label=f"{group} ({len(values)})", color=colour
        )
    ax.set_xlabel("Bradley–Terry rating (0–5)")
    ax.set_ylabel("candidates")
    ax.set_title("Ratings by pool group")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _signals_plot(pools: pl.DataFrame, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(5, 4))
    for group, colour in GROUP_COLOURS.items():
        part = pools.filter(pl.col("group") == group)
        ax.scatter(part["bma"], part["jaccard"], s=8, alpha=0.6, label=group, color=colour)
    ax.set_xlabel("topic BMA-Lin")
    ax.set_ylabel("summary Jaccard")
    ax.set_title("Candidate pools: the two relevance signals")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


@dg.asset(group_name="export", deps=REPORT_UPSTREAM, kinds={"markdown"})
def build_report(
    context: dg.AssetExecutionContext,
    build: BuildConfig,
    store: DuckDBStore,
    judge: PairwiseJudge,
) -> dg.MaterializeResult:
    """A Markdown report of the build (inputs, pools, tournament, judge) with plots."""

    def compute() -> StageOutput:
        out = build.export_dir
        out.mkdir(parents=True, exist_ok=True)
        corpus = store.read_table("corpus")
        quarantine = store.read_table("corpus_quarantine")
        pools = store.read_table("candidate_pools")
        outcomes = store.read_table("pool_outcomes")
        judgments = store.read_table("judgments")
        ratings = store.read_table("bt_ratings").join(
            pools.select("query_id", "doc_id", "group"), on=["query_id", "doc_id"]
        )
        provenance = judge.provenance()
        status = dict(outcomes.group_by("status").len().rows())
        by_group = ratings.group_by("group").agg(pl.col("rating").mean()).sort("group")
        items = [
            ("inputs", "corpus", build.corpus),
            ("inputs", "ontology", build.ontology),
            ("inputs", "corpus rows", str(corpus.height)),
            ("inputs", "quarantined rows", str(quarantine.height)),
            ("pools", "queries", str(outcomes.height)),
            ("pools", "query status", ", ".join(f"{k}: {v}" for k, v in sorted(status.items()))),
            ("pools", "pool size", f"{build.n_topic_only}/{build.n_summary_only}/{build.n_both}"),
            ("pools", "relaxed candidates", str(int(pools["relaxed"].sum()))),
            ("tournament", "rounds", str(build.rounds)),
            ("tournament", "judgments", str(judgments.height)),
            ("tournament", "dropped", str(judgments["outcome"].null_count())),
            *[("ratings", f"mean rating ({g})", f"{m:.3f}") for g, m in by_group.rows()],
            *[("judge", k, v) for k, v in provenance.items()],
        ]
        warning = (
            f"Labels were made by the judge `{provenance['judge']}` ({provenance['model']}). "
            "A retriever that shares the judge's model is favoured by these labels: do not "
            "rank such a retriever on this build."
        )
        plots = {
            "ratings_by_group": _ratings_plot(ratings, out / "ratings_by_group.png"),
            "pool_signals": _signals_plot(pools, out / "pool_signals.png"),
        }
        lines = ["# SABER build report", "", f"Profile: `{build.profile}`", "", f"> {warning}"]
        section = None
        for sec, item, value in items:
            if sec != section:
                lines += ["", f"## {sec.capitalize()}", "", "| item | value |", "|---|---|"]
                section = sec
            lines.append(f"| {item} | {value} |")
        lines += ["", *[f"![{k}]({p.name})" for k, p in plots.items()], ""]
        report = out / "report.md"
        report.write_text("\n".join(lines))
        table = pl.DataFrame(items, schema=["section", "item", "value"], orient="row")
        return StageOutput(
            {"build_report": table},
            figures={"report_path": str(report), "judge_warning": warning},
            files=[report],
            plots=plots,
        )

    return materialize_stage(
        context,
        store,
        settings={"out": str(build.export_dir), **judge.provenance()},
        upstream=REPORT_UPSTREAM,
        compute=compute,
    )
