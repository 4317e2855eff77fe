"""Style of the pool candidates as the judge sees them, and the style-controlled Bradley–Terry
fit on the build's judgments: for ``bt_ratings`` (``rating.style_control``) and the validity
report's "Style" section (docs/validity.md)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from saber_assets.tables import corpus_texts
from saber_config import PlanReads
from saber_core.rating.bradley_terry import fit_bradley_terry, rescale_ratings
from saber_core.rating.bradley_terry_style import StyleFit, fit_style_bradley_terry, rank_changes
from saber_core.rating.comparisons import Comparisons
from saber_core.rating.style import (
    BASIC_FEATURES,
    NgramStyle,
    basic_features,
    cross_validated_auc,
    standardize,
)
from saber_store.database import DuckDBStore
from saber_store.sources import alternative_summaries

MIN_STYLE_TEXTS = 20  # fewer LLM- or human-written texts than this: no n-gram score


def own_summary_origin(store: DuckDBStore) -> str:
    """``llm`` if the build's summaries are LLM-written, else ``human``."""
    return "llm" if (store.read_table("summaries")["summary_origin"] == "llm").any() else "human"


def style_training_texts(
    plan: PlanReads, store: DuckDBStore, corpus: pl.DataFrame
) -> tuple[list[str], list[str], str]:
    """LLM-written and human-written texts of the same documents for the n-gram score, and
    where they come from: the LLM-written summary recipe (the build's summaries when LLM-written,
    else recipe sensitivity's other recipe) against the corpus' human-written solutions. Empty
    lists and the reason when the build has no LLM-written recipe."""
    if own_summary_origin(store) == "llm":
        llm = store.read_table("summaries").filter(pl.col("summary_origin") == "llm")
        source = "the build's LLM-written summaries"
    else:
        llm, _, source = alternative_summaries(
            plan.validity.recipe_summaries, plan.inputs.corpus, "human", corpus
        )
        if llm is None:
            return [], [], source
    both = llm.select("doc_id", "summary").join(corpus.select("doc_id", "solution"), on="doc_id")
    both = both.sort("doc_id")
    return both["summary"].to_list(), both["solution"].to_list(), source


@dataclass(frozen=True)
class CandidateStyle:
    """Standardized features ``z`` (Q, n, K) of every pool candidate, their ``names``, and
    ``notes`` (the n-gram training texts and cross-validated AUC or why it is left out, and the
    features left out for not varying)."""

    names: list[str]
    z: np.ndarray
    notes: dict


def candidate_style(plan: PlanReads, store: DuckDBStore, docs: np.ndarray) -> CandidateStyle:
    """Style of the text the judge sees for each candidate of ``docs`` (Q, n) (its corpus full
    text), standardized over every pool slot (:mod:`saber_core.rating.style`)."""
    corpus = store.read_table("corpus")
    texts = corpus_texts(corpus)
    shown = [texts[d] for d in docs.ravel()]
    raw, names = basic_features(shown), list(BASIC_FEATURES)
    llm, human, source = style_training_texts(plan, store, corpus)
    notes: dict = {"ngram_texts": f"{source} vs the corpus' human solutions"}
    if min(len(llm), len(human)) >= MIN_STYLE_TEXTS:
        raw = np.column_stack([raw, NgramStyle.fit(llm, human).score(shown)])
        names.append("ngram_style")
        notes["ngram_cv_auc"] = cross_validated_auc(llm, human, seed=plan.seed)
        notes["ngram_texts_per_class"] = len(llm)
    else:
        notes["ngram_style"] = f"left out: {len(llm)} LLM-written texts ({source})"
    z, varies = standardize(raw)
    notes["constant_features_left_out"] = [n for n, v in zip(names, varies, strict=True) if not v]
    kept = [n for n, v in zip(names, varies, strict=True) if v]
    return CandidateStyle(kept, z[:, varies].reshape(*docs.shape, len(kept)), notes)


def style_free(table: pl.DataFrame, fit: StyleFit) -> pl.DataFrame:
    """A ``rating_table`` with the style-free strengths ``θ`` and their min–max ratings."""
    return table.with_columns(
        pl.Series("strength", fit.theta.ravel()),
        pl.Series("rating", rescale_ratings(fit.theta).ravel()),
    )


def coefficient_figures(style: CandidateStyle, fit: StyleFit) -> dict:
    """Per feature ``β``, its 95% interval and variance share; the share of all features."""
    per = {
        name: {
            "beta": float(fit.beta[k]),
            "lower": float(fit.lower[k]),
            "upper": float(fit.upper[k]),
            "variance_share": float(fit.variance_share[k]),
        }
        for k, name in enumerate(style.names)
    }
    return {"coefficients": per, "total_variance_share": fit.total_share}


def style_report(
    plan: PlanReads, store: DuckDBStore, docs: np.ndarray, comparisons: Comparisons
) -> dict:
    """The validity report's "Style" figures: the coefficients (:func:`coefficient_figures`),
    the features' notes, and how the style-free strengths rank the candidates against the plain
    fit (mean within-query Spearman, candidates whose rank within their query changes)."""
    c = plan.rating.c
    style = candidate_style(plan, store, docs)
    fit = fit_style_bradley_terry(comparisons, style.z, C=c)
    rho, changed = rank_changes(fit_bradley_terry(comparisons, C=c), fit.theta)
    return {
        "style_control": plan.rating.style_control,
        **coefficient_figures(style, fit),
        "plain_vs_style_free_spearman": rho,
        "n_rank_changes": changed,
        "n_candidates": int(docs.size),
        **style.notes,
    }
