"""Chat templates shipped with easydata, usable by name wherever a template is configured
(`chat.template: chatml`, `ChatTemplateTransform(chat_template="llama3")`).

`chatml` is the ChatML layout (`<|im_start|>role\\n...<|im_end|>`); `llama3`, `mistral`, `gemma` and `phi3`
are those model families' published templates as collected in github.com/chujiezheng/chat_templates (MIT, see
LICENSE here), compacted as that repository says to use them (indentation and layout newlines removed).
They are package data, found from an installed wheel as from a checkout.

A tokenizer may hold templates of its own by name (`default`, `tool_use`, `rag`: `transformers` saves them as
`chat_template.jinja` and `additional_chat_templates/<name>.jinja`); `tool_template` is the rule by which a
conversation with tools gets the `tool_use` one.
"""

from __future__ import annotations

from importlib import resources
from typing import Mapping, Optional

__all__ = ["NAMED_TEMPLATES", "named_template", "tool_template", "template_file_text"]

NAMED_TEMPLATES = ("chatml", "gemma", "llama3", "mistral", "phi3")


def named_template(name: str) -> Optional[str]:
    """The jinja text of the shipped template `name`, or None when there is none of that name."""
    if name not in NAMED_TEMPLATES:
        return None
    return resources.files(__package__).joinpath(f"{name}.jinja").read_text(encoding="utf-8")


def tool_template(own: Mapping[str, str], template: Optional[str]) -> Optional[str]:
    """What conversations with tools are rendered with, given a tokenizer's own templates by name and the
    `template` chosen: its `tool_use` template where `template` is its `default`, as `transformers`'
    `get_chat_template` picks it when tools are given and no template is named (Command R, Hermes 2 Pro);
    None: `template` itself."""
    return own.get("tool_use") if template is not None and template == own.get("default") else None


def template_file_text(data: bytes) -> str:
    """A template file's text as Python reads a file in text mode (how `transformers` reads
    `chat_template.jinja`, and how a template is read with `open(path).read()`): UTF-8, each `\r\n` or `\r`
    a `\n`. A file saved with Windows line endings renders the same text as its Unix copy.

    Raises:
      UnicodeDecodeError: not UTF-8.
    """
    return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
