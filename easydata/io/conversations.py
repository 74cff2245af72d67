"""Chat records -> normalised conversations: the record-level part of chat data, before any template.

`conversation_from_record` accepts OpenAI messages (`role`/`content`), ShareGPT turns (`from`/`value`, roles
normalised: human->user, gpt/bot/model->assistant), optional `tools`, and prompt/completion pairs; anything
that is not a usable conversation raises `ChatError`, whose message is the record's dead-letter reason.
Reading records (`easydata.io.documents`) needs this and no template engine; rendering is
`easydata.text.chat`'s.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

__all__ = ["ChatError", "Conversation", "conversation_from_record", "ROLE_ALIASES"]

ROLE_ALIASES = {
    "system": "system", "user": "user", "human": "user", "assistant": "assistant", "gpt": "assistant",
    "bot": "assistant", "model": "assistant", "tool": "tool", "function": "tool", "ipython": "tool",
}


class ChatError(ValueError):
    """A chat record that cannot be rendered; the message is the dead-letter reason."""


@dataclasses.dataclass(frozen=True)
class Conversation:
    """A normalised conversation: messages with canonical roles, and optional tool definitions."""

    messages: list[dict[str, Any]]
    tools: Optional[list[Any]] = None


def _message(raw: Any, index: int) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ChatError(f"message {index} is a {type(raw).__name__}, not an object")
    if "role" in raw:
        role, content = raw["role"], raw.get("content")
    elif "from" in raw:
        role, content = raw["from"], raw.get("value")
    else:
        raise ChatError(f"message {index} has neither 'role' nor 'from'")
    canonical = ROLE_ALIASES.get(str(role).lower()) if isinstance(role, str) else None
    if canonical is None:
        raise ChatError(f"message {index} has unknown role {role!r}")
    if isinstance(content, list):  # content parts: keep the text parts
        texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type", "text") == "text"]
        if not all(isinstance(t, str) for t in texts):
            raise ChatError(f"message {index} has content parts without text")
        content = "".join(texts)
    if content is None and not raw.get("tool_calls"):
        raise ChatError(f"message {index} ({canonical}) has no content")
    if content is not None and not isinstance(content, str):
        raise ChatError(f"message {index} ({canonical}) content is a {type(content).__name__}, not a string")
    message = {k: v for k, v in raw.items() if k not in ("from", "value")}
    message.update(role=canonical, content=content if content is not None else "")
    return message


def conversation_from_record(content: Any, record: Optional[dict[str, Any]] = None) -> Conversation:
    """Normalises a record's messages (or its `prompt`/`completion` pair when `content` is None).

    Raises:
      ChatError: for anything that is not a usable conversation.
    """
    record = record or {}
    if content is None and isinstance(record.get("prompt"), str) and isinstance(record.get("completion"), str):
        content = [{"role": "user", "content": record["prompt"]},
                   {"role": "assistant", "content": record["completion"]}]
    if not isinstance(content, list) or not content:
        raise ChatError("messages must be a non-empty list")
    messages = [_message(m, i) for i, m in enumerate(content)]
    if not any(m["role"] == "assistant" for m in messages):
        raise ChatError("conversation has no assistant message")
    tools = record.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise ChatError(f"'tools' is a {type(tools).__name__}, not a list")
    return Conversation(messages=messages, tools=tools)
