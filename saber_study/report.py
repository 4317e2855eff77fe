"""The tournament study's Markdown report (tables of means ± standard errors)."""

from __future__ import annotations

from saber_study.simulation import design_row


def _fmt(stat: dict, digits: int = 3) -> str:
    if stat["mean"] != stat["mean"]:
        return "n/a"
    se = "" if stat["se"] != stat["se"] else f" ± {stat['se']:.{digits}f}"
    return f"{stat['mean']:.{digits}f}{se}"


def markdown(results: dict) -> str:
    """The study's Markdown report: the strategy, reliability and triage tables (unless the run
    was ``--budget-only``), then the budget curves."""
    parts = [] if results["config"]["budget_only"] else [strategy_markdown(results)]
    return "\n\n".join([*parts, budget_markdown(results["budget_curves"], results["config"])])


def budget_markdown(block: dict, cfg: dict) -> str:
    """Budget curves: calls per query vs leaderboard τ and mean |ΔnDCG@10| to the round-robin
    labels, per pairing and presentation order; position bias and group bias; targets."""
    lines = [
        "### Budget curves: judge calls vs leaderboard stability (simulation)",
        "",
        f"{cfg['n_queries']} queries × {cfg['n_players']} candidates, judge noise "
        f"{cfg['judge_noise']}, position bias {block['position_bias']} (logit), seed "
        f"{cfg['seed']}; {len(block['retriever_noise'])} simulated retrievers (score = strength "
        f"+ noise·N(0, 1), noise {', '.join(str(x) for x in block['retriever_noise'])}); "
        f"reference labels: {block['reference']}. Adaptive: {cfg['adaptive_warmup']} Swiss "
        f"rounds, then top-focused rounds, stop at posterior nDCG@10 ≥ "
        f"{cfg['adaptive_stop_ndcg']}, min pair weight {cfg['adaptive_min_weight']}, "
        f"{cfg['adaptive_draws']} draws. True-strength labels vs round-robin labels: τ "
        f"{block['true_strength_labels_vs_round_robin']['leaderboard_tau']:.3f}, mean "
        f"|ΔnDCG@10| {block['true_strength_labels_vs_round_robin']['mean_abs_delta_ndcg']:.4f}.",
        "",
        "| pairing | presentation | rounds | judge calls / query | share of Swiss-"
        f"{cfg['n_rounds']} calls | leaderboard τ | mean \\|ΔnDCG@10\\| | max \\|ΔnDCG@10\\| "
        "| group bias |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    swiss = block["swiss_budget_calls"]
    for row in block["rows"]:
        for c in row["curve"]:
            lines.append(
                f"| {row['pairing']} | {row['presentation']} | {c['rounds']} "
                f"| {c['calls_per_query']:,.0f} | {c['calls_per_query'] / swiss:.0%} "
                f"| {c['leaderboard_tau']:.3f} | {c['mean_abs_delta_ndcg']:.4f} "
                f"| {c['max_abs_delta_ndcg']:.4f} | {c['group_bias']:+.3f} |"
            )
    lines += [
        "",
        '| pairing | presentation | share of "first" answers | adaptive stops (stable / '
        "exhausted / still playing) | calls from which on τ ≥ "
        f"{cfg['leaderboard_tau_target']} | calls from which on also \\|ΔnDCG@10\\| ≤ "
        f"{cfg['ndcg_error_target']} |",
        "|---|---|---:|---|---:|---:|",
    ]
    for row in block["rows"]:
        t = block["targets"][f"{row['pairing']}/{row['presentation']}"]
        stops = row["stop_reasons"]
        lines.append(
            f"| {row['pairing']} | {row['presentation']} | {row['first_answer_share']:.3f} "
            f"| {stops['stable']} / {stops['exhausted']} / {stops['playing']} "
            f"| {_calls(t['calls_for_tau'])} | {_calls(t['calls_for_both'])} |"
        )
    return "\n".join(lines)


def _calls(value: float | None) -> str:
    return "not reached" if value is None else f"{value:,.0f}"


def strategy_markdown(results: dict) -> str:
    """Strategies, noise sweep, reliability, triage and their targets."""
    cfg = results["config"]
    main = results["strategies"]
    lines = [
        "### Tournament strategies at the Swiss budget (simulation)",
        "",
        f"{cfg['n_queries']} queries × {cfg['n_players']} candidates, {cfg['n_rounds']} rounds; "
        f"true strengths N(0, {cfg['strength_sd']}²); judge perception s_a − s_b + "
        f"{cfg['judge_noise']}·Logistic(0, 1) + {cfg['position_bias']} (position bias), "
        f"soft output σ({cfg['soft_sharpness']}·perception); BT with L2, C = {cfg['C']}; "
        f"seed {cfg['seed']}. Judge follows the true order on "
        f"{main['judge_accuracy_random_pairs']:.1%} of random pairs "
        f"({main['judge_accuracy_swiss_pairs']:.1%} of the closer Swiss pairs). "
        "Mean ± standard error over queries; Δ is paired per query.",
        "",
        "| strategy | outcomes | comparisons / query | τ to truth | τ to RR-BT (hard) "
        "| τ to RR-BT (soft) | pairwise agreement with RR-BT | Δτ to RR vs Swiss-20 hard |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in main["rows"]:
        delta = "—" if r["design"] == "swiss" and r["outcomes"] == "hard" else None
        lines.append(
            f"| {r['strategy']} | {r['outcomes']} | {r['comparisons_per_query']:,.0f} "
            f"| {_fmt(r['tau_truth'])} | {_fmt(r['tau_rr_hard'])} | {_fmt(r['tau_rr_soft'])} "
            f"| {_fmt(r['agreement_rr_hard'])} "
            f"| {delta or _fmt(r['delta_tau_rr_vs_swiss_hard'])} |"
        )
    lines += [
        "",
        "### τ to the round-robin BT ratings (hard) across judge noise",
        "",
        "| judge noise | judge accuracy (random pairs) | Swiss-20 hard | Swiss-20 soft "
        "| information-gain hard | information-gain soft | random hard | round robin soft "
        "| nearest rivals (true strengths) soft | true strengths themselves |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in results["noise_sweep"]:
        rows = s["rows"]
        cells = [
            _fmt(design_row(rows, d, o)["tau_rr_hard"])
            for d, o in (
                ("swiss", "hard"),
                ("swiss", "soft"),
                ("information", "hard"),
                ("information_soft", "soft"),
                ("random", "hard"),
                ("round_robin", "soft"),
                ("oracle", "soft"),
                ("truth", "exact"),
            )
        ]
        lines.append(
            f"| {s['judge_noise']} | {s['judge_accuracy_random_pairs']:.1%} | "
            + " | ".join(cells)
            + " |"
        )
    rel = results["reliability"]
    lines += [
        "",
        "### Reliability of Swiss-20 (hard) ratings",
        "",
        "| split-half r (raw) | split-half, Spearman–Brown | bootstrap "
        f"{rel['bootstrap_level']:.0%} coverage of the estimand "
        "| mean interval width (0–5 scale) |",
        "|---:|---:|---:|---:|",
        f"| {_fmt(rel['split_half_raw_r'])} | {_fmt(rel['split_half_spearman_brown'])} "
        f"| {_fmt(rel['bootstrap_coverage_of_estimand'])} "
        f"| {_fmt(rel['bootstrap_width_rating'], 2)} |",
        "",
        f"(bootstrap: {rel['bootstrap_queries']} queries × {rel['bootstrap_draws']} draws; "
        "estimand = the L2 BT fit on the same pairs with expected outcomes)",
        "",
        "### Cheap-judge triage (judge noise as above)",
        "",
        "Cheap score c = s + cheap_noise·N(0, 1) (ρ = its Spearman correlation with the truth); "
        "p_cheap = σ(k·(c_a − c_b)) with k fitted on the LLM verdicts of Swiss round 1 (always "
        "LLM-judged); pairs with |p_cheap − ½| ≥ threshold take p_cheap instead of an LLM call.",
        "",
        "| cheap noise (ρ to truth) | threshold |p−½| | RR: saved | RR: τ to full-LLM "
        "| Swiss replay: saved | Swiss replay: τ to full-LLM | Swiss in loop: saved "
        "| Swiss in loop: τ to truth |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["triage"]:
        rr, sr, sl = r["round_robin"], r["swiss_replay"], r["swiss_in_loop"]
        lines.append(
            f"| {r['cheap_noise']} ({r['cheap_spearman_truth']['mean']:.2f}) | {r['threshold']} "
            f"| {rr['saved']:.1%} | {_fmt(rr['tau_full_llm'])} | {sr['saved']:.1%} "
            f"| {_fmt(sr['tau_full_llm'])} | {sl['saved']:.1%} | {_fmt(sl['tau_truth'])} |"
        )
    swiss_truth = design_row(main["rows"], "swiss", "hard")["tau_truth"]
    target = cfg["triage_tau_target"]
    lines += [
        "",
        f"(Swiss-20 without triage: τ to truth {_fmt(swiss_truth)}.)",
        "",
        f"Most LLM calls saved with τ to the full-LLM ratings ≥ {target} (over the thresholds):",
        "",
        "| judge noise | cheap noise | round robin: saved (threshold, τ) "
        "| Swiss replay: saved (threshold, τ) |",
        "|---:|---:|---:|---:|",
    ]

    def best_cell(b: dict | None) -> str:
        if b is None:
            return "none"
        return f"{b['saved']:.1%} ({b['threshold']}, {b['tau_full_llm']['mean']:.3f})"

    for t in results["triage_sweep"]:
        for noise in t["best"]["round_robin"]:
            lines.append(
                f"| {t['judge_noise']} | {noise} | {best_cell(t['best']['round_robin'][noise])} "
                f"| {best_cell(t['best']['swiss_replay'][noise])} |"
            )
    lines += ["", "### Targets", ""]
    tg = results["targets"]
    info = tg["information_tau_rr"]
    lines.append(
        f"- Information-gain pairing, τ to RR-BT ≥ {tg['pairing_tau_rr_target']}: "
        f"hard {info['hard']:.3f} ({'met' if tg['pairing_target_met']['hard'] else 'not met'}), "
        f"soft {info['soft']:.3f} ({'met' if tg['pairing_target_met']['soft'] else 'not met'})."
    )
    holds = ", ".join(
        f"{k}: {'never' if v is None else f'noise ≤ {v}'}"
        for k, v in tg["largest_judge_noise_meeting_pairing_target"].items()
    )
    lines.append(f"- Largest swept judge noise where τ to RR-BT ≥ target holds: {holds}.")
    ceil = tg["reference_tau_rr"]
    lines.append(
        f"- References at judge noise {cfg['judge_noise']}: the true strengths themselves reach "
        f"τ {ceil['true_strengths']:.3f} to RR-BT (the round robin's own judge noise); "
        "nearest-rival pairing on the true strengths (soft) "
        f"{ceil['nearest_rival_pairing_soft']:.3f}"
        " (pairing only close rivals starves the ranking of long-range comparisons)."
    )
    met = tg["triage_configs_meeting_target"]
    where = "; ".join(
        f"{m['design']} at judge noise {m['judge_noise']}, cheap noise {m['cheap_noise']}: "
        f"{m['saved']:.1%} saved (τ {m['tau_full_llm']['mean']:.3f})"
        for m in met
    )
    lines.append(
        f"- Triage, ≥ 50% LLM calls saved at τ to full-LLM ≥ {target}: "
        + ("met at the main judge noise" if tg["triage_target_met_at_main_noise"] else
           "not met at the main judge noise")
        + (f"; met for {where}." if met else "; not met in any swept configuration.")
    )  # fmt: skip
    lines.append(f"\nRuntime {results['seconds']:.0f} s.")
    return "\n".join(lines)
