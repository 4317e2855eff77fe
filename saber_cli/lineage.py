"""Lineage inspection: from a rating back to the judgments, pools, annotations and corpus rows.

``create_lineage_views`` defines DuckDB views that join the stage tables:

* ``lineage_judgments`` — every judgment with the LLM calls behind it (``llm_calls`` rows: model,
  backend, prompt hash, sampling params, raw text), one row per (judgment, call key);
* ``lineage_pool_members`` — every pool candidate with its rating, group, BMA, Jaccard and the
  query's pool thresholds;
* ``lineage_annotations`` — every corpus row with its summary and topics and their provenance.

``lineage_report`` prints the chain rating ← judgments ← pool membership ← summaries/topics ←
corpus rows for one (query, candidate).
"""

from __future__ import annotations

import polars as pl

from saber_llm.cache import TABLE as LLM_CALLS
from saber_store.database import DuckDBStore

VIEWS = {
    "lineage_pool_members": """
        SELECT p.query_id, p.doc_id, p.position, p."group", p.relaxed, p.bma, p.jaccard,
               r.rating, r.strength, r.games, r.wins, o.status AS pool_status,
               o.topic_low, o.topic_high, o.summary_low, o.summary_high,
               p._run_id AS pool_run_id, r._run_id AS rating_run_id
        FROM candidate_pools p
        JOIN pool_outcomes o USING (query_id)
        LEFT JOIN bt_ratings r USING (query_id, doc_id)""",
    "lineage_annotations": """
        SELECT c.doc_id, c.source, c.domain, s.summary, s.summary_origin,
               t.topics, t.topic_origins, c._run_id AS corpus_run_id
        FROM corpus c
        LEFT JOIN summaries s USING (doc_id)
        LEFT JOIN (SELECT doc_id, list(topic_id) AS topics,
                          list(DISTINCT topic_origin) AS topic_origins
                   FROM topic_annotations GROUP BY doc_id) t USING (doc_id)""",
}
JUDGMENT_VIEW = """
    SELECT j.query_id, j.round, j.cand_a, j.cand_b, j.winner, j.p_a, j.drop_reason, j.raw,
           nullif(k.call_key, '') AS call_key,
           coalesce(c.backend, j.judge_backend, j.judge_kind) AS backend,
           coalesce(c.model, j.judge_model) AS model,
           coalesce(c.prompt_id, j.prompt_id) AS prompt_id,
           coalesce(c.prompt_hash, j.prompt_hash) AS prompt_hash,
           coalesce(c.sampling, j.sampling_params) AS sampling,
           c.text AS call_text, coalesce(c.run_id, j._run_id) AS call_run_id
    FROM judgments j
    LEFT JOIN LATERAL (
        SELECT unnest(string_split(regexp_replace(j.call_keys, '[|;]', ',', 'g'), ','))
               AS call_key) k ON TRUE
    LEFT JOIN {calls} c ON c.call_key = k.call_key"""
NO_CALLS = """
    SELECT j.query_id, j.round, j.cand_a, j.cand_b, j.winner, j.p_a, j.drop_reason, j.raw,
           NULL AS call_key, coalesce(j.judge_backend, j.judge_kind) AS backend,
           j.judge_model AS model, j.prompt_id, j.prompt_hash, j.sampling_params AS sampling,
           NULL AS call_text, j._run_id AS call_run_id
    FROM judgments j"""


def create_lineage_views(store: DuckDBStore) -> list[str]:
    """(Re)create the lineage views; returns their names."""
    calls = store.has_table(LLM_CALLS)
    with store.connect() as con:
        for name, sql in VIEWS.items():
            con.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")
        body = JUDGMENT_VIEW.format(calls=LLM_CALLS) if calls else NO_CALLS
        con.execute(f"CREATE OR REPLACE VIEW lineage_judgments AS {body}")
    return [*VIEWS, "lineage_judgments"]


def _one(frame: pl.DataFrame, what: str) -> dict:
    if frame.height == 0:
        raise KeyError(f"no {what}")
    return frame.row(0, named=True)


def _cut(text: object, width: int = 90) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _judge_lines(store: DuckDBStore, query_id: str) -> list[str]:
    """Who judged the query's pairs: the judge, its model and backend, and its prompt (id and
    hash) — or that it uses none (the embedding and lexical judges compare texts directly)."""
    judges = store.query(
        "SELECT DISTINCT judge_kind, judge_model, judge_backend, prompt_id, prompt_hash "
        "FROM judgments WHERE query_id = ? ORDER BY ALL",
        [query_id],
    )
    lines = []
    for row in judges.iter_rows(named=True):
        backend = f", backend {row['judge_backend']}" if row["judge_backend"] else ""
        prompt = (
            f"prompt {row['prompt_id']}, hash {row['prompt_hash']}"
            if row["prompt_id"]
            else "uses no prompt (it compares the texts directly)"
        )
        lines.append(
            f"judge     {row['judge_kind']}: model {row['judge_model']}{backend}; {prompt}"
        )
    return lines


