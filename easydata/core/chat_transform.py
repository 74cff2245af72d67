"""`ChatTemplateTransform`: an example's messages rendered into text with a chat template.

Uses this package's sandboxed renderer (`easydata.text.chat`, the one the pipeline uses), with the
template and special-token strings of a transformers tokenizer object, or of a tokenizer loaded by
path / hub id. It does not depend on the source protocol, so `ShardedDataSource.apply_chat_template`
can use it.
"""

from __future__ import annotations

from typing import Any, Optional

from easydata.io.conversations import json_messages
from easydata.text.chat import ChatRenderer, conversation_from_record

__all__ = ["ChatTemplateTransform", "as_tokenizer_handle"]

Example = dict[str, Any]


def as_tokenizer_handle(tokenizer: Any) -> Any:
    """A `TokenizerHandle` from a path, hub id, `TokenizerConfig`, handle or `transformers` fast tokenizer (as it is
    now: tokens added, special tokens or a template set since it was loaded are kept: `saved_copy`)."""
    from easydata.config import TokenizerConfig
    from easydata.text.tokenizer import TokenizerHandle, load_tokenizer

    if isinstance(tokenizer, TokenizerHandle):
        return tokenizer
    if isinstance(tokenizer, (str, TokenizerConfig)):
        return load_tokenizer(tokenizer)
    if hasattr(tokenizer, "save_pretrained") and hasattr(tokenizer, "backend_tokenizer"):
        from easydata.text.tokenizer import saved_copy

        return load_tokenizer(str(saved_copy(tokenizer)))  # what the object holds now, not the files it came from
    raise TypeError(f"expected a tokenizer path, hub id, TokenizerConfig or transformers tokenizer, got"
                    f" {type(tokenizer).__name__}")


def _renderer(tokenizer: Any, template: Optional[str], template_kwargs: Optional[dict[str, Any]] = None
              ) -> ChatRenderer:
    """A renderer for a transformers tokenizer object (its template and special-token strings) or
    for anything `as_tokenizer_handle` takes; `template` may name one of the tokenizer's own (`tool_use`) or a
    shipped one (`chatml`, `llama3`, ...);
    `template_kwargs` are more template variables (`chat.template_kwargs`)."""
    from easydata.text.chat_templates import named_template, tool_template

    transformers_object = hasattr(tokenizer, "apply_chat_template")  # read what it holds, load nothing
    handle = None if transformers_object else as_tokenizer_handle(tokenizer)
    if transformers_object:
        held = tokenizer.chat_template  # text, or templates by name (`default`, `tool_use`, ...)
        own = held if isinstance(held, dict) else {"default": held} if held else {}
    else:
        own = dict(handle.info.chat_templates)
    text = (own.get(template) or named_template(template) or template) if template else own.get("default")
    if not text:
        name = tokenizer.name_or_path if transformers_object else handle.info.name_or_path
        having = f"chat templates named {', '.join(sorted(own))} but none named 'default'" if own \
            else "no chat_template"
        raise ValueError(f"tokenizer '{name}' has {having}; pass chat_template=")
    if handle is not None:
        return ChatRenderer.for_tokenizer(handle, text, template_kwargs)
    variables = {"bos_token": tokenizer.bos_token, "eos_token": tokenizer.eos_token,
                 "pad_token": tokenizer.pad_token, "unk_token": tokenizer.unk_token}
    return ChatRenderer(text, variables, tokenizer.all_special_tokens, template_kwargs, tool_template(own, text))


class ChatTemplateTransform:
    """Renders an example's messages (OpenAI `role`/`content` or ShareGPT `from`/`value`) into text.

    Args:
      tokenizer: a transformers tokenizer, a tokenizer directory / hub id, or a `TokenizerConfig`;
        its `chat_template` is used unless `chat_template` is given.
      messages_field: the field holding the messages.
      output_field: where the rendered text goes (the other fields are kept).
      add_generation_prompt: end with the assistant prompt (for generation, not training).
      drop_messages: remove `messages_field` from the result.
      template_kwargs: more template variables, as `apply_chat_template(**kwargs)` takes them (`date_string`,
        `enable_thinking`, ...; the pipeline's `chat.template_kwargs`).
    """

    def __init__(self, tokenizer: Any, messages_field: str = "messages", output_field: str = "text",
                 add_generation_prompt: bool = False, chat_template: Optional[str] = None,
                 drop_messages: bool = False, template_kwargs: Optional[dict[str, Any]] = None):
        self.renderer = _renderer(tokenizer, chat_template, template_kwargs)
        self.messages_field, self.output_field = messages_field, output_field
        self.add_generation_prompt, self.drop_messages = add_generation_prompt, drop_messages

    def __call__(self, example: Example) -> Example:
        messages = example.get(self.messages_field)
        if isinstance(messages, str):  # kept as JSON text (a CSV file's, a table's string column), as the
            messages = json_messages(messages) or messages  # pipeline reads a chat field's string
        conversation = conversation_from_record(messages, example)
        text = self.renderer.render_text(conversation, generation_prompt=self.add_generation_prompt)
        out = {k: v for k, v in example.items() if not (self.drop_messages and k == self.messages_field)}
        out[self.output_field] = text
        return out
