"""Test doubles: a scripted LLM backend that counts its calls (the recorded-fixture variant)."""

import hashlib
import re
import time
from collections import Counter
from collections.abc import Sequence

from pydantic import Field

from saber_compute.llm.interface import LLMRequest, LLMResult
from saber_llm.base import LLMBackend

CALLS: Counter = Counter()


def _digest(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


class ScriptedBackend(LLMBackend):
    """Deterministic answers by prompt kind; counts backend calls per prompt id in ``CALLS``.

    judge: ``\\boxed{1}`` or ``\\boxed{2}`` from a hash of the candidate texts, with choice
    log-probs; summary: a fixed hint built from the problem's words; topics: the first two
    shortlisted ids as a JSON list. ``garbage`` maps a substring of the rendered prompt to a raw
    answer returned instead (to test parsing of bad output).
    """

    name: str = "scripted"
    garbage: dict[str, str] = Field(default_factory=dict)
    delay_s: float = 0.0

    def identity(self) -> dict[str, str]:
        return {"backend": "scripted", "model": self.name}

    def generate(self, requests: Sequence[LLMRequest]) -> list[LLMResult]:
        out = []
        for r in requests:
            time.sleep(self.delay_s)
            CALLS[r.prompt_id.split("@")[0]] += 1
            text = "\n".join(m.content for m in r.messages)
            bad = [v for k, v in self.garbage.items() if k in text]
            if bad:
                out.append(LLMResult(text=bad[0], response_id=f"r{CALLS.total()}"))
                continue
            if r.prompt_id.startswith("judge"):
                one = _digest(text) % 2 == 0
                lp = {"1": -0.2, "2": -1.8} if one else {"1": -1.8, "2": -0.2}
                out.append(
                    LLMResult(
                        text=f"\\boxed{{{1 if one else 2}}}",
                        choice_logprobs=lp,
                        response_id=f"r{CALLS.total()}",
                    )
                )
            elif r.prompt_id.startswith("summary"):
                words = re.findall(r"[a-z]+", text.split("Problem:")[1].lower())[:6]
                out.append(
                    LLMResult(
                        text="Consider " + " ".join(words) + " and argue by cases.",
                        response_id=f"r{CALLS.total()}",
                    )
                )
            else:
                ids = re.findall(r"^(\S+): ", text.split("Candidate topics")[1], re.MULTILINE)
                out.append(
                    LLMResult(text=f'["{ids[0]}", "{ids[1]}"]', response_id=f"r{CALLS.total()}")
                )
        return out
