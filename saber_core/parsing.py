"""Strict parsers for LLM answers: judge verdicts, topic lists and solution summaries.

Every parser returns a value or ``None`` together with a reason, never raises on model output:
an unparsable answer is a recorded drop, never a crash and never a guessed label.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

BOXED = re.compile(r"\\boxed\{\s*([^{}]*?)\s*\}")
BARE_CHOICE = re.compile(r"^\s*\(?([12])\)?\s*\.?\s*$")
JSON_LIST = re.compile(r"\[[^\[\]]*\]", re.DOTALL)
WORD = re.compile(r"[^\W_]+")


def parse_judge_answer(text: str | None) -> tuple[int | None, str]:
    """``1`` or ``2`` from an answer, or ``None`` with the reason.

    Accepted: every ``\\boxed{…}`` in the answer holds the same choice (1 or 2), or the whole
    answer is a bare ``1``/``2``. Rejected: empty, no boxed answer (prose), both choices boxed,
    anything else boxed.
    """
    if text is None or not text.strip():
        return None, "empty answer"
    boxed = BOXED.findall(text)
    if boxed:
        values = set(boxed)
        if values <= {"1", "2"}:
            if len(values) == 2:
                return None, "both answers boxed"
            return int(values.pop()), "boxed"
        return None, f"unexpected boxed content {sorted(values)}"
    bare = BARE_CHOICE.match(text)
    if bare:
        return int(bare.group(1)), "bare digit"
    return None, "no boxed answer"


def choice_probability(logprobs: Mapping[str, float] | None) -> float | None:
    """p(choice "1") from the log-probabilities of "1" and "2": ``e^l1 / (e^l1 + e^l2)``."""
    if not logprobs or "1" not in logprobs or "2" not in logprobs:
        return None
    l1, l2 = float(logprobs["1"]), float(logprobs["2"])
    if math.isinf(l1) and math.isinf(l2):
        return None
    top = max(l1, l2)
    e1, e2 = math.exp(l1 - top), math.exp(l2 - top)
    return e1 / (e1 + e2)


def combine_orders(p_forward: float | None, p_reverse: float | None) -> float | None:
    """Position-debiased p(first wins) from both orders: ``(p(a|a,b) + 1 − p(b|b,a)) / 2``.

    ``p_reverse`` is the probability that the *first* shown candidate (b) wins in the swapped
    order. With one side missing, the other side is used alone.
    """
    if p_forward is None and p_reverse is None:
        return None
    if p_reverse is None:
        return p_forward
    if p_forward is None:
        return 1.0 - p_reverse
    return 0.5 * (p_forward + 1.0 - p_reverse)


@dataclass(frozen=True)
class TopicParse:
    """Parsed topic ids: kept as given, mapped from an unknown id/name, and rejected strings."""

    kept: tuple[str, ...]
    mapped: tuple[tuple[str, str], ...]  # (what the model wrote, the node it was mapped to)
    rejected: tuple[str, ...]
    reason: str


def _words(text: str) -> set[str]:
    return set(WORD.findall(text.lower()))


def parse_topics(
    text: str | None,
    node_names: Mapping[str, str],
    max_topics: int = 8,
    min_name_overlap: float = 0.6,
) -> TopicParse:
    """Topic ids from a model answer (a JSON list), validated against the ontology.

    An item that is a node id is kept. Otherwise it is mapped to the node whose id or name equals
    it case-insensitively, or else whose name's word set has Jaccard ≥ ``min_name_overlap`` with
    it (best first); failing that it is rejected. Without a JSON list, node ids written verbatim
    in the answer are kept. At most ``max_topics`` ids are kept, in answer order.
    """
    if text is None or not text.strip():
        return TopicParse((), (), (), "empty answer")
    items: list[str] = []
    reason = "json list"
    match = JSON_LIST.search(text)
    if match:
        try:
            items = [str(x).strip() for x in json.loads(match.group(0)) if str(x).strip()]
        except (json.JSONDecodeError, TypeError):
            match = None
    if not match:
        reason = "no JSON list; ids found verbatim"
        items = [
            node for node in node_names if re.search(rf"(?<![\w:]){re.escape(node)}(?!\w)", text)
        ]
    lower = {k.lower(): k for k in node_names} | {v.lower(): k for k, v in node_names.items()}
    name_words = {k: _words(v) for k, v in node_names.items()}
    kept: list[str] = []
    mapped: list[tuple[str, str]] = []
    rejected: list[str] = []
    for item in items:
        if item in node_names:
            target = item
        elif item.lower() in lower:
            target = lower[item.lower()]
        else:
            words = _words(item)
            scores = {
                k: len(words & w) / len(words | w) for k, w in name_words.items() if words and w
            }
            best = max(scores, key=lambda k: scores[k], default=None)
            target = best if best is not None and scores[best] >= min_name_overlap else None
        if target is None:
            rejected.append(item)
            continue
        if target != item:
            mapped.append((item, target))
        if target not in kept:
            kept.append(target)
    if not items:
        reason = "no topic ids in answer"
    return TopicParse(tuple(kept[:max_topics]), tuple(mapped), tuple(rejected), reason)


def clean_summary(
    text: str | None, min_words: int = 4, max_words: int = 80
) -> tuple[str | None, str]:
    """A cleaned summary, or ``None`` with the reason.

    Takes the first non-empty paragraph, drops a leading ``Hint:``/``Summary:`` label and
    surrounding quotes, folds white space, and cuts at the last sentence end within
    ``max_words`` words (or hard at ``max_words``). Fewer than ``min_words`` words is rejected.
    """
    if text is None or not text.strip():
        return None, "empty answer"
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]
    summary = re.sub(r"^(hint|summary|idea)\s*:\s*", "", paragraphs[0], flags=re.IGNORECASE)
    summary = " ".join(summary.split()).strip("\"'“” ")
    words = summary.split()
    if len(words) < min_words:
        return None, f"too short ({len(words)} words)"
    if len(words) > max_words:
        cut = " ".join(words[:max_words])
        end = max(cut.rfind(". "), cut.rfind("! "), cut.rfind("? "))
        summary = cut[: end + 1] if end > 0 else cut
        return summary, "truncated"
    return summary, "ok"


def render_shortlist(node_ids: Sequence[str], node_names: Mapping[str, str]) -> str:
    """One ``id: name`` line per shortlisted node (the topics prompt's candidate list)."""
    return "\n".join(f"{node}: {node_names[node]}" for node in node_ids)
