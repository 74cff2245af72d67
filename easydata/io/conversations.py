"""Chat records -> normalised conversations: the record-level part of chat data, before any template.

`conversation_from_record` accepts OpenAI messages (`role`/`content`, text content parts; the legacy
`function_call` and `functions` as `tool_calls` and `tools`), ShareGPT turns (`from`/`value`, roles normalised:
human->user, gpt/bot/model->assistant; LLaMA-Factory's `function_call` and `observation` turns as tool calls and
results), Anthropic's content blocks (`thinking`, `tool_use`, `tool_result`), Gemini's `parts` (text, `thought`,
`functionCall`, `functionResponse`), a `system` (or Gemini's `systemInstruction`) field beside the messages,
optional `tools` (LLaMA-Factory's JSON string, Gemini's `functionDeclarations`), prompt/completion pairs (two
strings, or two lists of messages) and Alpaca records (`instruction`, `input`, `output`, LLaMA-Factory's
`history`). A null key is an absent one. Anything that is not a usable conversation raises `ChatError`, whose
message is the record's dead-letter reason.
Reading records (`easydata.io.documents`) needs this and no template engine; rendering is
`easydata.text.chat`'s.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

__all__ = ["ChatError", "Conversation", "conversation_from_record", "is_prompt_completion", "ROLE_ALIASES",
           "TOOL_FIELDS", "SYSTEM_FIELDS", "CHAT_FIELDS", "REASONING_FIELDS", "TEXT_PARTS", "json_messages",
           "ALPACA_FIELDS", "is_alpaca", "is_chat_field"]

ROLE_ALIASES = {
    "system": "system", "user": "user", "human": "user", "assistant": "assistant", "gpt": "assistant",
    "bot": "assistant", "model": "assistant", "tool": "tool", "function": "tool", "ipython": "tool",
    "observation": "tool",  # LLaMA-Factory's ShareGPT: a tool's result (its calls are `function_call` turns)
    "developer": "system",  # OpenAI's name for the system prompt since its o1 models
}


#: A chat record's fields that define its tools for the template: `tools`, or OpenAI's legacy `functions`.
TOOL_FIELDS = ("tools", "functions")
#: A chat record's fields holding its system prompt beside the messages: `system` (LLaMA-Factory's ShareGPT, a
#: string; Anthropic's Messages API, a string or text blocks) and Gemini's `systemInstruction` (`{"parts": [...]}`).
SYSTEM_FIELDS = ("system", "systemInstruction")
#: An Alpaca record's fields (Stanford Alpaca, LLaMA-Factory): an instruction, its optional input, the output,
#: and LLaMA-Factory's `history` of earlier `[question, answer]` turns.
ALPACA_FIELDS = ("instruction", "input", "output", "history")
#: Every field of a record a chat record is read from besides its messages.
CHAT_FIELDS = ("prompt", "completion", *ALPACA_FIELDS, *SYSTEM_FIELDS, *TOOL_FIELDS)


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


def _messages(raw: Any, index: int) -> list[dict[str, Any]]:
    """One message of a record -> the normalised messages it holds: itself, or for a user turn of Anthropic's
    content blocks that returns tool results, a `tool` message per result and then the turn's text, if any."""
    if not isinstance(raw, dict):
        raise ChatError(f"message {index} is a {type(raw).__name__}, not an object")
    if "role" in raw:
        role, content = raw["role"], raw["content"] if "content" in raw else raw.get("parts")  # Gemini's `parts`
    elif "from" in raw:
        role, content = raw["from"], raw.get("value")
    else:
        raise ChatError(f"message {index} has neither 'role' nor 'from'")
    if role == "function_call":  # LLaMA-Factory's ShareGPT: an assistant turn that is only its tool calls
        return [_message({"role": "assistant", "content": None, "tool_calls": _function_calls(content, index)}, index,
                         None)]
    canonical = ROLE_ALIASES.get(str(role).lower()) if isinstance(role, str) else None
    if canonical is None:
        raise ChatError(f"message {index} has unknown role {role!r}")
    blocks = _Blocks(content, index, canonical) if isinstance(content, list) else None
    message = _message({**raw, "role": canonical, "content": content if blocks is None else blocks.text}, index,
                       blocks)
    if blocks is None or not blocks.results:
        return [message]
    return blocks.results + ([message] if blocks.text else [])


