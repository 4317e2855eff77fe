"""Deterministic, paper-shaped synthetic input: a topic DAG and a corpus (SABER at scale 1.0).

Everything is drawn with vectorized numpy from ``numpy.random.default_rng([seed, part])`` (one
independent stream per part), so a (config, seed) pair always gives the same frames and the
ontology does not depend on ``scale``. Generation is pure; only :func:`write_synthetic` touches
files (parquet, plus a JSON manifest).

Ontology (``synth_ontology``): one root, ``n_top`` top-level areas, then levels 2..6 whose sizes
follow ``LEVEL_SHARES``. Every node below level 1 draws a primary parent from the level above with
log-normal attachment weights (skewed branching, some inner nodes end as leaves); a share
``multi_parent_share`` of them also gets a second parent on that level (70 % from the same area,
else anywhere), so the result is a DAG, not a tree. Frame: ``node_id, name, parent_ids``.

Corpus (``synth_corpus``), one row per document, in the ``saber_core.inputs.corpus`` schema:

* ``domain``: the 5 SABER domains, balanced (counts differ by at most one); area ``a`` belongs to
  domain ``a mod 5``.
* ``topics``: ``k ∈ 3..8`` distinct node ids (P(k) = ``TOPIC_COUNT_P``). Node popularity is Zipf:
  ``w(n) = depth_factor(level) · (1 + rank(n))^(−topic_zipf)`` with a random rank permutation, so
  deep nodes dominate. The first topic is drawn ∝ w within the document's domain (90 %) or
  anywhere; each further topic comes from the first topic's level-2 subtree (50 %) or again from
  the domain, until ``k`` distinct topics are found.
* ``summary`` (20–30 words), ``problem`` (12–24 words), ``solution`` (30–50 words): pseudo-words
  from a ``vocab_size`` vocabulary with Zipf frequencies ``P(rank r) ∝ (r + 1)^(−word_zipf)``;
  summaries (40 %) and problems (20 %) mix in "signature" words of their topics, so summary
  Jaccard correlates with topic BMA. A share ``near_duplicate_share`` of problems copy another
  document's problem with one word replaced (problem Jaccard ≥ 0.8 for typical lengths), so
  near-duplicate exclusion has work to do. Problem texts are distinct.
* ``tag_paths``: the topics as a tagger would emit them for the published construction — full
  paths ``/Mathematics/<domain key>/<area>/…/<topic>`` along the primary parents (the first
  level is a published domain-map key of the area's domain, :data:`DOMAIN_KEYS`), every
  accepted ancestor listed too (each prefix below the root once per document, topics in order,
  shallow to deep); every fifth topic's title extends a sibling's (``X`` and ``X-Y``, as 1,820
  MathWorld titles do), so the published tag clean-up's immediate-successor check meets its
  defect;
* ``source`` = ``"synthetic"``, ``doc_id`` = ``syn-000000``…

Scale: ``scale = 1.0`` is the paper (283,000 documents, 1,000 queries); documents and queries
scale linearly, the ontology and vocabulary do not.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import polars as pl

from saber_core.signals.jaccard import STOP_WORDS

SYNTH_VERSION = "saber-synth-v2"
DOMAINS = ("Algebra", "Calculus", "Combinatorics", "Geometry", "Number Theory")
# The first level of the tag paths: one published domain-map key per domain (Combinatorics in
# turn under its three published keys), so the published tag → domain mapping applies as is.
DOMAIN_KEYS = (
    ("Algebra",),
    ("CalculusandAnalysis",),
    ("DiscreteMathematics", "ProbabilityandStatistics", "RecreationalMathematics"),
    ("Geometry",),
    ("NumberTheory",),
)
PAPER_DOCS = 283_000
PAPER_QUERIES = 1_000
PAPER_NODES = 17_100
# Shares of the non-root, non-area nodes on levels 2, 3, 4, 5 (level 6 takes the rest).
LEVEL_SHARES = (0.009, 0.07, 0.26, 0.40)
# Topic-popularity factor per level (root never a topic; deep nodes dominate).
DEPTH_FACTOR = (0.0, 0.02, 0.1, 0.4, 1.0, 1.0, 1.0)
TOPIC_COUNT_P = (0.15, 0.25, 0.25, 0.17, 0.10, 0.08)  # P(k) for k = 3..8
_SYLLABLES = tuple(c + v for c in "bdfgklmnprstvz" for v in "aeiou")
_PARTS = {"ontology": 1, "topics": 2, "text": 3, "domains": 4, "vocabulary": 5}


@dataclass(frozen=True)
class SynthConfig:
    """Knobs of the synthetic input; recorded verbatim in the manifest."""

    scale: float = 1.0
    seed: int = 0
    n_nodes: int = PAPER_NODES
    vocab_size: int = 20_000
    multi_parent_share: float = 0.07
    topic_zipf: float = 0.8
    word_zipf: float = 1.0
    near_duplicate_share: float = 0.005

    def __post_init__(self) -> None:
        if not self.scale > 0:
            raise ValueError(f"SynthConfig.scale must be > 0, got {self.scale}")
        if self.n_nodes < 40:
            raise ValueError(f"SynthConfig.n_nodes must be ≥ 40, got {self.n_nodes}")
        if self.vocab_size < 100:
            raise ValueError(f"SynthConfig.vocab_size must be ≥ 100, got {self.vocab_size}")

    @property
    def n_docs(self) -> int:
        """Documents: ``round(283,000 · scale)`` (at least 1)."""
        return max(1, round(PAPER_DOCS * self.scale))

    @property
    def n_queries(self) -> int:
        """Queries the pipeline should draw: ``round(1,000 · scale)`` (at least 1)."""
        return max(1, round(PAPER_QUERIES * self.scale))


@dataclass(frozen=True)
class SyntheticInput:
    """The generated frames and the config that made them."""

    config: SynthConfig
    ontology: pl.DataFrame  # node_id, name, parent_ids
    corpus: pl.DataFrame  # doc_id, problem, solution, source, domain, summary, topics

    @property
    def n_queries(self) -> int:
        """Queries to draw from this corpus (``config.n_queries``)."""
        return self.config.n_queries


def _rng(seed: int, part: str) -> np.random.Generator:
    return np.random.default_rng([seed, _PARTS[part]])


# ----------------------------------------------------------------------------------- ontology
@dataclass(frozen=True)
class _Tree:
    """Array form of the synthetic DAG (index 0 is the root)."""

    level: np.ndarray  # (N,) int
    parent: np.ndarray  # (N,) primary parent, -1 for the root
    second: np.ndarray  # (N,) second parent or -1
    area: np.ndarray  # (N,) level-1 ancestor via primary parents (-1 for the root)
    group: np.ndarray  # (N,) level-2 ancestor via primary parents (self's area id below)


def _level_sizes(n_nodes: int) -> list[int]:
    """Nodes per level: 1 root, ``max(5, round(12 · N / 17,100))`` areas, then LEVEL_SHARES."""
    n_top = max(5, round(12 * n_nodes / PAPER_NODES))
    rest = n_nodes - 1 - n_top
    sizes = [1, n_top] + [max(1, round(s * rest)) for s in LEVEL_SHARES]
    sizes.append(n_nodes - sum(sizes))
    if sizes[-1] < 1:
        raise ValueError(f"n_nodes = {n_nodes} is too small for the level layout")
    return sizes


def _tree(n_nodes: int, multi_parent_share: float, seed: int) -> _Tree:
    rng = _rng(seed, "ontology")
    sizes = _level_sizes(n_nodes)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    level = np.repeat(np.arange(len(sizes)), sizes)
    parent = np.full(n_nodes, -1, dtype=np.int64)
    second = np.full(n_nodes, -1, dtype=np.int64)
    area = np.full(n_nodes, -1, dtype=np.int64)
    group = np.full(n_nodes, -1, dtype=np.int64)
    parent[bounds[1] : bounds[2]] = 0
    area[bounds[1] : bounds[2]] = np.arange(sizes[1])
    for lv in range(2, len(sizes)):
        above = np.arange(bounds[lv - 1], bounds[lv])
        here = np.arange(bounds[lv], bounds[lv + 1])
        weights = rng.lognormal(0.0, 1.0, size=len(above))
        cdf = np.cumsum(weights)
        pick = np.searchsorted(cdf, rng.random(len(here)) * cdf[-1], side="right")
        parent[here] = above[np.minimum(pick, len(above) - 1)]
        area[here] = area[parent[here]]
        # Second parents: same area (70 %) or anywhere on the level above; never the primary.
        multi = here[rng.random(len(here)) < multi_parent_share]
        by_area = above[np.argsort(area[above], kind="stable")]
        lo = np.searchsorted(area[by_area], area[multi], side="left")
        hi = np.searchsorted(area[by_area], area[multi], side="right")
        same = by_area[
            np.minimum(lo + (rng.random(len(multi)) * (hi - lo)).astype(np.int64), hi - 1)
        ]
        anywhere = above[rng.integers(0, len(above), size=len(multi))]
        cand = np.where(rng.random(len(multi)) < 0.7, same, anywhere)
        retry = cand == parent[multi]
        cand[retry] = above[rng.integers(0, len(above), size=int(retry.sum()))]
        ok = cand != parent[multi]
        second[multi[ok]] = cand[ok]
    group[bounds[1] : bounds[2]] = np.arange(bounds[1], bounds[2])
    group[bounds[2] : bounds[3]] = np.arange(bounds[2], bounds[3])
    for lv in range(3, len(sizes)):
        here = np.arange(bounds[lv], bounds[lv + 1])
        group[here] = group[parent[here]]
    return _Tree(level=level, parent=parent, second=second, area=area, group=group)


def _node_ids(n: int) -> list[str]:
    width = max(5, len(str(n - 1)))
    return [f"T{i:0{width}d}" for i in range(n)]


def synth_ontology(
    n_nodes: int = PAPER_NODES, seed: int = 0, multi_parent_share: float = 0.07
) -> pl.DataFrame:
    """The synthetic topic DAG as an ontology frame ``node_id, name, parent_ids`` (root first).

    Usable as is by ``saber_core.ontology.dag.build_ontology``; node ids are ``T00000``…
    """
    tree = _tree(n_nodes, multi_parent_share, seed)
    ids = _node_ids(n_nodes)
    parents = [
        [ids[p]] + ([ids[s]] if s >= 0 else []) if p >= 0 else []
        for p, s in zip(tree.parent.tolist(), tree.second.tolist(), strict=True)
    ]
    names = ["Mathematics"] + [
        f"topic {lv}.{i}" for i, lv in enumerate(tree.level.tolist()) if i > 0
    ]
    return pl.DataFrame(
        {"node_id": ids, "name": names, "parent_ids": parents},
        schema={"node_id": pl.String, "name": pl.String, "parent_ids": pl.List(pl.String)},
    )


# ------------------------------------------------------------------------------------- topics
def _alias(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vose's alias table for a discrete distribution ∝ ``weights`` (all zero: uniform).

    Draw: ``i ~ U{0..n−1}``, keep ``i`` if ``U(0,1) < prob[i]`` else take ``alias[i]``.
    """
    n = len(weights)
    total = float(np.sum(weights))
    scaled = np.full(n, 1.0) if total <= 0 else np.asarray(weights, dtype=np.float64) * n / total
    prob = np.ones(n)
    alias = np.arange(n)
    small = [i for i in range(n) if scaled[i] < 1.0]
    large = [i for i in range(n) if scaled[i] >= 1.0]
    while small and large:
        s, g = small.pop(), large.pop()
        prob[s], alias[s] = scaled[s], g
        scaled[g] -= 1.0 - scaled[s]
        (small if scaled[g] < 1.0 else large).append(g)
    return prob, alias


