"""Chat records -> rendered text plus the character spans the model is trained on.

`conversation_from_record` accepts OpenAI messages (`role`/`content`), ShareGPT turns (`from`/`value`,
roles normalised: human->user, gpt/bot/model->assistant), optional `tools`, and prompt/completion
pairs. `ChatRenderer` renders a conversation with a jinja chat template in the environment Hugging
Face templates expect (`raise_exception`, `strftime_now`, `tojson`, trim/lstrip blocks, special tokens
as variables) and returns the text with the spans of assistant responses:

* templates with `{% generation %}...{% endgeneration %}` blocks: exactly those blocks;
* otherwise, by prefix rendering: assistant turn `i` spans from the end of the conversation up to
  `i` rendered with the generation prompt (where the model starts writing) to the end of the
  conversation up to and including `i` (trailing whitespace excluded). This covers tool calls and
  any end-of-turn token the template writes, and is checked: each prefix must be a prefix of the
  full text; non-blank text before the message's content (a role header written by a template that
  ignores `add_generation_prompt`) is left out of the span;
* templates for which that check fails: each message's content is located in the rendered text in
  conversation order (so a user quoting the assistant cannot be mistaken for it); an assistant span
  is its content plus, when the next non-blank text is a special token (`<|im_end|>`, `</s>`,
  `<|eot_id|>`, ...), that end-of-turn token; an assistant message with tool calls or reasoning
  (`REASONING_FIELDS`) is found by the tail of what the template writes for it as the last turn
  (`ChatRenderer._written_turn`).

A tool call the template does not write (its function's name is not in the turn outside the message's own
text) is refused: the turn would be trained as an empty answer. Some assistant turns are context, not trained
(`Conversation.untrained`: a prompt/completion pair's prompt turns, a message of `weight` 0): a span belongs to
the last assistant message whose turn, where the messages before it rendered with the generation prompt end,
starts at or before it (`ChatRenderer._trained_spans`).

Anything that does not fit (invalid roles, no assistant turn, a template error, an assistant message
the template does not reproduce) raises `ChatError` with a reason for the dead-letter output: there is
never a silent fallback to another format. Token-level masks come later, from the tokenizer's offsets
(`easydata.text.tokenization`).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import threading
import time
from typing import Any, Iterable, Optional, Sequence

from easydata.config.models import TEMPLATE_ARGUMENTS
from easydata.io.documents import unusable_value
from easydata.io.conversations import (REASONING_FIELDS, ROLE_ALIASES, ChatError, Conversation,  # re-exported
                                        conversation_from_record)

__all__ = ["ChatError", "Conversation", "ChatRenderer", "conversation_from_record", "template_hash",
           "ROLE_ALIASES"]

_GEN_OPEN, _GEN_CLOSE = "\ue000", "\ue001"  # private-use sentinels around generation blocks


def template_hash(template: str, tool_template: Optional[str] = None) -> str:
    """`sha256:<hex>` of what renders a dataset's conversations: its template, and the one for conversations
    with tools when that is another (`ChatRenderer`'s `tool_template`)."""
    data = template if tool_template is None else f"{template}\0{tool_template}"
    return "sha256:" + hashlib.sha256(data.encode("utf-8")).hexdigest()


#: The largest string or list a chat template may build (characters or items), and render in all.
MAX_TEMPLATE_ITEMS = 32 * 2**20
_PADDING_METHODS = frozenset({"ljust", "rjust", "center", "zfill", "expandtabs"})
_PADDING_FILTERS = frozenset({"center", "indent", "format"})


#: Work one rendering may do: loop iterations in all (nested `range(100000)` loops would run 10^10), and
#: characters or items built in all by repetition, concatenation, padding and joining (a value under
#: `MAX_TEMPLATE_ITEMS` built a million times over would still take gigabytes). Counted, not timed, so
#: whether a record renders never depends on the machine: the same records are dead letters everywhere.
MAX_TEMPLATE_STEPS = 1_000_000
MAX_TEMPLATE_BUILT = 4 * MAX_TEMPLATE_ITEMS
#: The largest integer (in bits) template arithmetic may make or use: each of the at most
#: `MAX_TEMPLATE_STEPS` operations then costs microseconds (`x * x` on an 800 KB integer took 1.2 s).
MAX_TEMPLATE_INT_BITS = 2**16
#: The last resort: wall-clock seconds one record's renderings may take, whatever the counts above allow.
MAX_TEMPLATE_SECONDS = 30.0
#: The widest `tojson` indent accepted (`tojson(indent=1e8)` took 3 GB).
MAX_TOJSON_INDENT = 64


class _RenderBudget(threading.local):
    """What the current rendering on this thread has spent (`ChatRenderer._render` resets it)."""

    steps = 0
    built = 0
    deadline = float("inf")


_BUDGET = _RenderBudget()


def _tick() -> None:
    """Counts one step of template work (a loop iteration, an operator, a call) against `MAX_TEMPLATE_STEPS`
    and the record's wall-clock budget (`MAX_TEMPLATE_SECONDS`)."""
    _BUDGET.steps += 1
    if _BUDGET.steps > MAX_TEMPLATE_STEPS:
        raise _security_error(f"the template runs more than {MAX_TEMPLATE_STEPS:,} loop iterations and operations"
                              " for one record")
    if _BUDGET.steps % 64 == 0 and time.monotonic() > _BUDGET.deadline:
        raise _security_error(f"the template ran for more than {MAX_TEMPLATE_SECONDS:g} s for one record")


def _check_int(value: Any) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_TEMPLATE_INT_BITS:
        raise _security_error(f"the template computes with an integer of {value.bit_length():,} bits, more than the"
                              f" {MAX_TEMPLATE_INT_BITS:,} a chat template may")


def _bounded_str_join(*pieces: Any) -> str:
    """Jinja's `~` operator (`a ~ b ~ c`), sized before joining (it is not an intercepted binary operator)."""
    _tick()
    strings = [str(p) for p in pieces]
    _check_size(sum(len(p) for p in strings))
    return "".join(strings)


def _security_error(message: str) -> Exception:
    from jinja2.exceptions import SecurityError

    return SecurityError(message)


def _check_size(size: int) -> None:
    if size > MAX_TEMPLATE_ITEMS:
        raise _security_error(f"the template builds a value of {size:,} items, more than the {MAX_TEMPLATE_ITEMS:,}"
                              " a chat template may")
    _BUDGET.built += size
    if _BUDGET.built > MAX_TEMPLATE_BUILT:
        raise _security_error(f"the template builds more than {MAX_TEMPLATE_BUILT:,} items in all for one record")


class _CountedLoop:
    """A `{% for %}` loop's iterable that counts every iteration against `MAX_TEMPLATE_STEPS`; its length
    is the iterable's own (for `loop.length`), so counting changes nothing a template sees."""

    __slots__ = ("_iterable", "_iterator")

    def __init__(self, iterable: Any):
        self._iterable, self._iterator = iterable, None

    def __iter__(self) -> "_CountedLoop":
        self._iterator = iter(self._iterable)
        return self

    def __next__(self) -> Any:
        item = next(self._iterator)  # type: ignore[arg-type]
        _tick()
        return item

    def __len__(self) -> int:
        return len(self._iterable)


def _bounded_concat(pieces: Iterable[str]) -> str:
    """The environment's `concat` (rendered output, `{% set %}` blocks, macros): sized before joining."""
    pieces = list(pieces)
    _check_size(sum(len(p) for p in pieces))
    return "".join(pieces)


def _check_format(spec: str) -> None:
    """A `%`/`format` string whose widths or precisions would build an over-sized string."""
    import re

    _check_size(max((int(n) for n in re.findall(r"\d+", spec)), default=0))


def _bounded_filter(name: str, function: Any) -> Any:
    """`center(width)`, `indent(width)` and `format(spec)` with their size checked before they run."""
    def bounded(*args: Any, **kwargs: Any) -> Any:
        values = [a for a in args if not hasattr(a, "environment")]  # jinja passes the eval context first
        if name == "format" and values and isinstance(values[0], str):
            _check_format(values[0])
        else:
            widths = [a for a in (*values[1:], *kwargs.values()) if isinstance(a, int) and not isinstance(a, bool)]
            lines = str(values[0]).count("\n") + 1 if name == "indent" and values else 1
            _check_size(max(widths, default=0) * lines)
        return function(*args, **kwargs)

    for attribute in ("jinja_pass_arg",):  # keep jinja's marker of filters that take the context
        if hasattr(function, attribute):
            setattr(bounded, attribute, getattr(function, attribute))
    return bounded


def _environment() -> Any:
    from jinja2 import nodes
    from jinja2.visitor import NodeTransformer
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationExtension(Extension):
        """`{% generation %}...{% endgeneration %}`: marks assistant output with sentinels."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_mark", []), [], [], body).set_lineno(lineno)

        def _mark(self, caller: Any) -> str:
            return _GEN_OPEN + caller() + _GEN_CLOSE

    def raise_exception(message: str) -> None:
        from jinja2.exceptions import TemplateError

        raise TemplateError(message)

    def tojson(value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        if indent is not None and not (isinstance(indent, str) and len(indent) <= MAX_TOJSON_INDENT) and \
                not (isinstance(indent, int) and 0 <= indent <= MAX_TOJSON_INDENT):
            raise _security_error(f"tojson indent {str(indent)[:20]} is not an indent of at most"
                                  f" {MAX_TOJSON_INDENT} spaces")
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    class BoundedEnvironment(ImmutableSandboxedEnvironment):
        """Jinja's sandbox (no attribute escapes, `range` of at most 100,000) with bounded sizes: a
        template cannot build a string or list beyond `MAX_TEMPLATE_ITEMS` (`{{ 'A' * 10**10 }}` took
        6 GB in 4 s) by repetition, concatenation, powers or padding methods and filters."""

        intercepted_binops = frozenset({"*", "+", "-", "/", "//", "**", "%"})
        intercepted_unops = frozenset({"-", "+"})

        def _parse(self, source: str, name: Optional[str], filename: Optional[str]) -> Any:
            """The template's syntax tree, with every `{% for %}` loop's iterable counted (`_CountedLoop`) and
            every `~` concatenation sized (`_bounded_str_join`)."""
            tree = super()._parse(source, name, filename)
            for loop in tree.find_all(nodes.For):
                loop.iter = nodes.Call(nodes.Name("_easydata_counted", "load", lineno=loop.lineno), [loop.iter], [],
                                       None, None, lineno=loop.lineno)

            class BoundConcat(NodeTransformer):
                def visit_Concat(self, node: Any) -> Any:  # noqa: N802 - jinja's visitor naming
                    node = self.generic_visit(node)
                    return nodes.Call(nodes.Name("_easydata_str_join", "load", lineno=node.lineno), list(node.nodes),
                                      [], None, None, lineno=node.lineno)

            return BoundConcat().visit(tree)

        def call_unop(self, context: Any, operator: str, arg: Any) -> Any:
            _tick()
            return super().call_unop(context, operator, arg)

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            _tick()
            if operator == "+" and type(left) is str and type(right) is str:  # the common case: one check
                _check_size(len(left) + len(right))
                return left + right
            ints = isinstance(left, int) or isinstance(right, int)  # (bools too: they are ints)
            if ints:
                _check_int(left)
                _check_int(right)
                if operator == "*" and isinstance(left, int) and isinstance(right, int) and \
                        left.bit_length() + right.bit_length() > MAX_TEMPLATE_INT_BITS:
                    _check_int(1 << (left.bit_length() + right.bit_length()))  # refused before it is computed
            if operator == "%" and isinstance(left, str):
                _check_format(left)
            elif operator == "*":
                count, item = (right, left) if isinstance(right, int) else (left, right)
                if isinstance(count, int) and isinstance(item, (str, list, tuple)):
                    _check_size(len(item) * max(count, 0))
            elif operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
                _check_size(len(left) + len(right))
            elif operator == "**" and isinstance(left, int) and isinstance(right, int):
                _check_size(abs(left).bit_length() * max(right, 0) // 8)
                if abs(left) > 1 and abs(left).bit_length() * max(right, 0) > MAX_TEMPLATE_INT_BITS:
                    raise _security_error(f"the template raises an integer to the power {right:,}: more than the"
                                          f" {MAX_TEMPLATE_INT_BITS:,} bits a chat template may compute with")
            result = super().call_binop(context, operator, left, right)
            if ints:
                _check_int(result)
            return result

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            _tick()
            name = getattr(__obj, "__name__", "")
            owner = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)  # jinja wraps str.format
            if name in ("format", "format_map") and isinstance(owner, str):
                _check_format(owner)
            if name in _PADDING_METHODS and isinstance(owner, str):
                widths = [a for a in (*args, *kwargs.values()) if isinstance(a, int)]
                _check_size(max(widths, default=0) * (8 if name == "expandtabs" else 1))
            if name == "replace" and isinstance(owner, str) and len(args) >= 2 and all(isinstance(a, str) for a in args[:2]):
                old, new = args[0], args[1]
                _check_size(len(owner) + (owner.count(old) if old else len(owner) + 1) * len(new))
            if name == "join" and isinstance(owner, str) and args and isinstance(args[0], (list, tuple)):
                _check_size(sum(len(str(p)) for p in args[0]) + len(owner) * max(len(args[0]) - 1, 0))
            result = super().call(__context, __obj, *args, **kwargs)
            if isinstance(result, (str, list, tuple)):
                _check_size(len(result))
            _check_int(result)
            return result

    env = BoundedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[GenerationExtension, loopcontrols])
    for name in _PADDING_FILTERS:  # compiled templates call filters directly: bound them here
        env.filters[name] = _bounded_filter(name, env.filters[name])
    env.filters["tojson"] = tojson
    env.globals["_easydata_counted"] = _CountedLoop
    env.globals["_easydata_str_join"] = _bounded_str_join
    env.concat = _bounded_concat  # type: ignore[method-assign]  # compiled templates join through it
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: TEMPLATE_NOW.strftime(fmt)
    return env


#: What `strftime_now` formats. Llama 3.1-3.3, Granite 3 and gpt-oss templates write "today's" date into every
#: conversation's system header; the clock's date would make a run's rows depend on the day it ran (a run resumed
#: after midnight mixes two dates in one output). The date those templates fall back to without `strftime_now`
#: (Llama 3.1's "26 Jul 2024") keeps a run's rows the same on any day.
TEMPLATE_NOW = datetime.datetime(2024, 7, 26)


class ChatRenderer:
    """Renders conversations with one chat template (and, for conversations with tools, its tokenizer's
    `tool_use` template where it has one: `TokenizerInfo.tool_template`).

    Args:
      template: jinja chat template text.
      special_tokens: template variables such as `bos_token`, `eos_token`.
      end_of_turn_tokens: special token strings that may close an assistant turn (all of the
        tokenizer's special tokens is a good choice).
      template_kwargs: more template variables (`chat.template_kwargs`), beside the special tokens.
      tool_template: what conversations with tools are rendered with instead of `template`.

    Raises:
      ValueError: the template does not parse, or `template_kwargs` sets what the renderer passes itself.
    """

    def __init__(self, template: str, special_tokens: dict[str, Optional[str]],
                 end_of_turn_tokens: Iterable[str], template_kwargs: Optional[dict[str, Any]] = None,
                 tool_template: Optional[str] = None):
        reserved = sorted(TEMPLATE_ARGUMENTS.intersection(template_kwargs or {}))
        if reserved:
            raise ValueError(f"template_kwargs must not set {', '.join(reserved)}: the renderer passes them itself")
        environment = _environment()
        texts = {False: template, True: tool_template or template}  # with tools or not -> the template
        compiled: dict[str, Any] = {}
        for text in texts.values():
            try:
                compiled[text] = compiled.get(text) or environment.from_string(text)
            except Exception as e:  # a template that does not even parse is a config error
                raise ValueError(f"chat template does not parse: {e}") from e
        self._compiled = {tools: compiled[text] for tools, text in texts.items()}
        self._marks = {tools: "generation" in text and "endgeneration" in text for tools, text in texts.items()}
        self._variables = {**{k: v for k, v in special_tokens.items() if v is not None}, **(template_kwargs or {})}
        self._end_tokens = sorted((t for t in end_of_turn_tokens if t), key=len, reverse=True)

    @classmethod
    def for_tokenizer(cls, tokenizer: Any, template: str, template_kwargs: Optional[dict[str, Any]] = None
                      ) -> "ChatRenderer":
        """A renderer with a `TokenizerHandle`'s special tokens as template variables (`bos_token`,
        `eos_token`, `pad_token`), and `template_kwargs` (`chat.template_kwargs`) beside them, and all its
        special tokens as end-of-turn candidates; conversations with tools get its `tool_use` template where
        `template` is its default (`TokenizerInfo.tool_template`)."""
        tok = tokenizer.tokenizer
        ids = {"bos_token": tokenizer.bos_token_id, "eos_token": tokenizer.eos_token_id,
               "pad_token": tokenizer.pad_token_id}
        variables = {name: tok.id_to_token(i) if i is not None else None for name, i in ids.items()}
        specials = [t.content for t in tok.get_added_tokens_decoder().values() if t.special]
        return cls(template, variables, specials, template_kwargs, tokenizer.info.tool_template(template))

    def _uses_generation(self, conversation: Conversation) -> bool:
        """The template this conversation is rendered with marks its trained text with `{% generation %}`."""
        return self._marks[conversation.tools is not None]

    def render(self, conversation: Conversation) -> tuple[str, list[tuple[int, int]]]:
        """Returns `(text, spans)`: the rendered conversation and its trained character spans.

        Raises:
          ChatError: when the template fails or an assistant message cannot be located.
        """
        _BUDGET.deadline = time.monotonic() + MAX_TEMPLATE_SECONDS  # for all of this record's renderings
        for m in conversation.messages:
            if _GEN_OPEN in m["content"] or _GEN_CLOSE in m["content"]:
                raise ChatError("message content holds reserved private-use characters U+E000/U+E001")
        text = _tokenizable(self._render(conversation.messages, conversation.tools, False))
        if self._uses_generation(conversation):
            text, spans = _strip_generation_marks(text)
        else:
            spans = self._prefix_spans(text, conversation)
            spans = spans if spans is not None else self._locate(text, conversation)
        untrained = conversation.untrained()
        if untrained:
            spans = self._trained_spans(text, spans, conversation, untrained)
        return text, spans

    def _trained_spans(self, text: str, spans: list[tuple[int, int]], conversation: Conversation,
                       untrained: list[int]) -> list[tuple[int, int]]:
        """The spans of the assistant messages that are trained, when some are context (a prompt's few-shot
        turns, `weight` 0). A span belongs to the last assistant message whose turn starts at or before it;
        message i's turn starts where the messages before it, rendered with the generation prompt, end.

        Raises:
          ChatError: when the messages before an assistant message so rendered are not where the text begins
            (a template that writes them otherwise once more follows): its turn cannot be told from the others.
        """
        messages, starts = conversation.messages, []
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            rendered = self._render(messages[:i], conversation.tools, True) if i else ""
            if self._uses_generation(conversation):
                rendered = _strip_generation_marks(rendered)[0]
            if not text.startswith(rendered.rstrip()):
                if i < conversation.first_trained:
                    raise ChatError("the prompt holds assistant turns the template writes otherwise once the"
                                    " completion follows: they cannot be told from the completion's")
                raise ChatError(f"assistant message {i} cannot be told from the others (the template writes the"
                                " messages before it otherwise once it follows), so it cannot be left untrained")
            starts.append((len(rendered.rstrip()), i))
        owners = [max((i for at, i in starts if at <= start), default=-1) for start, _ in spans]
        return [span for span, owner in zip(spans, owners) if owner not in untrained]

    def render_text(self, conversation: Conversation, *, generation_prompt: bool = False) -> str:
        """Only the rendered text (what `transformers`' `apply_chat_template(..., tokenize=False)` gives).

        Raises:
          ChatError: when the template fails.
        """
        _BUDGET.deadline = time.monotonic() + MAX_TEMPLATE_SECONDS
        text = _tokenizable(self._render(conversation.messages, conversation.tools, generation_prompt))
        return _strip_generation_marks(text)[0] if self._uses_generation(conversation) else text

    def _render(self, messages: Sequence[dict[str, Any]], tools: Optional[list[Any]], generation_prompt: bool) -> str:
        _BUDGET.steps = _BUDGET.built = 0
        try:
            text = self._compiled[tools is not None].render(messages=list(messages), tools=tools,
                                                            add_generation_prompt=generation_prompt, **self._variables)
        except (Exception, RecursionError) as e:
            raise ChatError(f"chat template error: {type(e).__name__}: {e}") from None
        if len(text) > MAX_TEMPLATE_ITEMS:
            raise ChatError(f"chat template error: it rendered {len(text):,} characters, more than"
                            f" {MAX_TEMPLATE_ITEMS:,}")
        return text

    def _prefix_spans(self, text: str, conversation: Conversation) -> Optional[list[tuple[int, int]]]:
        """Assistant spans by prefix rendering, or None when the template is not prefix-stable."""
        messages, spans = conversation.messages, []
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            try:
                before = self._render(messages[:i], conversation.tools, True)
                through = self._render(messages[:i + 1], conversation.tools, False)
            except ChatError:
                return None  # e.g. a template that refuses a conversation ending with a user turn
            if not (text.startswith(through) and through.startswith(before)):
                return None
            start, end = len(before), len(through.rstrip())
            content = message["content"].strip()
            at = text.find(content, start, end) if content else -1
            reasoning = _reasoning(message)
            if at >= 0 and text[start:at].strip() and not (reasoning and reasoning in text[start:at]):
                # Non-blank text before the content: a role header the template wrote because it
                # ignores `add_generation_prompt`. Scaffolding is never trained, so start at the content.
                # The message's reasoning written before it (Qwen3's `<think>` block) is the model's own.
                start = at
            if end <= start:
                if not content and not message.get("tool_calls"):
                    continue  # a blank assistant turn (the template may trim it away): nothing to train
                raise ChatError(f"assistant message {i} does not appear in the rendered template")
            _require_calls_written(message, i, text[start:end])
            spans.append((start, end))
        return spans

    def _locate(self, text: str, conversation: Conversation) -> list[tuple[int, int]]:
        """Assistant spans by finding each message's content in conversation order. Other messages move
        the search on, but a template may also move them (Mistral v0.3 writes the system message into
        the last user turn, after every assistant turn): an assistant message not found after them is
        looked for after the previous assistant span instead. An assistant message with tool calls or
        reasoning (`REASONING_FIELDS`) is found by what the template writes for it (`_written_turn`): its
        content alone would leave the calls or the reasoning untrained, and a call with no content would
        not be found at all."""
        messages = conversation.messages
        spans, cursor, floor = [], 0, 0
        for index, message in enumerate(messages):
            if message["role"] == "assistant" and (message.get("tool_calls") or _reasoning(message)):
                try:
                    start, end = self._written_turn(text, conversation, index, cursor)
                except ChatError:
                    if message.get("tool_calls"):
                        raise
                else:
                    spans.append((start, end))
                    cursor = floor = end
                    continue
            content = message["content"]
            if not content.strip():
                continue  # empty or blank: nothing to find (blank text is anywhere) and nothing to train
            start, found = _find(text, content, cursor)
            if start < 0 and message["role"] == "assistant" and cursor > floor:
                start, found = _find(text, content, floor)
            if start < 0:
                if message["role"] == "assistant":
                    raise ChatError(f"assistant message {index} does not appear in the rendered template")
                continue  # templates may drop or rewrite system/tool text; it is never trained anyway
            end = start + len(found)
            cursor = end
            if message["role"] == "assistant":
                end = self._end_of_turn(text, end)
                spans.append((start, end))
                cursor = floor = end
        return spans

    def _written_turn(self, text: str, conversation: Conversation, index: int, cursor: int) -> tuple[int, int]:
        """The span of assistant message `index` in `text`, found from what the template writes for it when it
        is the conversation's last turn (the conversation through it, less the conversation before it with the
        generation prompt): the longest tail of that, from a line start, found after `cursor`. A template that
        is not prefix-stable writes the last turn differently (Qwen3 opens it with an empty `<think>` block,
        earlier turns without), but the calls and the end of the turn the same way.

        Raises:
          ChatError: when no tail holding more than the end-of-turn token is in the text.
        """
        messages = conversation.messages
        try:
            before = self._render(messages[:index], conversation.tools, True)
            through = self._render(messages[:index + 1], conversation.tools, False)
        except ChatError:
            before = through = ""
        written = through[len(before):].rstrip() if through.startswith(before) else ""
        for at in [0, *(i + 1 for i, ch in enumerate(written) if ch == "\n")]:
            tail = written[at:].lstrip()
            core = tail
            for token in self._end_tokens:
                core = core.replace(token, "")
            if not core.strip():
                break  # only the end of the turn is left: it would be found anywhere
            start = text.find(tail, cursor)
            if start >= 0:
                _require_calls_written(messages[index], index, tail)
                return start, start + len(tail)
        raise ChatError(f"assistant message {index} (tool calls) does not appear in the rendered template")

    def _end_of_turn(self, text: str, end: int) -> int:
        probe = end
        while probe < len(text) and text[probe] in " \t\r\n":
            probe += 1
        for token in self._end_tokens:
            if text.startswith(token, probe):
                return probe + len(token)
        return end


def _require_calls_written(message: dict[str, Any], index: int, written: str) -> None:
    """Refuses an assistant turn whose tool calls the template did not write into it (ChatML and the other
    plain templates ignore `tool_calls`): the turn would train the model to end its answer where it should
    call a tool. A call is written when its function's name is in the turn's text outside the message's
    content and reasoning: an answer that names the tool ("Let me search for that." calling `search`) is
    not the call.

    Raises:
      ChatError: naming the calls left out.
    """
    calls = message.get("tool_calls") or []
    if not calls:
        return
    for said in (message.get("content"), *(message.get(field) for field in REASONING_FIELDS)):
        if isinstance(said, str) and said.strip():
            written = written.replace(said if said in written else said.strip(), "", 1)
    names = []
    for call in calls:  # objects (`easydata.io.conversations` refuses anything else)
        function = call.get("function")
        name = (function if isinstance(function, dict) else call).get("name")
        if isinstance(name, str) and name and name not in written:
            names.append(name)
    if names:
        raise ChatError(f"assistant message {index} calls {', '.join(names)}, which the chat template does not"
                        " write (it ignores `tool_calls`): use a template that renders tool calls")


def _tokenizable(text: str) -> str:
    """A rendered conversation the tokenizer can take. A lone surrogate can reach it from a record's checked
    text only through a JSON string the conversation decoded (LLaMA-Factory's `tools` and `function_call`):
    refused here, with the reason a record's own text gets, instead of failing the job in the tokenizer.

    Raises:
      ChatError: the text holds a lone UTF-16 surrogate.
    """
    problem = unusable_value(text, "the rendered conversation")
    if problem:
        raise ChatError(problem)
    return text


def _reasoning(message: dict[str, Any]) -> str:
    """The message's reasoning text, stripped ("" when it has none)."""
    for field in REASONING_FIELDS:
        value = message.get(field)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def _find(text: str, content: str, cursor: int) -> tuple[int, str]:
    """Position of `content` (or of its stripped form, as templates often `.strip()`) after `cursor`."""
    start = text.find(content, cursor)
    if start >= 0:
        return start, content
    stripped = content.strip()
    if stripped and stripped != content:
        start = text.find(stripped, cursor)
        if start >= 0:
            return start, stripped
    return -1, content


def _strip_generation_marks(marked: str) -> tuple[str, list[tuple[int, int]]]:
    """Removes the generation sentinels; returns the clean text and the spans they enclosed."""
    pieces, spans, length, opened = [], [], 0, None
    for part in re.split(f"([{_GEN_OPEN}{_GEN_CLOSE}])", marked):
        if part == _GEN_OPEN:
            opened = length
        elif part == _GEN_CLOSE:
            if opened is not None and length > opened:
                spans.append((opened, length))
            opened = None
        else:
            pieces.append(part)
            length += len(part)
    return "".join(pieces), spans
