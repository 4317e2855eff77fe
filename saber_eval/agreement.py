"""``saber judge agree A B``: how far two label sources agree, on the pairs and on the
leaderboard (the figures: :mod:`saber_core.validity.agreement`; the sources:
:mod:`saber_eval.agreement_sources`).

**System level.** The evaluated retrievers of the build (every ``runs/<slug>/<setting>.trec``
under the eval folder of A's export, else B's, else ``runs_dir``) are scored under labels A and
under labels B with the runner's metric: per query, nDCG@10 of
:func:`saber_core.evaluation.metrics.ndcg_at_k` (gain 2^rel − 1, IDCG over the candidates; the
run's scores ranked with the runner's tie rule, :data:`saber_eval.runfile.TIE_RULE`), on the
candidates both sources label (the same candidates under both, so a difference is the labels',
not the pools'), averaged over the queries both sources label. A candidate the run does not
rank is ranked last. The two leaderboards are compared by Kendall τ-b, τ_AP (A against B's
order) and the pairs adjacent on A's leaderboard that B orders the other way.

Outputs (``--out``): ``agreement.json`` (sources, coverage, figures with intervals, confusion,
bootstrap seed, leaderboards), ``agreement_confusion.png`` (the level confusion heatmap) and
``agreement_scatter.png`` (A against B per pair; a discrete source jittered).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from saber_core.evaluation.metrics import ndcg_at_k, trec_tiebreak
from saber_core.validity.agreement import DEFAULT_CUTS, pair_agreement, system_agreement
from saber_eval.agreement_sources import Common, Labels, LabelSource, common_pairs
from saber_eval.benchmark import MAIN_SETTING
from saber_eval.runfile import TIE_RULE, read_run
from saber_eval.runner import K

JITTER_LEVELS = 12
FIGURE_NAMES = {
    "r2_within": "within-query R² (B on A)",
    "spearman_median": "median within-query Spearman ρ",
    "exact_agreement": "exact agreement (cut levels)",
    "extreme_flips": "extreme flips (lowest ↔ highest)",
    "auc": "AUC of A: B top vs B bottom",
    "kappa_linear": "weighted κ (linear)",
    "kappa_quadratic": "weighted κ (quadratic)",
}


@dataclass(frozen=True)
class AgreementSettings:
    """Options of ``saber judge agree``."""

    cuts: tuple[float, ...] = DEFAULT_CUTS  # A's cuts, and B's unless cuts_b
    cuts_b: tuple[float, ...] | None = None
    bootstrap: int = 1000
    seed: int = 0
    setting: str = MAIN_SETTING
    runs_dir: Path | None = None


def find_runs(runs_dir: Path, setting: str) -> dict[str, Path]:
    """Retriever name (its summary's ``spec``, else the folder name) → run file of ``setting``."""
    runs = {}
    for folder in sorted(p for p in Path(runs_dir).iterdir() if p.is_dir()):
        run = folder / f"{setting}.trec"
        if not run.exists():
            continue
        summary = folder / f"{setting}.json"
        name = json.loads(summary.read_text()).get("spec") if summary.exists() else None
        runs[name or folder.name] = run
    return runs


def mean_ndcg(run: dict, labels: Labels, pools: dict[str, list[str]], k: int = K) -> float:
    """Mean over the queries of ``pools`` of nDCG@k of the run on those candidates under
    ``labels`` (module docstring)."""
    qids = sorted(pools)
    width = max(len(pools[q]) for q in qids)
    scores = np.full((len(qids), width), np.nan)
    ratings = np.zeros((len(qids), width))
    for i, q in enumerate(qids):
        score_of = {doc: s for doc, _, s in run.get(q, [])}
        for j, doc in enumerate(pools[q]):
            scores[i, j] = score_of.get(doc, np.nan)
            ratings[i, j] = labels[q][doc]
    tiebreak = trec_tiebreak([pools[q] for q in qids], width)
    return float(np.mean(ndcg_at_k(scores, ratings, k, tiebreak=tiebreak)))


def leaderboards(runs: dict[str, Path], a: Labels, b: Labels, common: Common, setting: str) -> dict:
    """Each run's mean nDCG@10 under A and under B and the agreement of the two orderings."""
    pools: dict[str, list[str]] = {}
    for q, d in zip(common.query_ids, common.doc_ids, strict=True):
        pools.setdefault(q, []).append(d)
    rows = []
    for name, path in runs.items():
        run = read_run(path)
        rows.append(
            {
                "retriever": name,
                "run_file": str(path),
                f"ndcg@{K}_a": mean_ndcg(run, a, pools),
                f"ndcg@{K}_b": mean_ndcg(run, b, pools),
            }
        )
    rows.sort(key=lambda r: -r[f"ndcg@{K}_a"])
    names = [r["retriever"] for r in rows]
    score_a = np.array([r[f"ndcg@{K}_a"] for r in rows])
    score_b = np.array([r[f"ndcg@{K}_b"] for r in rows])
    return {
        "setting": setting,
        "k": K,
        "tie_rule": TIE_RULE,
        "queries": len(pools),
        "retrievers": rows,
        **system_agreement(names, score_a, score_b),
    }


def agreement_report(
    a: LabelSource, b: LabelSource, settings: AgreementSettings
) -> tuple[dict, Common]:
    """The JSON report of ``saber judge agree`` (module docstring) and the common pairs."""
    common = common_pairs(a.labels, b.labels)
    report: dict = {
        "a": a.describe(),
        "b": b.describe(),
        "coverage": common.coverage,
    }
    if not common.a:
        report["pairs"] = None
        report["systems"] = None
        return report, common
    pairs = pair_agreement(
        np.array(common.a),
        np.array(common.b),
        common.query_ids,
        settings.cuts,
        settings.bootstrap,
        settings.seed,
        settings.cuts_b,
    )
    report["pairs"] = pairs.as_dict()
    runs_dir = settings.runs_dir or a.runs_dir or b.runs_dir
    runs = find_runs(runs_dir, settings.setting) if runs_dir else {}
    report["systems"] = (
        {
            "runs_dir": str(runs_dir),
            **leaderboards(runs, a.labels, b.labels, common, settings.setting),
        }
        if runs
        else {"runs_dir": str(runs_dir) if runs_dir else None, "retrievers": []}
    )
    return report, common


def _interval(f: dict) -> str:
    if f["value"] is None:
        return "n/a"
    if f["lo"] is None:
        return f"{f['value']:.3f}"
    return f"{f['value']:.3f}  [{f['lo']:.3f}, {f['hi']:.3f}]"


def _gap_line(label: str, gap: dict) -> str:
    examples = f" (e.g. {', '.join(gap['examples'])})" if gap["count"] else ""
    return f"  {label:<28} {gap['count']}{examples}"


def summary_lines(report: dict) -> list[str]:
    """The card-style table, the coverage and the system-level figures."""
    cov = report["coverage"]
    lines = [
        f"A: {report['a']['spec']} ({report['a']['kind']}, {report['a']['pairs']} pairs)",
        f"B: {report['b']['spec']} ({report['b']['kind']}, {report['b']['pairs']} pairs)",
        "coverage:",
        f"  {'pairs labelled by both':<28} {cov['pairs_both']} in {cov['queries_both']} queries",
        _gap_line("pairs only A labels", cov["pairs_only_a"]),
        _gap_line("pairs only B labels", cov["pairs_only_b"]),
        _gap_line("queries only in A", cov["queries_only_a"]),
        _gap_line("queries only in B", cov["queries_only_b"]),
    ]
    pairs = report["pairs"]
    if pairs is None:
        return [*lines, "no pair is labelled by both sources: nothing to compare"]
    boot = pairs["bootstrap"]
    lines += [
        "",
        f"pairs: {pairs['n_pairs']} in {pairs['n_queries']} queries · cuts A "
        f"{', '.join(f'{c:g}' for c in pairs['cuts_a'])}, B "
        f"{', '.join(f'{c:g}' for c in pairs['cuts_b'])} · 95% intervals: {boot['n_boot']} "
        f"query resamples, seed {boot['seed']}",
        f"  {'figure':<36} value  [95% interval]",
    ]
    for key, name in FIGURE_NAMES.items():
        lines.append(f"  {name:<36} {_interval(pairs['figures'][key])}")
    lines.append(
        f"  (Spearman over {pairs['spearman_queries']} queries, {pairs['spearman_skipped']} "
        f"skipped: < 3 pairs or constant labels; AUC over {pairs['auc_pairs']['top']} top × "
        f"{pairs['auc_pairs']['bottom']} bottom pairs)"
    )
    levels = len(pairs["confusion"])
    lines.append("  confusion (rows A level, columns B level):")
    lines.append("      " + "".join(f"{j:>7}" for j in range(levels)))
    lines += [
        f"  {i:>3} " + "".join(f"{c:>7}" for c in row) for i, row in enumerate(pairs["confusion"])
    ]
    systems = report["systems"]
    if not systems["retrievers"]:
        where = systems["runs_dir"]
        found = f"no evaluated runs in {where}" if where else "neither source has evaluated runs"
        return [*lines, "", f"systems: {found} (evaluate with `saber eval`, or pass --runs DIR)"]
    k = systems["k"]
    lines += [
        "",
        f"systems: {len(systems['retrievers'])} retrievers · {systems['setting']} · mean "
        f"nDCG@{k} over {systems['queries']} queries ({systems['runs_dir']})",
        f"  {'retriever':<36} {'under A':>8} {'under B':>8}",
    ]
    lines += [
        f"  {r['retriever']:<36} {r[f'ndcg@{k}_a']:>8.4f} {r[f'ndcg@{k}_b']:>8.4f}"
        for r in systems["retrievers"]
    ]
    tau = systems["kendall_tau_b"]
    tau_ap = systems["tau_ap"]
    swaps = "; ".join(f"{x} / {y}" for x, y in systems["swaps"]) or "none"
    lines += [
        f"  Kendall τ-b {'n/a' if tau is None else f'{tau:.3f}'} · "
        f"τ_AP {'n/a' if tau_ap is None else f'{tau_ap:.3f}'}",
        f"  adjacent pairs of A's leaderboard that B swaps: {swaps}",
    ]
    return lines


def _jittered(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A discrete label (≤ JITTER_LEVELS distinct values) spread by ±15% of its smallest step,
    so stacked pairs show; a continuous one unchanged."""
    distinct = np.unique(values)
    if len(distinct) < 2 or len(distinct) > JITTER_LEVELS:
        return values
    return values + rng.uniform(-0.15, 0.15, len(values)) * np.diff(distinct).min()


def plot(report: dict, common: Common, out: Path) -> list[Path]:
    """``agreement_confusion.png`` and ``agreement_scatter.png`` (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    confusion = np.array(report["pairs"]["confusion"])
    fig, ax = plt.subplots(figsize=(4.5, 4))
    image = ax.imshow(confusion, cmap="Blues")
    for (i, j), count in np.ndenumerate(confusion):
        colour = "white" if count > confusion.max() / 2 else "black"
        ax.text(j, i, str(count), ha="center", va="center", color=colour)
    ax.set_xticks(range(len(confusion)))
    ax.set_yticks(range(len(confusion)))
    ax.set_xlabel(f"B level ({report['b']['kind']})")
    ax.set_ylabel(f"A level ({report['a']['kind']})")
    ax.set_title("pairs by cut level")
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    paths = [out / "agreement_confusion.png"]
    fig.savefig(paths[0], dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(5, 4))
    rng = np.random.default_rng(0)
    xs, ys = (_jittered(np.array(v), rng) for v in (common.a, common.b))
    ax.scatter(xs, ys, s=10, alpha=0.35)
    for cut in report["pairs"]["cuts_a"]:
        ax.axvline(cut, color="grey", lw=0.6, ls=":")
    for cut in report["pairs"]["cuts_b"]:
        ax.axhline(cut, color="grey", lw=0.6, ls=":")
    ax.set_xlabel(f"A: {Path(report['a']['spec']).name}")
    ax.set_ylabel(f"B: {Path(report['b']['spec']).name}")
    r2 = report["pairs"]["figures"]["r2_within"]["value"]
    ax.set_title(f"{len(common.a)} pairs · within-query R² {r2:.3f}" if r2 is not None else "")
    fig.tight_layout()
    paths.append(out / "agreement_scatter.png")
    fig.savefig(paths[1], dpi=120)
    plt.close(fig)
    return paths


def write_outputs(report: dict, common: Common, out: Path) -> list[Path]:
    """Write ``agreement.json`` and, when pairs were compared, the two plots."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "agreement.json"
    path.write_text(json.dumps(report, indent=2))
    return [path, *(plot(report, common, out) if report["pairs"] else [])]


def parse_cuts(text: str) -> tuple[float, ...]:
    """``"0.5,1.5"`` → ``(0.5, 1.5)``."""
    return tuple(float(part) for part in text.split(",") if part.strip())