class _Sampler:
    """Draw nodes ∝ ``weights`` restricted to a group, for many wanted groups at once.

    Nodes are sorted by group; each group's slice holds its own alias table, so one draw is two
    uniform numbers and two gathers (exact probabilities ``w_n / Σ_{m in group} w_m``).
    """

    def __init__(self, weights: np.ndarray, node_group: np.ndarray) -> None:
        self.order = np.argsort(node_group, kind="stable")
        self.groups, self.start, counts = np.unique(
            node_group[self.order], return_index=True, return_counts=True
        )
        self.count = counts
        self.prob = np.ones(len(weights))
        self.alias = np.arange(len(weights))
        w = weights[self.order]
        for s, c in zip(self.start.tolist(), counts.tolist(), strict=True):
            prob, alias = _alias(w[s : s + c])
            self.prob[s : s + c] = prob
            self.alias[s : s + c] = alias + s

    def draw(self, rng: np.random.Generator, wanted: np.ndarray) -> np.ndarray:
        """One node index per entry of ``wanted`` (a group label that must exist)."""
        g = np.searchsorted(self.groups, wanted)
        if np.any(g >= len(self.groups)) or np.any(
            self.groups[np.minimum(g, len(self.groups) - 1)] != wanted
        ):
            raise ValueError("a wanted group has no nodes")
        pos = self.start[g] + (rng.random(len(wanted)) * self.count[g]).astype(np.int64)
        pos = np.where(rng.random(len(wanted)) < self.prob[pos], pos, self.alias[pos])
        return self.order[pos]