def lineage_report(store: DuckDBStore, query_id: str, doc_id: str | None = None) -> str:
    """The chain rating ← judgments ← pool ← annotations ← corpus for (query, candidate).

    Without ``doc_id``: the query's candidates by rating, then the chain of the top-rated one.
    """
    create_lineage_views(store)
    members = store.query(
        "SELECT * FROM lineage_pool_members WHERE query_id = ? ORDER BY rating DESC NULLS LAST",
        [query_id],
    )
    if members.height == 0:
        raise KeyError(f"query {query_id!r} has no pool (see table pool_outcomes)")
    lines: list[str] = []
    if doc_id is None:
        lines.append(f"query {query_id}: {members.height} candidates (by rating)")
        for row in members.head(10).iter_rows(named=True):
            lines.append(
                f"  {row['rating']:.3f}  {row['doc_id']}  [{row['group']}] "
                f"bma={row['bma']:.3f} jaccard={row['jaccard']:.3f}"
            )
        doc_id = members["doc_id"][0]
        lines.append("")
    member = _one(members.filter(pl.col("doc_id") == doc_id), f"candidate {doc_id!r} in {query_id}")
    lines += [
        f"rating    {query_id} × {doc_id}: {member['rating']:.4f} on [0, 5] "
        f"(BT strength {member['strength']:.4f}, {member['games']} games, {member['wins']} wins; "
        f"run {member['rating_run_id']})",
        *_judge_lines(store, query_id),
        "  ← judgments",
    ]
    judgments = store.query(
        "SELECT * FROM lineage_judgments WHERE query_id = ? AND (cand_a = ? OR cand_b = ?) "
        "ORDER BY round, call_key",
        [query_id, doc_id, doc_id],
    )
    for row in judgments.iter_rows(named=True):
        opponent = row["cand_b"] if row["cand_a"] == doc_id else row["cand_a"]
        won = {"a": row["cand_a"], "b": row["cand_b"]}.get(row["winner"] or "", None)
        verdict = "dropped: " + str(row["drop_reason"]) if won is None else f"winner {won}"
        p_a = "n/a" if row["p_a"] is None else f"{row['p_a']:.3f}"
        prompt = f" prompt={row['prompt_id']}#{row['prompt_hash']}" if row["prompt_id"] else ""
        lines.append(
            f"    round {row['round']:>2} vs {opponent}: {verdict} (p_a={p_a}) "
            f"{row['backend']} {row['model']}{prompt}"
        )
        answer = _cut(row["call_text"] or row["raw"])
        where = f"call {row['call_key']}" if row["call_key"] else "computed"
        lines.append(f"      {where}: {answer}")
    lines += [
        "  ← pool membership",
        f"    group {member['group']} at position {member['position']}"
        f"{' (relaxed)' if member['relaxed'] else ''}: BMA {member['bma']:.4f}, "
        f"Jaccard {member['jaccard']:.4f}; thresholds topic low/high "
        f"{member['topic_low']:.3f}/{member['topic_high']:.3f}, summary low/high "
        f"{member['summary_low']:.3f}/{member['summary_high']:.3f}{threshold_note(store)}; "
        f"pool run {member['pool_run_id']}",
        "  ← summaries / topics",
    ]
    annotations = store.query(
        "SELECT * FROM lineage_annotations WHERE doc_id IN (?, ?)", [query_id, doc_id]
    )
    for who, key in (("query", query_id), ("candidate", doc_id)):
        row = _one(annotations.filter(pl.col("doc_id") == key), f"annotations of {key!r}")
        lines.append(
            f"    {who} {key}: summary ({row['summary_origin']}) {_cut(row['summary'], 70)!r}; "
            f"topics {row['topics']} ({', '.join(row['topic_origins'] or [])})"
        )
    lines.append("  ← corpus rows")
    for who, key in (("query", query_id), ("candidate", doc_id)):
        row = _one(annotations.filter(pl.col("doc_id") == key), f"corpus row {key!r}")
        lines.append(
            f"    {who} {key}: source {row['source']}, domain {row['domain']}, "
            f"run {row['corpus_run_id']}"
        )
    return "\n".join(lines)


def threshold_note(store: DuckDBStore) -> str:
    """What the pool's threshold values are: the values at per-query quantiles (and which),
    absolute values, or the global percentile over all ordered pairs — as the pools read them."""
    histograms = store.manifest_entry("pair_histograms")
    if histograms is not None:
        q = histograms["metadata"].get("reads", {}).get("thresholds.quantile")
        return f" (the global {q} percentile over all ordered pairs)"
    entry = store.manifest_entry("candidate_pools") or {}
    config = entry.get("metadata", {}).get("reads", {}).get("pools.config") or {}
    if config.get("threshold_mode") == "quantile":
        return (
            f" (the values at the query's quantiles {config['topic_low']}/{config['topic_high']} "
            f"and {config['summary_low']}/{config['summary_high']} of its eligible scores)"
        )
    if config.get("threshold_mode") == "absolute":
        return " (absolute values)"
    return ""