def _message(raw: dict[str, Any], index: int, blocks: Optional["_Blocks"]) -> dict[str, Any]:
    """A message with a canonical `role` and its `content` as text (or None) -> the normalised message."""
    canonical, content = raw["role"], raw["content"]
    weight = raw.get("weight")
    if weight is not None and weight not in (0, 1):
        raise ChatError(f"message {index} ({canonical}) weight {weight!r} is not 0 or 1 (OpenAI's fine-tuning"
                        " format: 0 leaves an assistant message untrained)")
    calls = raw.get("tool_calls")
    if calls is None and isinstance(raw.get("function_call"), dict):  # OpenAI's legacy form of one tool call
        calls = [{"type": "function", "function": raw["function_call"]}]
    if blocks is not None and blocks.calls:
        if calls is not None:
            raise ChatError(f"message {index} ({canonical}) has both 'tool_calls' and tool_use blocks")
        calls = blocks.calls
    if calls is not None and not (isinstance(calls, list) and all(isinstance(c, dict) for c in calls)):
        what = f"a {type(calls).__name__}" if not isinstance(calls, list) else "a list holding a non-object"
        raise ChatError(f"message {index} ({canonical}) 'tool_calls' is {what}, not a list of objects"
                        + (" (a JSON string: decode it first)" if isinstance(calls, str) else ""))
    if content is None and isinstance(raw.get("refusal"), str):  # an OpenAI answer that declined: its text
        content = raw["refusal"]
    if content is None and not calls:
        raise ChatError(f"message {index} ({canonical}) has no content")
    if content is not None and not isinstance(content, str):
        raise ChatError(f"message {index} ({canonical}) content is a {type(content).__name__}, not a string")
    message = _present(raw, ("from", "value", "function_call", "parts"))
    message.update(role=canonical, content=content if content is not None else "")
    if calls is not None:
        message["tool_calls"] = [_present_call(call) for call in calls]
    if blocks is not None and blocks.thinking:
        if any(message.get(field) for field in REASONING_FIELDS):
            raise ChatError(f"message {index} ({canonical}) has both thinking blocks and a reasoning field")
        message["reasoning_content"] = "\n\n".join(blocks.thinking)
    return message


def _present(value: dict[str, Any], leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    """An object's keys that have a value: a null is an absent key. A table's column of messages gives every
    message every key any message has (`tool_calls: null` on a plain answer), and OpenAI's SDK writes them
    too (`message.model_dump()`); templates that test a key's presence (Llama 3.1's `'tool_calls' in message`)
    fail on the null where the same message without the key renders."""
    return {k: v for k, v in value.items() if v is not None and k not in leave_out}


def _present_call(call: dict[str, Any]) -> dict[str, Any]:
    """A tool call (or a tool's definition) without null keys, at its top and in its `function` (not in the
    arguments or parameters, where a null is a value)."""
    call = _present(call)
    function = call.get("function")
    return {**call, "function": _present(function)} if isinstance(function, dict) else call


def _function_calls(value: Any, index: int) -> list[dict[str, Any]]:
    """A LLaMA-Factory `function_call` turn's value (a JSON object `{"name", "arguments"}`, or a list of
    them for parallel calls) -> OpenAI's `tool_calls`."""
    try:
        decoded = json.loads(value) if isinstance(value, str) else value
    except json.JSONDecodeError as e:
        raise ChatError(f"message {index} (function_call) is not JSON: {e.msg} at column {e.colno}") from None
    calls = decoded if isinstance(decoded, list) else [decoded]
    if not calls or not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls):
        raise ChatError(f"message {index} (function_call) is not a call (an object with a 'name') or a list of"
                        " them")
    return [{"type": "function", "function": {"name": c["name"], "arguments": c.get("arguments", {})}}
            for c in calls]


