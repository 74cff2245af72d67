"""Chat records -> normalised conversations: the record-level part of chat data, before any template.

`conversation_from_record` accepts OpenAI messages (`role`/`content`; the legacy `function_call` and
`functions` as `tool_calls` and `tools`), ShareGPT turns (`from`/`value`, roles normalised: human->user,
gpt/bot/model->assistant), optional `tools`, and prompt/completion pairs (two strings, or two lists of
messages); anything that is not a usable conversation raises `ChatError`, whose message is the record's
dead-letter reason.
Reading records (`easydata.io.documents`) needs this and no template engine; rendering is
`easydata.text.chat`'s.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

__all__ = ["ChatError", "Conversation", "conversation_from_record", "is_prompt_completion", "ROLE_ALIASES",
           "TOOL_FIELDS"]

ROLE_ALIASES = {
    "system": "system", "user": "user", "human": "user", "assistant": "assistant", "gpt": "assistant",
    "bot": "assistant", "model": "assistant", "tool": "tool", "function": "tool", "ipython": "tool",
}


#: A chat record's fields that define its tools for the template: `tools`, or OpenAI's legacy `functions`.
TOOL_FIELDS = ("tools", "functions")


class ChatError(ValueError):
    """A chat record that cannot be rendered; the message is the dead-letter reason."""


@dataclasses.dataclass(frozen=True)
class Conversation:
    """A normalised conversation: messages with canonical roles, and optional tool definitions."""

    messages: list[dict[str, Any]]
    tools: Optional[list[Any]] = None
    #: Messages before this index are a prompt (TRL's conversational prompt-completion): its assistant
    #: turns (few-shot examples) are context, not trained.
    first_trained: int = 0

    def untrained(self) -> list[int]:
        """Indices of the assistant messages that are context, not trained: a prompt's (`first_trained`) and
        those with `weight` 0 (OpenAI's fine-tuning format)."""
        return [i for i, m in enumerate(self.messages)
                if m["role"] == "assistant" and (i < self.first_trained or m.get("weight") == 0)]


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
    if isinstance(content, list):
        content = _parts_text(content, index)
    weight = raw.get("weight")
    if weight is not None and weight not in (0, 1):
        raise ChatError(f"message {index} ({canonical}) weight {weight!r} is not 0 or 1 (OpenAI's fine-tuning"
                        " format: 0 leaves an assistant message untrained)")
    calls = raw.get("tool_calls")
    if calls is None and isinstance(raw.get("function_call"), dict):  # OpenAI's legacy form of one tool call
        calls = [{"type": "function", "function": raw["function_call"]}]
    if calls is not None and not (isinstance(calls, list) and all(isinstance(c, dict) for c in calls)):
        what = f"a {type(calls).__name__}" if not isinstance(calls, list) else "a list holding a non-object"
        raise ChatError(f"message {index} ({canonical}) 'tool_calls' is {what}, not a list of objects"
                        + (" (a JSON string: decode it first)" if isinstance(calls, str) else ""))
    if content is None and not calls:
        raise ChatError(f"message {index} ({canonical}) has no content")
    if content is not None and not isinstance(content, str):
        raise ChatError(f"message {index} ({canonical}) content is a {type(content).__name__}, not a string")
    message = {k: v for k, v in raw.items() if k not in ("from", "value", "function_call")}
    message.update(role=canonical, content=content if content is not None else "")
    if calls is not None:
        message["tool_calls"] = calls
    return message


#: Content parts that hold text, and the key that holds it: OpenAI chat completions' `text` (and an assistant's
#: `refusal`), the Responses API's `input_text` and `output_text`.
TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal"}


def _parts_text(parts: list[Any], index: int) -> str:
    """A message's content parts as one text, the parts' texts back to back.

    Raises:
      ChatError: a part that is not text (an image, audio, a file: a text tokenizer cannot train it, and the
        conversation without it would be another conversation), or a text part without its text.
    """
    texts = []
    for part in parts:
        kind = part.get("type", "text") if isinstance(part, dict) else None
        key = TEXT_PARTS.get(kind) if isinstance(kind, str) else None
        if key is None:
            what = f"a part of type {kind!r}" if isinstance(kind, str) else "a part whose type is not a string" \
                if isinstance(part, dict) else f"a part that is a {type(part).__name__}"
            raise ChatError(f"message {index} has {what}: only text parts ({', '.join(TEXT_PARTS)}) can be"
                            " tokenized")
        text = part.get(key)
        if not isinstance(text, str):
            raise ChatError(f"message {index} has a {kind!r} part without its '{key}' string")
        texts.append(text)
    return "".join(texts)


def is_prompt_completion(record: dict[str, Any]) -> bool:
    """Whether a record is a prompt/completion pair: two strings (a user turn and the answer), or two lists
    of messages (TRL's conversational prompt-completion: the prompt's turns, then the completion's)."""
    prompt, completion = record.get("prompt"), record.get("completion")
    return isinstance(prompt, str) and isinstance(completion, str) or \
        isinstance(prompt, list) and isinstance(completion, list)


def conversation_from_record(content: Any, record: Optional[dict[str, Any]] = None) -> Conversation:
    """Normalises a record's messages (or its `prompt`/`completion` pair when `content` is None).

    Raises:
      ChatError: for anything that is not a usable conversation.
    """
    record = record or {}
    first_trained = 0
    if content is None and is_prompt_completion(record):
        prompt, completion = record["prompt"], record["completion"]
        if isinstance(prompt, str):
            prompt, completion = [{"role": "user", "content": prompt}], [{"role": "assistant", "content": completion}]
        if not completion:
            raise ChatError("completion must be a non-empty list of messages")
        content, first_trained = [*prompt, *completion], len(prompt)
    if not isinstance(content, list) or not content:
        raise ChatError("messages must be a non-empty list")
    messages = [_message(m, i) for i, m in enumerate(content)]
    if not any(m["role"] == "assistant" for m in messages[first_trained:]):
        raise ChatError("completion has no assistant message" if first_trained else
                        "conversation has no assistant message")
    tools = record.get("tools")
    if tools is None and record.get("functions") is not None:  # OpenAI's legacy form of the tool definitions
        functions = record["functions"]
        if not isinstance(functions, list):
            raise ChatError(f"'functions' is a {type(functions).__name__}, not a list")
        tools = [{"type": "function", "function": f} for f in functions]
    if tools is not None and not isinstance(tools, list):
        raise ChatError(f"'tools' is a {type(tools).__name__}, not a list")
    conversation = Conversation(messages=messages, tools=tools, first_trained=first_trained)
    if len(conversation.untrained()) == sum(m["role"] == "assistant" for m in messages):
        raise ChatError("every assistant message of the completion has weight 0: nothing to train" if first_trained
                        else "every assistant message has weight 0: nothing to train")
    return conversation
