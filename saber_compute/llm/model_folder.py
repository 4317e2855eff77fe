"""A local model folder as an engine loads it: its chat template and its content hash.

The converted Gemma 3 270M folder (:mod:`saber_compute.llm.embedded`) has no chat template, so
chat engines (vLLM's ``LLM.chat`` and its OpenAI server) could not render a conversation. Gemma 3
models ship one format for every size; :func:`ensure_chat_template` writes it into a Gemma 3
folder that lacks one as ``chat_template.jinja`` (read by transformers and vLLM without flags).
The content hash names the exact weights, tokenizer and template in an engine's identity, so a
changed folder never reuses cached answers.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path

CHAT_TEMPLATE_FILE = "chat_template.jinja"
GEMMA3_MODEL_TYPES = ("gemma3", "gemma3_text")

# The text of a message's content: a string, or the text parts of a list (both templates).
TEXT_OF_MACRO = """{%- macro text_of(content) -%}
  {%- if content is string -%}
    {{- content | trim -}}
  {%- else -%}
    {%- for part in content if part['type'] == 'text' -%}
      {{- part['text'] | trim -}}
    {%- endfor -%}
  {%- endif -%}
{%- endmacro -%}
"""

# Gemma 3's conversation format: <bos>, a system message folded into the first user turn, the
# assistant speaking as "model", every turn closed by <end_of_turn>.
GEMMA3_CHAT_TEMPLATE = (
    TEXT_OF_MACRO
    + """{{- bos_token -}}
{%- if messages and messages[0]['role'] == 'system' -%}
  {%- set system_prefix = text_of(messages[0]['content']) + '\n\n' -%}
  {%- set turns = messages[1:] -%}
{%- else -%}
  {%- set system_prefix = '' -%}
  {%- set turns = messages -%}
{%- endif -%}
{%- for message in turns -%}
  {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
    {{- raise_exception('Gemma 3 turns must alternate user/assistant, starting with user') -}}
  {%- endif -%}
  {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
  {{- '<start_of_turn>' + role + '\n' + (system_prefix if loop.first else '') -}}
  {{- text_of(message['content']) -}}
  {{- '<end_of_turn>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<start_of_turn>model\n' -}}
{%- endif -%}
"""
)


# A base model's "conversation": the messages' texts joined by blank lines after <bos>, exactly
# what the embedded engine feeds the packaged Gemma 3 270M (``embedded.render_plain``). Gemma 3's
# chat format makes that base model echo its first line; plain text lets it continue the prompt.
PLAIN_CHAT_TEMPLATE = (
    TEXT_OF_MACRO
    + """{{- bos_token -}}
{%- for message in messages -%}
  {%- if not loop.first -%}
    {{- '\n\n' -}}
  {%- endif -%}
  {{- text_of(message['content']) -}}
{%- endfor -%}
"""
)
CHAT_TEMPLATES = {"plain": PLAIN_CHAT_TEMPLATE, "gemma3": GEMMA3_CHAT_TEMPLATE}


def chat_template_text(name: str) -> str | None:
    """The Jinja text of a chat template setting: "" → None (the model folder's own), a name of
    ``CHAT_TEMPLATES`` (``plain``, ``gemma3``), else the path of a Jinja file."""
    if not name:
        return None
    if name in CHAT_TEMPLATES:
        return CHAT_TEMPLATES[name]
    path = Path(name).expanduser()
    if not path.is_file():
        raise FileNotFoundError(
            f"chat template {name} is neither {' nor '.join(CHAT_TEMPLATES)} nor a file"
        )
    return path.read_text()


def has_chat_template(folder: Path) -> bool:
    """A ``chat_template.jinja`` file, or a ``chat_template`` in ``tokenizer_config.json``."""
    if (folder / CHAT_TEMPLATE_FILE).exists():
        return True
    config = folder / "tokenizer_config.json"
    return config.exists() and bool(json.loads(config.read_text()).get("chat_template"))


def ensure_chat_template(folder: Path) -> bool:
    """Write Gemma 3's chat template into a Gemma 3 folder that has none, or replace an older
    version of it (``GEMMA3_CHAT_TEMPLATE`` is the current one); True when written.

    Written through a temporary file and a rename: a concurrent reader sees all of it or none.
    """
    folder = Path(folder)
    ours = folder / CHAT_TEMPLATE_FILE
    if ours.exists() and ours.read_text() == GEMMA3_CHAT_TEMPLATE:
        return False
    if has_chat_template(folder) and not _is_our_older_template(ours):
        return False
    model_type = json.loads((folder / "config.json").read_text()).get("model_type", "")
    if model_type not in GEMMA3_MODEL_TYPES:
        return False
    tmp = folder / f".{CHAT_TEMPLATE_FILE}.{os.getpid()}.tmp"
    tmp.write_text(GEMMA3_CHAT_TEMPLATE)
    os.replace(tmp, folder / CHAT_TEMPLATE_FILE)
    return True


def _is_our_older_template(path: Path) -> bool:
    """An earlier version of the template this module writes (its error message marks it)."""
    return path.exists() and "Gemma 3 turns must alternate user/assistant" in path.read_text()


def content_hash(folder: Path) -> str:
    """sha256 (16 hex) over the names and bytes of a folder's visible files, in name order."""
    folder = Path(folder).resolve()
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
    signature = tuple(
        (str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns) for p in files
    )
    return _hash_files(str(folder), signature)


@lru_cache(maxsize=8)
def _hash_files(folder: str, signature: tuple[tuple[str, int, int], ...]) -> str:
    """The hash of the files named in ``signature`` (cached per name, size and mtime)."""
    digest = hashlib.sha256()
    for name, _, _ in signature:
        digest.update(name.encode() + b"\0")
        with open(Path(folder) / name, "rb") as handle:
            while chunk := handle.read(1 << 22):
                digest.update(chunk)
    return digest.hexdigest()[:16]
