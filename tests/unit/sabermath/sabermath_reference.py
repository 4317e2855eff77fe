"""Brute-force references for the saber_core.sabermath tests.

Written from docs/sabermath.md in plain Python — nested dicts, lists, sets,
strings and loops over pairs — and sharing no code with saber_core.sabermath, so that an
agreement between the two is evidence and not a tautology. numpy appears only where the method
itself prescribes it (float16 storage, ``np.log`` as the published ``informational_content``,
``np.random.default_rng(seed).choice`` for the pools).
"""

from __future__ import annotations

import math
import random

import numpy as np

EPS = 1e-12


# ------------------------------------------------------------------------ §1 frequency tree
def frequency_tree(tag_rows):
    """§1 by walking every tag occurrence down a dict tree; returns
    ``{path: (idx, count)}`` and the total number of tag occurrences."""
    root = {"links": []}
    total = 0
    next_idx = 0
    for tags in tag_rows:
        if tags is None:
            continue
        for tag in tags:
            total += 1
            node = root
            for title in [t for t in tag.split("/") if t]:
                match = [child for child in node["links"] if child["title"] == title]
                if match:
                    node = match[0]
                else:
                    child = {"title": title, "idx": next_idx, "count": 0, "links": []}
                    next_idx += 1
                    node["links"].append(child)
                    node = child
                node["count"] += 1
    nodes = {}

    def walk(node, path):
        for child in node["links"]:
            child_path = path + "/" + child["title"]
            nodes[child_path] = (child["idx"], child["count"])
            walk(child, child_path)

    walk(root, "")
    return nodes, total


def information_content(count, total):
    """§3: −ln(max(p, 1e-12)) with p = count / total (np.log on a Python float)."""
    return -np.log(max(count / total, EPS))


# ---------------------------------------------------------------------------- §2 clean-up
def clean_published(tags):
    """§2: dedupe, sort; drop a tag when the NEXT one starts with ``tag.rstrip('/') + '/'``."""
    ordered = sorted(set(tags))
    kept = []
    for i, tag in enumerate(ordered):
        if i + 1 < len(ordered) and ordered[i + 1].startswith(tag.rstrip("/") + "/"):
            continue
        kept.append(tag)
    return kept


def clean_fixed(tags):
    """§2 fix: drop every tag that is a proper path-prefix of another tag of the set."""
    ordered = sorted(set(tags))
    return [
        tag
        for tag in ordered
        if not any(other != tag and other.startswith(tag.rstrip("/") + "/") for other in ordered)
    ]


# ------------------------------------------------------------------------------- §4 Lin
def lin_matrix(nodes, total, root_fix=False):
    """§4 dense Lin: LCA = longest common path prefix (of the title tuples)."""
    by_idx = {idx: path for path, (idx, _) in nodes.items()}
    size = len(by_idx)
    ic = {path: information_content(count, total) for path, (_, count) in nodes.items()}
    matrix = np.zeros((size, size))
    for i in range(size):
        for j in range(size):
            a, b = by_idx[i].split("/")[1:], by_idx[j].split("/")[1:]
            common = 0
            while common < min(len(a), len(b)) and a[common] == b[common]:
                common += 1
            lca = "/" + "/".join(a[:common])
            value = (2 * ic[lca]) / (ic[by_idx[i]] + ic[by_idx[j]] + EPS)
            matrix[i, j] = 1.0 if (root_fix and i == j) else value
    return matrix


# ------------------------------------------------------------------------------- §5 BMA
def bma(matrix, a_list, b_list):
    """§5 pooled BMA, the C loop: two sums from 0.0, divided separately, then added."""
    if not a_list or not b_list:
        return 0.0
    n = len(a_list) + len(b_list)
    first = 0.0
    for a in a_list:
        first += max(matrix[a][b] for b in b_list)
    second = 0.0
    for b in b_list:
        second += max(matrix[b][a] for a in a_list)
    return first / n + second / n


# --------------------------------------------------------------------------- §6 Jaccard
MATH_WORDS = (
    "let assume consider given suppose find compute solve show determine value expression "
    "equation result step term method approach solution thus hence therefore so then if and or "
    "but theorem lemma"
).split()
TOKEN_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789^_")


def tokens(text, stop_words):
    """§6 tokenizer by a character loop: lower-case, runs of ASCII letters/digits/^/_."""
    found, current = set(), ""
    for char in text.lower() + " ":
        if char in TOKEN_CHARS:
            current += char
        else:
            if current and current not in stop_words:
                found.add(current)
            current = ""
    return found


def jaccard(a, b, empty_fix=False):
    """§6: |A∩B| / |A∪B|; two empty sets 1.0 (0.0 with the fix)."""
    if not a and not b:
        return 0.0 if empty_fix else 1.0
    return len(a & b) / len(a | b)


