"""LLM annotation of corpus rows: solution summaries and topics (against the ontology).

Both stages render a versioned prompt per document, call the backend through the DuckDB call
cache, parse the answer strictly (one retry with a new seed for an unusable answer) and return
rows with full provenance: model, backend, prompt id and hash, sampling params, seed, input hash,
call key and raw answer. Topic prompts carry a shortlist of candidate nodes retrieved for the
document by MiniLM cosine similarity (a 17K-node ontology does not fit in a prompt).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

import numpy as np
import polars as pl

from saber_compute.llm.interface import LLMRequest, LLMResult
from saber_core.discovery.pools import top_k
from saber_core.parsing import clean_summary, parse_topics, render_shortlist
from saber_llm.cache import CachedLLM, CallStats
from saber_llm.embeddings.embedder import embed_texts
from saber_llm.prompts import Prompt, load_prompt

Progress = Callable[[int, int], None] | None


def _hash(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


def _provenance(cached: CachedLLM, prompt: Prompt, request: LLMRequest) -> dict[str, str]:
    identity = cached.backend.identity()
    return {
        "model": identity.get("model", ""),
        "backend": identity.get("backend", ""),
        "prompt": prompt.label,
        "prompt_hash": prompt.hash,
        "params": json.dumps(request.sampling(), sort_keys=True),
        "seed": str(request.seed),
        "run_id": cached.run_id,
    }


def _ask_with_retry(
    cached: CachedLLM,
    build: Callable[[int, float], list[LLMRequest]],
    usable: Callable[[LLMResult], bool],
    seed: int,
    stats: CallStats,
    progress: Progress,
) -> tuple[list[LLMRequest], list[LLMResult], list[str]]:
    """Ask once; re-ask the unusable answers once with ``seed + 1`` and temperature 0.7."""
    requests = build(seed, 0.0)
    results, keys, s = cached.generate(requests, progress)
    for field in ("hits", "calls", "errors"):
        setattr(stats, field, getattr(stats, field) + getattr(s, field))
    retry = [i for i, r in enumerate(results) if not usable(r)]
    if retry:
        again = build(seed + 1, 0.7)
        more, more_keys, s = cached.generate([again[i] for i in retry])
        for field in ("hits", "calls", "errors"):
            setattr(stats, field, getattr(stats, field) + getattr(s, field))
        for i, r, k in zip(retry, more, more_keys, strict=True):
            requests[i], results[i], keys[i] = again[i], r, k
    return requests, results, keys


def llm_summaries(
    cached: CachedLLM,
    corpus: pl.DataFrame,
    max_tokens: int,
    seed: int,
    progress: Progress = None,
    prompt_file: str = "summary",
) -> tuple[pl.DataFrame, CallStats]:
    """One summary row per document (``summary`` null with the reason when unusable twice);
    ``prompt_file``: the prompt's name or file (``prompts.prompt_source``)."""
    prompt = load_prompt(prompt_file)
    docs = corpus.select("doc_id", "problem", "solution").rows()

    def build(s: int, temperature: float) -> list[LLMRequest]:
        return [
            LLMRequest(
                messages=prompt.render(problem=p, solution=sol),
                prompt_id=prompt.label,
                prompt_hash=prompt.hash,
                input_hash=_hash(p, sol),
                max_tokens=max_tokens,
                temperature=temperature,
                seed=s,
            )
            for _, p, sol in docs
        ]

    def usable(r: LLMResult) -> bool:
        return r.error is None and clean_summary(r.text)[0] is not None

    stats = CallStats()
    requests, results, keys = _ask_with_retry(cached, build, usable, seed, stats, progress)
    rows = []
    for (doc_id, _, _), req, res, key in zip(docs, requests, results, keys, strict=True):
        summary, status = (
            (None, f"backend error: {res.error}") if res.error else clean_summary(res.text)
        )
        rows.append(
            {
                "doc_id": doc_id,
                "summary": summary,
                "summary_status": status,
                "summary_origin": "llm",
                "raw": res.text,
                "response_id": res.response_id,
                "call_key": key,
                "input_hash": req.input_hash,
                **_provenance(cached, prompt, req),
            }
        )
    return pl.DataFrame(rows, infer_schema_length=None), stats