#: Message fields chat templates write an assistant's reasoning from (Qwen3 and DeepSeek-R1's
#: `reasoning_content`, gpt-oss's `thinking`, `reasoning`): model output, trained like the content.
REASONING_FIELDS = ("reasoning_content", "reasoning", "thinking")

#: Content parts that hold text, and the key that holds it: OpenAI chat completions' `text` (and an assistant's
#: `refusal`), the Responses API's `input_text` and `output_text`.
TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal"}


#: Anthropic's blocks and Gemini's parts (named here by the key that marks them), and the roles whose messages
#: can hold each.
BLOCK_ROLES = {"thinking": ("assistant",), "tool_use": ("assistant",), "tool_result": ("user",),
               "thought": ("assistant",), "functionCall": ("assistant",), "functionResponse": ("user", "tool")}


def _kind(part: Any) -> Any:
    """A content part's kind: its `type`, else Gemini's kind of part (`functionCall`, `functionResponse`, a
    `thought`, text; another key, such as `inlineData`, names a part that is not text). None for a part that
    is not an object."""
    if not isinstance(part, dict):
        return None
    if "type" in part:
        return part["type"]
    if "text" in part or not part:
        return "thought" if part.get("thought") is True else "text"
    return next(iter(part))


class _Blocks:
    """A message's content parts: OpenAI's text parts, and Anthropic's Messages API blocks, as the fields the
    templates read. An assistant's `thinking` blocks are its `reasoning_content`, its `tool_use` blocks its
    `tool_calls`; a user turn's `tool_result` blocks are `tool` messages of their own, before its text.

    Raises:
      ChatError: a part that is not text (an image, audio, a file, Anthropic's encrypted `redacted_thinking`:
        a text tokenizer cannot train it, and the conversation without it would be another conversation), a
        block in a role that cannot hold it, or a part without its text.
    """

    def __init__(self, parts: list[Any], index: int, role: str):
        texts: list[str] = []
        self.thinking: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.results: list[dict[str, Any]] = []
        where = f"message {index}"
        for part in parts:
            part = _present(part) if isinstance(part, dict) else part  # a table's parts have every part's keys
            kind = _kind(part)
            if role not in BLOCK_ROLES.get(kind, ()):
                texts.append(_part_text(part, kind, where, role))
            elif kind in ("thinking", "thought"):
                self.thinking.append(_string(part, "thinking" if kind == "thinking" else "text", kind, where))
            elif kind == "tool_use":
                call = {"type": "function", "function": {"name": _string(part, "name", kind, where),
                                                         "arguments": part.get("input", {})}}
                self.calls.append({"id": part["id"], **call} if isinstance(part.get("id"), str) else call)
            elif kind == "functionCall":
                call = part[kind] if isinstance(part[kind], dict) else {}
                self.calls.append({"type": "function", "function": {"name": _string(call, "name", kind, where),
                                                                     "arguments": call.get("args", {})}})
            elif kind == "functionResponse":
                response = part[kind] if isinstance(part[kind], dict) else {}
                message = {"role": "tool", "content": json.dumps(response.get("response", {}), ensure_ascii=False)}
                self.results.append({**message, "name": response["name"]} if isinstance(response.get("name"), str)
                                    else message)
            else:  # a tool_result
                result = part.get("content", "")
                text = _parts_text(result, f"{where}'s tool_result") if isinstance(result, list) else result
                if not isinstance(text, str):
                    raise ChatError(f"{where} has a tool_result whose content is a {type(text).__name__}")
                message = {"role": "tool", "content": text}
                if isinstance(part.get("tool_use_id"), str):
                    message["tool_call_id"] = part["tool_use_id"]
                self.results.append(message)
        self.text = "".join(texts)


