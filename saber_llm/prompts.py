"""Versioned prompt files (``prompts/*.md``): front matter, ``[system]``/``[user]`` sections.

Placeholders are ``${name}`` (``string.Template``), so LaTeX braces in a prompt need no escaping
and text substituted into a prompt is never re-interpreted. The prompt hash is the sha256 of the
file's bytes; it goes into every call's cache key and every derived row's provenance.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

import yaml

from saber_compute.llm.interface import ChatMessage

PROMPTS_DIR = Path(__file__).resolve().parents[1] / "prompts"
SECTION = re.compile(r"^\[(system|user|assistant)\]\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Prompt:
    """A loaded prompt: id, version, content hash and its message templates."""

    id: str
    version: int
    hash: str
    sections: tuple[tuple[str, str], ...]

    @property
    def label(self) -> str:
        """``id@vN``, e.g. ``judge@v1``."""
        return f"{self.id}@v{self.version}"

    def render(self, **values: str) -> tuple[ChatMessage, ...]:
        """Messages with every ``${name}`` substituted (a missing value is a KeyError)."""
        return tuple(
            ChatMessage(role, Template(text).substitute(values)) for role, text in self.sections
        )


def prompt_source(name: str, prompts_dir: str = "") -> str:
    """What :func:`load_prompt` loads for the prompt ``name``: the file in the build's
    ``prompts_dir`` when one is set, else the project's prompt of that name."""
    return str(Path(prompts_dir) / f"{name}.md") if prompts_dir else name


def load_prompt(name: str, directory: Path | None = None) -> Prompt:
    """Load ``prompts/<name>.md`` (or a path to a prompt file)."""
    path = Path(name) if name.endswith(".md") else (directory or PROMPTS_DIR) / f"{name}.md"
    raw = path.read_bytes()
    text = raw.decode("utf-8")
    match = re.match(r"^---\n(.*?)\n---\n(.*)$", text, re.DOTALL)
    if not match:
        raise ValueError(f"{path}: a prompt file starts with a '---' front matter block")
    meta = yaml.safe_load(match.group(1)) or {}
    body = match.group(2)
    parts = SECTION.split(body)
    if len(parts) < 3 or parts[0].strip():
        raise ValueError(f"{path}: the body must be [system]/[user] sections")
    sections = tuple((parts[i], parts[i + 1].strip("\n")) for i in range(1, len(parts), 2))
    for key in ("id", "version"):
        if key not in meta:
            raise ValueError(f"{path}: front matter lacks {key!r}")
    return Prompt(
        id=str(meta["id"]),
        version=int(meta["version"]),
        hash=hashlib.sha256(raw).hexdigest()[:16],
        sections=sections,
    )
