"""``saber judge probe``: how a build's judge behaves on its own pool pairs (test–retest,
order-swap consistency, first-answer share by rating gap, P(a wins) against the gap) and the
study's judge fitted to it; writes ``judge-probe.json``, ``judge-probe.png`` and the calls
(``judge-probe-calls.parquet``) to ``--out`` (default ``<SABER home>/judge-probe``) and prints a
summary (docs/judge-probe.md; the work: :mod:`saber_runtime.judge_probe`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from saber_runtime.judge_probe import GAPS, ProbeError, ProbeSettings

KEEP_SERVER_ENV = "SABER_KEEP_LLM_SERVER"


def build_parser() -> argparse.ArgumentParser:
    """The ``saber judge probe`` arguments (defaults = :class:`ProbeSettings`)."""
    d = ProbeSettings()
    p = argparse.ArgumentParser(
        prog="saber judge probe",
        description="Ask the build's judge about a sample of its pool pairs in both orders, "
        "repeatedly; report its consistency and position bias and fit the study's judge.",
    )
    p.add_argument("--profile", help="profile name or YAML path (default: SABER_PROFILE)")
    p.add_argument("--home", help="the finished build's SABER home (default: SABER_HOME)")
    p.add_argument("--out", type=Path, help="output folder (default <home>/judge-probe)")
    p.add_argument("--pairs", type=int, default=d.pairs, help="pairs to sample")
    p.add_argument("--bins", type=int, default=d.bins, help="quantile bins of the gap")
    p.add_argument("--repeats", type=int, default=d.repeats, help="calls per pair and order")
    p.add_argument(
        "--sample-temperature",
        type=float,
        default=d.sample_temperature,
        help="a greedy judge is also asked at this temperature (0: not)",
    )
    p.add_argument(
        "--gap",
        choices=GAPS,
        default=d.gap,
        help="reference gap: embedding (MiniLM cosine, independent of an LLM judge) or "
        "ratings (Bradley–Terry strengths of --reference-home; circular on the judge's own build)",
    )
    p.add_argument("--reference-home", default="", help="SABER home whose ratings are the gap")
    p.add_argument("--target-sd", type=float, default=d.target_sd, help="gap scale (study: 1.5)")
    p.add_argument("--seed", type=int, default=d.seed, help="pair sample and bootstrap seed")
    p.add_argument("--bootstrap", type=int, default=d.bootstrap, help="bootstrap refits")
    p.add_argument("--no-fit", action="store_true", help="figures only, no judge fit")
    return p


def settings_from(args: argparse.Namespace) -> ProbeSettings:
    """The probe settings of parsed arguments."""
    return ProbeSettings(
        pairs=args.pairs,
        bins=args.bins,
        repeats=args.repeats,
        sample_temperature=args.sample_temperature,
        gap=args.gap,
        reference_home=args.reference_home,
        target_sd=args.target_sd,
        seed=args.seed,
        bootstrap=args.bootstrap,
        fit=not args.no_fit,
    )


def _pct(entry: dict) -> str:
    lo, hi = entry["ci95"]
    if entry["n"] == 0 or lo is None:
        return "n/a"
    return f"{entry['share']:.1%} [{lo:.1%}, {hi:.1%}] (n={entry['n']})"


def _num(x: Any) -> str:
    return x if isinstance(x, str) else ("n/a" if x is None else f"{x:.3g}")


def summary_lines(result: dict) -> list[str]:
    """The short printed summary of a probe."""
    judge = result["judge"]
    lines = [
        f"judge: {judge.get('judge_kind')} {judge.get('judge_model') or ''} "
        f"({judge.get('judge_backend') or 'no backend'}); gap: {result['gap']['kind']}; "
        f"calls: {result['calls']['asked']} asked, {result['calls']['cached']} cached",
    ]
    for name, entry in result["conditions"].items():
        f = entry["figures"]
        lines.append(
            f"[{name}, temperature {entry['temperature']}] {f['n_pairs']} pairs, "
            f"{f['n_calls']} calls, {f['n_dropped']} dropped"
        )
        lines.append(f"  test–retest agreement   {_pct(f['test_retest_agreement'])}")
        lines.append(f"  order-swap consistency  {_pct(f['order_swap_consistency'])}")
        lines.append(f"  first-answer share      {_pct(f['first_answer_share'])}")
        for row in f["by_gap_bin"]:
            lines.append(
                f"    gap bin {row['bin']} (mean Δ {row['mean_gap']:.2f}): first "
                f"{row['first_answer_share']['share']:.1%}, P(a wins) {row['a_wins']['share']:.1%}"
            )
        if "logprob_signal" in f:
            s = f["logprob_signal"]
            lines.append(
                f"  logprob signal: Spearman(gap, debiased p) {_num(s['spearman'])} "
                f"[{_num(s['ci95'][0])}, {_num(s['ci95'][1])}] over {s['n']} pairs"
            )
        if "fit" in entry:
            study = entry["fit"]["study_units"]
            parts = [
                f"{k} {_num(v['estimate'])} [{_num(v['ci95'][0])}, {_num(v['ci95'][1])}]"
                for k, v in study.items()
            ]
            lines.append("  fitted study judge: " + "; ".join(parts))
            for k, why in entry["fit"]["not_identified"].items():
                if k in study or k == "signal":
                    lines.append(f"    {k}: {why}")
    lines += [f"note: {n}" for n in result["notes"]]
    return lines


def plot(result: dict, path: Path) -> Path:
    """First-answer share and P(a wins) by gap bin, measured (Wilson 95%) and fitted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for (name, entry), colour in zip(result["conditions"].items(), ("C0", "C1"), strict=False):
        rows = entry["figures"]["by_gap_bin"]
        x = [r["mean_gap"] for r in rows]
        label = f"{name} (T={entry['temperature']})"
        for ax, key in zip(axes, ("first_answer_share", "a_wins"), strict=True):
            y = [r[key]["share"] for r in rows]
            lo = [r[key]["share"] - r[key]["ci95"][0] for r in rows]
            hi = [r[key]["ci95"][1] - r[key]["share"] for r in rows]
            ax.errorbar(x, y, yerr=[lo, hi], fmt="o", color=colour, capsize=3, label=label)
            if "fit" in entry:
                fitted = [r[key] for r in entry["fit"]["predicted"]["by_gap_bin"]]
                ax.plot(x, fitted, "-", color=colour, alpha=0.6, label=f"{name}: fitted")
    axes[0].set_title("answers for the candidate shown first")
    axes[1].set_title("P(reference-preferred candidate wins)")
    for ax in axes:
        ax.axhline(0.5, color="grey", lw=0.8, ls=":")
        ax.set_xlabel(f"reference gap Δ ({result['gap']['kind']}, bin means)")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=8)
    judge = result["judge"]
    fig.suptitle(
        f"judge probe: {judge.get('judge_kind')} {judge.get('judge_model') or ''}", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def probe_main(argv: Sequence[str] | None = None, backend: Any = None) -> int:
    """Entry point of ``saber judge probe`` (``backend``: a test double instead of the plan's)."""
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    from saber_cli.config_errors import load_config
    from saber_llm.factory import make_backend, make_judge
    from saber_runtime.judge_probe import run_probe
    from saber_store.database import DuckDBStore

    overrides = {"home": args.home} if args.home else {}
    build = load_config("judge probe", args.profile, **overrides)
    plan = build.plan()
    settings = settings_from(args)
    uses_llm = plan.tournament.judge == "llm"
    if uses_llm and plan.execution == "slurm":
        print(
            "saber judge probe: the probe calls the judge from here (in-process, the local vLLM "
            "server or an OpenAI-compatible server), not as SLURM jobs: run it on a GPU node "
            "with SABER_EXECUTION=local, or point SABER_LLM_BACKEND=openai at the cluster's "
            "vLLM server",
            file=sys.stderr,
        )
        return 2
    backend = backend or (make_backend(plan) if uses_llm else None)
    judge = make_judge(plan, backend)
    store = DuckDBStore(database=str(build.database_path))
    local = getattr(backend, "local_dispatch", None)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    dispatch = local(log) if local is not None else None
    try:
        result, calls = run_probe(
            store, judge, settings, str(plan.paths.embedding_cache), dispatch, log
        )
    except ProbeError as exc:
        print(f"saber judge probe: {exc}", file=sys.stderr)
        return 2
    finally:
        if dispatch is not None and os.environ.get(KEEP_SERVER_ENV) != "1":
            from saber_llm.engine_server import shutdown_servers

            shutdown_servers(build.home_path)
    out = args.out or build.home_path / "judge-probe"
    out.mkdir(parents=True, exist_ok=True)
    result["home"] = str(build.home_path)
    (out / "judge-probe.json").write_text(json.dumps(result, indent=1) + "\n")
    calls.write_parquet(out / "judge-probe-calls.parquet")
    plot(result, out / "judge-probe.png")
    print("\n".join(summary_lines(result)))
    log(f"wrote {out}/judge-probe.json, judge-probe.png, judge-probe-calls.parquet")
    return 0