def _part_text(part: Any, kind: Any, where: str, role: Optional[str] = None) -> str:
    """A text part's text. `role` is the message's, where Anthropic's blocks may be (None: text only)."""
    key = TEXT_PARTS.get(kind) if isinstance(kind, str) else None
    if key is None:
        what = f"a part of type {kind!r}" if isinstance(kind, str) else "a part whose type is not a string" \
            if isinstance(part, dict) else f"a part that is a {type(part).__name__}"
        if role is not None and kind in BLOCK_ROLES:
            raise ChatError(f"{where} ({role}) has {what}, a block only {' or '.join(BLOCK_ROLES[kind])} messages"
                            " hold")
        raise ChatError(f"{where} has {what}: only text parts ({', '.join(TEXT_PARTS)})"
                        + (" and Anthropic's thinking, tool_use and tool_result blocks" if role else "")
                        + " can be tokenized")
    return _string(part, key, kind, where)


def _string(part: dict[str, Any], key: str, kind: str, where: str) -> str:
    text = part.get(key)
    if not isinstance(text, str):
        raise ChatError(f"{where} has a {kind!r} part without its '{key}' string")
    return text


def _parts_text(parts: list[Any], where: str) -> str:
    """Content parts that must all be text (a system prompt's, a tool result's) as one text."""
    parts = [_present(p) if isinstance(p, dict) else p for p in parts]
    return "".join(_part_text(p, _kind(p), where) for p in parts)


def is_chat_field(name: str, messages_field: str) -> bool:
    """Whether a content field is named as chat records' messages are: `messages`, `conversations` (ShareGPT),
    `conversation` (LMSYS-Chat-1M, WildChat), `contents` (Gemini), or the configured `chat.messages_field`."""
    return name in (messages_field, "messages", "conversations", "conversation", "contents")


def json_messages(text: str) -> Optional[list[Any]]:
    """The messages a string holds as a JSON array (objects with a `role` or `from`), as a CSV file must keep a
    chat record and some tables do; None for any other text. Asked only of a chat field's strings
    (`is_chat_field`): a code corpus's JSON file is text whatever it holds."""
    start = text[:1]
    if start != "[" and not (start.isspace() and text.lstrip()[:1] == "["):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if isinstance(value, list) and value and all(isinstance(m, dict) and ("role" in m or "from" in m) for m in value):
        return value
    return None


def is_prompt_completion(record: dict[str, Any]) -> bool:
    """Whether a record is a prompt/completion pair: two strings (a user turn and the answer), or two lists
    of messages (TRL's conversational prompt-completion: the prompt's turns, then the completion's)."""
    prompt, completion = record.get("prompt"), record.get("completion")
    return isinstance(prompt, str) and isinstance(completion, str) or \
        isinstance(prompt, list) and isinstance(completion, list)


def is_alpaca(record: dict[str, Any]) -> bool:
    """Whether a record is an Alpaca one: it has an `instruction` and an `output` (their values are checked when
    it is read, so a bad one is a dead letter that says what is wrong with it)."""
    return "instruction" in record and "output" in record


def _alpaca_messages(record: dict[str, Any]) -> list[dict[str, Any]]:
    """An Alpaca record's turns, as LLaMA-Factory reads it: the `history` pairs, then the instruction and its
    input (joined by a newline, either may be empty) as the user's turn and the output as the answer."""
    instruction, extra, output, history = (record.get(f) for f in ALPACA_FIELDS)
    for name, value, optional in (("instruction", instruction, False), ("input", extra, True),
                                  ("output", output, False)):
        if not isinstance(value, str) and not (optional and value is None):
            raise ChatError(f"'{name}' is a {type(value).__name__}, not a string")
    history = [] if history is None else history
    if not (isinstance(history, list) and all(isinstance(turn, list) and len(turn) == 2 and
                                              all(isinstance(t, str) for t in turn) for turn in history)):
        raise ChatError("'history' is not a list of [question, answer] string pairs")
    turns = [*history, ["\n".join(part for part in (instruction, extra) if part), output]]
    return [{"role": role, "content": text} for turn in turns for role, text in zip(("user", "assistant"), turn)]