def shortlists(
    corpus: pl.DataFrame, node_ids: list[str], node_names: list[str], k: int
) -> list[list[str]]:
    """Per document, the ``k`` ontology nodes whose names are closest (MiniLM cosine)."""
    nodes = embed_texts(node_names)
    texts = (corpus["problem"] + "\n" + corpus["solution"]).to_list()
    docs = embed_texts(texts)
    similarity = docs @ nodes.T
    zero = np.zeros(len(node_ids))
    everything = np.ones(len(node_ids), dtype=bool)
    return [[node_ids[j] for j in top_k(row, everything, k, zero)] for row in similarity]


def llm_topics(
    cached: CachedLLM,
    corpus: pl.DataFrame,
    ontology: pl.DataFrame,
    shortlist_size: int,
    max_topics: int,
    max_tokens: int,
    seed: int,
    progress: Progress = None,
    prompt_file: str = "topics",
) -> tuple[pl.DataFrame, pl.DataFrame, CallStats]:
    """(doc_id, topic_id) rows with origin and provenance, plus rejected ids with reasons.

    Origins: ``llm`` (a node id as given), ``llm_mapped`` (an unknown id or a name mapped to the
    closest node by name), ``shortlist_fallback`` (no usable id in two answers: the top
    shortlisted node, so no document is left without a topic).
    """
    prompt = load_prompt(prompt_file)
    nodes = ontology.filter(pl.col("parent_ids").list.len() > 0)  # the (virtual) root is no topic
    names = dict(zip(nodes["node_id"], nodes["name"], strict=True))
    lists = shortlists(corpus, nodes["node_id"].to_list(), nodes["name"].to_list(), shortlist_size)
    docs = corpus.select("doc_id", "problem", "solution").rows()

    def build(s: int, temperature: float) -> list[LLMRequest]:
        return [
            LLMRequest(
                messages=prompt.render(
                    problem=p,
                    solution=sol,
                    shortlist=render_shortlist(short, names),
                    max_topics=str(max_topics),
                    example_id=short[0],
                ),
                prompt_id=prompt.label,
                prompt_hash=prompt.hash,
                input_hash=_hash(p, sol, *short),
                max_tokens=max_tokens,
                temperature=temperature,
                seed=s,
            )
            for (_, p, sol), short in zip(docs, lists, strict=True)
        ]

    def usable(r: LLMResult) -> bool:
        return r.error is None and bool(parse_topics(r.text, names, max_topics).kept)

    stats = CallStats()
    requests, results, keys = _ask_with_retry(cached, build, usable, seed, stats, progress)
    valid, rejected = [], []
    for (doc_id, _, _), short, req, res, key in zip(
        docs, lists, requests, results, keys, strict=True
    ):
        parsed = parse_topics(None if res.error else res.text, names, max_topics)
        mapped = {target for _, target in parsed.mapped}
        common = {
            "doc_id": doc_id,
            "raw": res.text,
            "call_key": key,
            "input_hash": req.input_hash,
            **_provenance(cached, prompt, req),
        }
        for topic in parsed.kept:
            origin = "llm_mapped" if topic in mapped else "llm"
            valid.append({**common, "topic_id": topic, "topic_origin": origin})
        if not parsed.kept:
            valid.append({**common, "topic_id": short[0], "topic_origin": "shortlist_fallback"})
        reason = "not an ontology node or name" if parsed.reason == "json list" else parsed.reason
        rejected += [{"doc_id": doc_id, "topic_id": x, "reason": reason} for x in parsed.rejected]
    rejected_frame = pl.DataFrame(
        rejected, schema={"doc_id": pl.String, "topic_id": pl.String, "reason": pl.String}
    )
    return pl.DataFrame(valid, infer_schema_length=None), rejected_frame, stats