# ---------------------------------------------------------------------------- §7 closed form
def threshold_closed_form(values, quantile):
    """§7 closed form: the ceil(q·M)-th smallest finite value + 2⁻⁴¹ (1 − 2⁻⁴¹ at 1)."""
    finite = sorted(float(v) for v in values if np.isfinite(v))
    value = finite[math.ceil(quantile * len(finite)) - 1]
    return 1 - 2**-41 if value == 1 else value + 2**-41


# ---------------------------------------------------------------------------- §8 selection
def select(rows, bma16, jaccard16, bma_threshold, jaccard_threshold, per_group, seed):
    """§8 row by row: groups under float16 comparison, eligibility, pools drawn in order."""
    high_b_cut = float(np.float16(bma_threshold))
    high_j_cut = float(np.float16(jaccard_threshold))
    rng = np.random.default_rng(seed)
    counts, targets, pools = [], [], []
    for i, row in enumerate(rows):
        groups = ([], [], [])
        for j in range(len(bma16[i])):
            high_b = j != row and float(bma16[i][j]) >= high_b_cut
            high_j = j != row and float(jaccard16[i][j]) >= high_j_cut
            if high_b and not high_j:
                groups[0].append(j)
            elif high_j and not high_b:
                groups[1].append(j)
            elif high_b and high_j:
                groups[2].append(j)
        counts.append([len(g) for g in groups])
        if all(len(g) >= per_group for g in groups):
            targets.append(row)
            pool = []
            for group in groups:
                pool += rng.choice(np.array(group), size=per_group, replace=False).tolist()
            pools.append(pool)
    return counts, targets, pools


# ------------------------------------------------------------------------ §9 final sampler
DOMAINS = {
    "Algebra": "Algebra",
    "NumberTheory": "Number Theory",
    "Geometry": "Geometry",
    "CalculusandAnalysis": "Calculus and Analysis",
    "DiscreteMathematics": "Combinatorics",
    "ProbabilityandStatistics": "Combinatorics",
    "RecreationalMathematics": "Combinatorics",
}


def final_sample(domain_lists, quotas, seed):
    """§9 with the module-level ``random`` (state restored afterwards)."""
    saved = random.getstate()
    try:
        random.seed(seed)
        buckets = {key: [] for key, _ in quotas}
        for i, domains in enumerate(domain_lists):
            key = tuple(sorted(domains))
            if key in buckets:
                buckets[key].append(i)
        chosen = []
        for key, quota in quotas:
            chosen += random.sample(buckets[key], quota)
        return chosen
    finally:
        random.setstate(saved)


# ---------------------------------------------------------------------------- §10 Swiss
def swiss(candidate_ids, decide, rounds, seed, batch_size=200, window=150):
    """§10 as the published driver: dicts of string ids, a list of played pairs per target.

    ``decide(round, attempt, target, id1, id2)`` → 1, 2 or None (failed). Returns per round and
    target the scheduled pairs ``(id1, id2)`` in order, the recorded results
    ``{(id1, id2): winner}``, the ids without a game, and the final scores.
    """
    shuffler = random.Random(seed)
    targets = list(range(len(candidate_ids)))
    scores = {t: {c: 0 for c in candidate_ids[t]} for t in targets}
    played = {t: [] for t in targets}
    schedule, results, idle = {}, {}, {}
    for start in range(0, len(targets), batch_size):
        batch = targets[start : start + batch_size]
        for r in range(rounds):
            new = {}
            for t in batch:
                items = list(scores[t].keys())
                shuffler.shuffle(items)
                ordered = sorted(items, key=lambda x, t=t: scores[t][x])
                used, pairs = set(), []
                for i, player in enumerate(ordered):
                    if i > window or player in used:  # published: `i > end`, end = 150
                        continue
                    for opponent in ordered[i + 1 : window]:
                        if opponent in used:
                            continue
                        if (player, opponent) in played[t] or (opponent, player) in played[t]:
                            continue
                        pairs.append((player, opponent))
                        used.add(player)
                        used.add(opponent)
                        break
                new[t] = [tuple(sorted(p)) for p in pairs]
                played[t].extend(new[t])
                schedule[(r, t)] = new[t]
                idle[(r, t)] = {c for c in candidate_ids[t] if c not in used}
            failed = []
            for t in batch:
                for id1, id2 in new[t]:
                    winner = decide(r, 0, t, id1, id2)
                    if winner is None:
                        failed.append((t, id1, id2))
                    else:
                        scores[t][id1 if winner == 1 else id2] += 1
                        results[(r, t, id1, id2)] = winner
            for t, id1, id2 in failed:
                winner = decide(r, 1, t, id1, id2)
                if winner is not None:
                    scores[t][id1 if winner == 1 else id2] += 1
                    results[(r, t, id1, id2)] = winner
    return schedule, results, idle, scores