def conversation_from_record(content: Any, record: Optional[dict[str, Any]] = None) -> Conversation:
    """Normalises a record's messages (or, when `content` is None, its `prompt`/`completion` pair or its Alpaca
    fields).

    Raises:
      ChatError: for anything that is not a usable conversation.
    """
    record = record or {}
    prompt: list[Any] = []
    if content is None and is_prompt_completion(record):
        prompt, content = record["prompt"], record["completion"]
        if isinstance(prompt, str):
            prompt, content = [{"role": "user", "content": prompt}], [{"role": "assistant", "content": content}]
        if not content:
            raise ChatError("completion must be a non-empty list of messages")
    elif content is None and is_alpaca(record):
        content = _alpaca_messages(record)
    elif not isinstance(content, list) or not content:
        raise ChatError("messages must be a non-empty list")
    elif all(isinstance(m, str) for m in content):  # paragraphs or pieces of one text, as some corpora keep them
        raise ChatError(f"the content is a list of {len(content)} strings, not text or chat messages: join them"
                        " into one text (a format_callback)")
    head = [m for i, raw in enumerate(prompt) for m in _messages(raw, i)]
    messages = head + [m for i, raw in enumerate(content, len(prompt)) for m in _messages(raw, i)]
    system = _system_message(record, messages)
    messages = [system, *messages] if system else messages
    first_trained = len(head) + bool(system) if prompt else 0
    if not any(m["role"] == "assistant" for m in messages[first_trained:]):
        raise ChatError("completion has no assistant message" if prompt else "conversation has no assistant message")
    tools = _tools(record)
    conversation = Conversation(messages=messages, tools=tools, first_trained=first_trained)
    if len(conversation.untrained()) == sum(m["role"] == "assistant" for m in messages):
        raise ChatError("every assistant message of the completion has weight 0: nothing to train" if prompt
                        else "every assistant message has weight 0: nothing to train")
    return conversation


def _system_message(record: dict[str, Any], messages: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The system message a record's `system` (or Gemini's `systemInstruction`) field adds before its messages
    (None for none, or an empty one: LLaMA-Factory writes `""` for no prompt)."""
    name = next((f for f in SYSTEM_FIELDS if record.get(f) not in (None, "")), None)
    if name is None:
        return None
    system = record[name]
    if isinstance(system, dict) and isinstance(system.get("parts"), list):  # Gemini's `{"role", "parts"}`
        system = system["parts"]
    if isinstance(system, list):
        system = _parts_text(system, f"'{name}'")
    if not isinstance(system, str):
        raise ChatError(f"'{name}' is a {type(system).__name__}, not a string or a list of text blocks")
    if messages[0]["role"] == "system":
        if messages[0]["content"] == system:
            return None
        raise ChatError(f"the record has a '{name}' field and a system message that differ: which is the prompt?")
    return {"role": "system", "content": system}


def _tools(record: dict[str, Any]) -> Optional[list[Any]]:
    """A record's tool definitions: `tools` (a list, LLaMA-Factory's JSON string of function definitions, Gemini's
    `functionDeclarations` groups), or OpenAI's legacy `functions`; function definitions on their own are put in
    OpenAI's `{"type": "function",
    "function": ...}` as the legacy `functions` are. Null keys are absent (`_present_call`)."""
    tools, bare = record.get("tools"), False
    if isinstance(tools, str):
        try:
            tools, bare = json.loads(tools), True
        except json.JSONDecodeError as e:
            raise ChatError(f"'tools' is a string that is not JSON: {e.msg} at column {e.colno}") from None
    elif tools is None and record.get("functions") is not None:
        tools, bare = record["functions"], True
        if not isinstance(tools, list):
            raise ChatError(f"'functions' is a {type(tools).__name__}, not a list")
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise ChatError(f"'tools' is a {type(tools).__name__}, not a list")
    groups = [t["functionDeclarations"] or [] if isinstance(t, dict) and "functionDeclarations" in t else None
              for t in tools]
    if any(group is not None for group in groups):  # Gemini's: functions in groups
        tools, bare = [f for t, group in zip(tools, groups) for f in (group if group is not None else [t])], True
    if bare:
        tools = [{"type": "function", "function": f} if isinstance(f, dict) and "function" not in f else f
                 for f in tools]
    return [_present_call(tool) if isinstance(tool, dict) else tool for tool in tools]
