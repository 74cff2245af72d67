"""Chat templates shipped with easydata, usable by name wherever a template is configured
(`chat.template: chatml`, `ChatTemplateTransform(chat_template="llama3")`).

`chatml` is the ChatML layout (`<|im_start|>role\\n...<|im_end|>`); `llama3`, `mistral`, `gemma` and `phi3`
are those model families' published templates as collected in github.com/chujiezheng/chat_templates (MIT, see
LICENSE here), compacted as that repository says to use them (indentation and layout newlines removed).
They are package data, found from an installed wheel as from a checkout.
"""

from __future__ import annotations

from importlib import resources
from typing import Optional

__all__ = ["NAMED_TEMPLATES", "named_template"]

NAMED_TEMPLATES = ("chatml", "gemma", "llama3", "mistral", "phi3")


def named_template(name: str) -> Optional[str]:
    """The jinja text of the shipped template `name`, or None when there is none of that name."""
    if name not in NAMED_TEMPLATES:
        return None
    return resources.files(__package__).joinpath(f"{name}.jinja").read_text(encoding="utf-8")