def _first_k_distinct(cand: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: mask of the first ``k`` distinct values (column order) and whether ``k`` exist."""
    srt = np.argsort(cand, axis=1, kind="stable")
    sv = np.take_along_axis(cand, srt, axis=1)
    new = np.ones_like(sv, dtype=bool)
    new[:, 1:] = sv[:, 1:] != sv[:, :-1]
    first = np.empty_like(new)
    np.put_along_axis(first, srt, new, axis=1)
    keep = first & (np.cumsum(first, axis=1) <= k[:, None])
    return keep, keep.sum(axis=1) == k


def _doc_topics(
    tree: _Tree, domain: np.ndarray, topic_zipf: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Topics of every document as CSR ``(ptr (D+1,), topics (nnz,))`` of node indices."""
    rng = _rng(seed, "topics")
    n_nodes, n_docs = len(tree.level), len(domain)
    depth = np.asarray(DEPTH_FACTOR)[np.minimum(tree.level, len(DEPTH_FACTOR) - 1)]
    weights = depth * (1.0 + rng.permutation(n_nodes)) ** (-topic_zipf)
    node_domain = np.where(tree.area >= 0, tree.area % len(DOMAINS), -1)
    k = 3 + rng.choice(len(TOPIC_COUNT_P), size=n_docs, p=TOPIC_COUNT_P)
    by_domain = _Sampler(weights, node_domain)
    anywhere = _Sampler(weights, np.zeros(n_nodes, dtype=np.int64))
    by_subtree = _Sampler(weights, tree.group)
    n_cand = 16
    topics = np.zeros((n_docs, n_cand), dtype=np.int64)
    keep = np.zeros((n_docs, n_cand), dtype=bool)
    todo = np.arange(n_docs)
    while len(todo):
        m = len(todo)

        def from_domain(size: int, rows: np.ndarray) -> np.ndarray:
            m = len(rows)
            own = by_domain.draw(rng, np.repeat(domain[rows], size))
            other = anywhere.draw(rng, np.zeros(m * size, dtype=np.int64))
            return np.where(rng.random(m * size) < 0.9, own, other).reshape(m, size)

        anchor = from_domain(1, todo)[:, 0]
        near = by_subtree.draw(rng, np.repeat(tree.group[anchor], n_cand - 1)).reshape(m, -1)
        cand = np.where(rng.random((m, n_cand - 1)) < 0.5, near, from_domain(n_cand - 1, todo))
        cand = np.concatenate([anchor[:, None], cand], axis=1)
        kept, ok = _first_k_distinct(cand, k[todo])
        topics[todo[ok]] = cand[ok]
        keep[todo[ok]] = kept[ok]
        todo = todo[~ok]
    ptr = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(keep.sum(axis=1), out=ptr[1:])
    return ptr, topics[keep]


def _node_paths(tree: _Tree) -> tuple[list[str], list[np.ndarray]]:
    """Tag paths and chains: ``paths[i]`` for every node ``i`` and then one entry per domain
    key (:data:`DOMAIN_KEYS`, the level between the root and the areas); ``chains[i]`` the
    entries below the root down to node ``i`` along the primary parents."""
    n = len(tree.level)
    keys = [key for group in DOMAIN_KEYS for key in group]
    paths = [""] * n + [f"/Mathematics/{key}" for key in keys]
    chains = [np.zeros(0, dtype=np.int64)] * n
    per_domain = [0] * len(DOMAINS)
    last_child: dict[int, str] = {}
    for node in np.argsort(tree.level, kind="stable").tolist():
        parent = int(tree.parent[node])
        if parent < 0:
            paths[node] = "/Mathematics"
        elif tree.level[node] == 1:
            domain = int(tree.area[node]) % len(DOMAINS)
            group = DOMAIN_KEYS[domain]
            key = n + keys.index(group[per_domain[domain] % len(group)])
            per_domain[domain] += 1
            paths[node] = f"{paths[key]}/area {int(tree.area[node])}"
            chains[node] = np.array([key, node], dtype=np.int64)
        else:
            title = f"topic {int(tree.level[node])}.{node}"
            if node % 5 == 0 and parent in last_child:  # "X" and "X-Y" siblings, as in MathWorld
                title = f"{last_child[parent]}-{node}"
            last_child[parent] = title
            paths[node] = f"{paths[parent]}/{title}"
            chains[node] = np.append(chains[parent], node)
    return paths, chains


def _tag_paths(tree: _Tree, ptr: np.ndarray, topics: np.ndarray) -> pl.Series:
    """Every document's raw tag list: each prefix of its topics' paths below the root, once,
    in topic order (shallow to deep)."""
    paths, chains = _node_paths(tree)
    doc = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    lengths = np.array([len(chains[t]) for t in topics.tolist()], dtype=np.int64)
    nodes = np.concatenate([chains[t] for t in topics.tolist()]) if len(topics) else topics
    names = pl.Series("path", paths, dtype=pl.String)
    pairs = pl.DataFrame({"doc": np.repeat(doc, lengths), "node": nodes}).unique(
        maintain_order=True
    )
    return (
        pairs.with_columns(tag=names.gather(pairs["node"]))
        .group_by("doc", maintain_order=True)
        .agg("tag")["tag"]
        .alias("tag_paths")
    )


# --------------------------------------------------------------------------------------- text
def synth_vocabulary(vocab_size: int = 20_000, seed: int = 0) -> list[str]:
    """``vocab_size`` distinct pseudo-words (2–4 CV syllables), none a stop word; index = rank.

    Each word is a single token under the Jaccard tokenizer (lower-case letters only).
    """
    rng = _rng(seed, "vocabulary")
    stop = set(STOP_WORDS)
    words: dict[str, None] = {}
    while len(words) < vocab_size:
        n = 2 * vocab_size
        n_syll = rng.integers(2, 5, size=n)
        syll = rng.integers(0, len(_SYLLABLES), size=(n, 4))
        table = np.asarray(_SYLLABLES, dtype=object)[syll]
        for row, count in zip(table.tolist(), n_syll.tolist(), strict=True):
            word = "".join(row[:count])
            if word not in stop:
                words.setdefault(word, None)
    return list(words)[:vocab_size]


def _zipf_draw(
    rng: np.random.Generator, n_items: int, s: float, shape: tuple[int, ...]
) -> np.ndarray:
    """Ranks ``r ∈ [0, n_items)`` with ``P(r) ∝ (r + 1)^(−s)`` (alias method)."""
    prob, alias = _alias((1.0 + np.arange(n_items)) ** (-s))
    i = rng.integers(0, n_items, size=shape)
    return np.where(rng.random(shape) < prob[i], i, alias[i])


def _word_matrix(
    rng: np.random.Generator,
    n_docs: int,
    length: tuple[int, int],
    vocab_size: int,
    word_zipf: float,
    topical_share: float,
    ptr: np.ndarray,
    topics: np.ndarray,
    signature: np.ndarray,
) -> np.ndarray:
    """(D, max_len) word ranks; positions past a row's length hold ``vocab_size`` (padding)."""
    lo, hi = length
    words = _zipf_draw(rng, vocab_size, word_zipf, (n_docs, hi))
    sizes = np.diff(ptr)
    slot = (rng.random((n_docs, hi)) * sizes[:, None]).astype(np.int64)
    topic = topics[ptr[:-1, None] + slot]
    sig = signature[topic, rng.integers(0, signature.shape[1], size=(n_docs, hi))]
    words = np.where(rng.random((n_docs, hi)) < topical_share, sig, words)
    n_words = rng.integers(lo, hi + 1, size=n_docs)
    words[np.arange(hi)[None, :] >= n_words[:, None]] = vocab_size
    return words


def _texts(vocabulary: pl.Series, words: np.ndarray) -> pl.Series:
    """Join each row of word ranks with single spaces (padding ranks index a null and vanish)."""
    flat = vocabulary.gather(words.ravel())
    return flat.reshape(words.shape).arr.join(" ", ignore_nulls=True)


def synth_corpus(ontology: pl.DataFrame, config: SynthConfig) -> pl.DataFrame:
    """The synthetic corpus for ``ontology`` = ``synth_ontology(config.n_nodes, config.seed, …)``.

    Columns ``doc_id, problem, solution, source, domain, summary, topics`` (module docstring).
    """
    seed, n_docs = config.seed, config.n_docs
    tree = _tree(config.n_nodes, config.multi_parent_share, seed)
    if ontology.height != len(tree.level):
        raise ValueError("ontology does not match config.n_nodes")
    dom_rng = _rng(seed, "domains")
    domain = dom_rng.permutation(np.arange(n_docs) % len(DOMAINS))
    ptr, topics = _doc_topics(tree, domain, config.topic_zipf, seed)

    rng = _rng(seed, "text")
    v = config.vocab_size
    signature = rng.integers(min(100, v // 10), v, size=(len(tree.level), 4))
    vocab = pl.Series("w", [*synth_vocabulary(v, seed), None], dtype=pl.String)
    args = (v, config.word_zipf)
    summary = _word_matrix(rng, n_docs, (20, 30), *args, 0.4, ptr, topics, signature)
    problem = _word_matrix(rng, n_docs, (12, 24), *args, 0.2, ptr, topics, signature)
    solution = _word_matrix(rng, n_docs, (30, 50), *args, 0.1, ptr, topics, signature)
    # Near-duplicate problems: a copy of another document's problem with one word replaced.
    n_dup = round(config.near_duplicate_share * n_docs) if n_docs > 1 else 0
    if n_dup:
        dups = rng.choice(n_docs, size=n_dup, replace=False)
        src = (dups + rng.integers(1, n_docs, size=n_dup)) % n_docs
        problem[dups] = problem[src]
        length = (problem[dups] < v).sum(axis=1)
        pos = (rng.random(n_dup) * length).astype(np.int64)
        old = problem[dups, pos]
        problem[dups, pos] = (old + rng.integers(1, v, size=n_dup)) % v

    tag_paths = _tag_paths(tree, ptr, topics)
    topic_ids = ontology["node_id"].gather(topics)
    topic_lists = (
        pl.DataFrame({"doc": np.repeat(np.arange(n_docs), np.diff(ptr)), "t": topic_ids})
        .group_by("doc", maintain_order=True)
        .agg(pl.col("t"))["t"]
    )
    frame = pl.DataFrame(
        {
            "doc_id": [f"syn-{i:06d}" for i in range(n_docs)],
            "problem": _texts(vocab, problem),
            "solution": _texts(vocab, solution),
            "source": pl.repeat("synthetic", n_docs, eager=True, dtype=pl.String),
            "domain": pl.Series(np.asarray(DOMAINS, dtype=object)[domain], dtype=pl.String),
            "summary": _texts(vocab, summary),
            "topics": topic_lists,
            "tag_paths": tag_paths,
        }
    )
    # Distinct problem texts: a repeated text (vanishingly rare) gets its document number added.
    repeated = frame["problem"].is_duplicated() & ~frame["problem"].is_first_distinct()
    if repeated.any():
        frame = frame.with_columns(
            pl.when(repeated)
            .then(pl.col("problem") + " n" + pl.col("doc_id").str.slice(4))
            .otherwise(pl.col("problem"))
        )
    return frame


def synthesize(scale: float = 1.0, seed: int = 0, **overrides: float) -> SyntheticInput:
    """Generate the ontology and corpus frames for ``SynthConfig(scale, seed, **overrides)``."""
    config = SynthConfig(scale=scale, seed=seed, **overrides)
    ontology = synth_ontology(config.n_nodes, seed, config.multi_parent_share)
    return SyntheticInput(config, ontology, synth_corpus(ontology, config))


def write_synthetic(
    out_dir: str | Path, scale: float = 1.0, seed: int = 0, **overrides: float
) -> dict[str, Path]:
    """Generate and write ``ontology.parquet``, ``corpus.parquet`` and ``manifest.json``.

    Returns ``{"ontology": path, "corpus": path, "manifest": path}``. The manifest records the
    config, ``SYNTH_VERSION`` and the row counts (``n_queries`` is what the pipeline should
    draw).
    """
    data = synthesize(scale, seed, **overrides)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "ontology": out / "ontology.parquet",
        "corpus": out / "corpus.parquet",
        "manifest": out / "manifest.json",
    }
    data.ontology.write_parquet(paths["ontology"])
    data.corpus.write_parquet(paths["corpus"])
    manifest = {
        "version": SYNTH_VERSION,
        "config": asdict(data.config),
        "n_nodes": data.ontology.height,
        "n_docs": data.corpus.height,
        "n_queries": data.n_queries,
        "domains": list(DOMAINS),
    }
    paths["manifest"].write_text(json.dumps(manifest, indent=2) + "\n")
    return paths
