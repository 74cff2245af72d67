"""EasyData's transforms: lazy, per-row changes of a `ShardedDataSource`.

A transform is any callable `example -> example` (or `None` to drop the example).
`TransformedShardedSource(source, transform)` applies one lazily, shard by shard, so resuming at a
row and sharding over workers keep working. `ChatTemplateTransform` renders messages with this
package's sandboxed chat renderer (`easydata.chat`, the same one the pipeline uses) and the
tokenizer's template; `TokenizedShardedSource` tokenizes with the pipeline's tokenizer code, in
batches, so its ids equal the Beam job's for the same settings.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np

from easydata.chat import ChatRenderer, conversation_from_record
from easydata.core.protocols import ShardedDataSource

__all__ = ["TransformedShardedSource", "MapTransform", "FilterTransform", "RenameFields", "SelectFields",
           "DropFields", "ChatTemplateTransform", "TokenizedShardedSource", "as_tokenizer_handle"]

Example = dict[str, Any]


class TransformedShardedSource(ShardedDataSource):
    """`source` with `transform` applied to every example (examples it maps to None are dropped)."""

    def __init__(self, source: ShardedDataSource, transform: Callable[[Example], Optional[Example]]):
        self.source, self.transform_fn = source, transform

    @property
    def shard_names(self) -> Sequence[str]:
        return self.source.shard_names

    def num_shards(self) -> int:
        return self.source.num_shards()

    def _apply(self, examples: Iterator[Example]) -> Iterator[Example]:
        for example in examples:
            out = self.transform_fn(example)
            if out is not None:
                yield out

    def open_shard(self, shard_name: str) -> Iterator[Example]:
        return self._apply(self.source.open_shard(shard_name))

    def open_shard_at_row(self, shard_name: str, row: int) -> Iterator[Example]:
        """Rows counted in the source (a filter may drop some): resuming is exact either way."""
        return self._apply(self.source.open_shard_at_row(shard_name, row))


class MapTransform:
    def __init__(self, fn: Callable[[Example], Example]):
        self.fn = fn

    def __call__(self, example: Example) -> Example:
        return self.fn(example)


class FilterTransform:
    def __init__(self, predicate: Callable[[Example], bool]):
        self.predicate = predicate

    def __call__(self, example: Example) -> Optional[Example]:
        return example if self.predicate(example) else None


class RenameFields:
    def __init__(self, mapping: dict[str, str]):
        self.mapping = dict(mapping)

    def __call__(self, example: Example) -> Example:
        return {self.mapping.get(k, k): v for k, v in example.items()}


class SelectFields:
    def __init__(self, fields: Sequence[str]):
        self.fields = list(fields)

    def __call__(self, example: Example) -> Example:
        return {k: example[k] for k in self.fields if k in example}


class DropFields:
    def __init__(self, fields: Sequence[str]):
        self.fields = set(fields)

    def __call__(self, example: Example) -> Example:
        return {k: v for k, v in example.items() if k not in self.fields}


def as_tokenizer_handle(tokenizer: Any) -> Any:
    """A `TokenizerHandle` from a path, hub id, `TokenizerConfig` or handle."""
    from easydata.config import TokenizerConfig
    from easydata.tokenizer import TokenizerHandle, load_tokenizer

    if isinstance(tokenizer, TokenizerHandle):
        return tokenizer
    if isinstance(tokenizer, (str, TokenizerConfig)):
        return load_tokenizer(tokenizer)
    path = getattr(tokenizer, "name_or_path", None)
    if isinstance(path, str):  # a transformers tokenizer: load the same files with `tokenizers`
        return load_tokenizer(path)
    raise TypeError(f"expected a tokenizer path, hub id, TokenizerConfig or transformers tokenizer, got"
                    f" {type(tokenizer).__name__}")


def _renderer(tokenizer: Any, template: Optional[str]) -> ChatRenderer:
    """A renderer for a transformers tokenizer object (its template and special-token strings) or
    for anything `as_tokenizer_handle` takes."""
    if hasattr(tokenizer, "apply_chat_template"):  # transformers: read what it holds, load nothing
        text = template or tokenizer.chat_template
        if not text:
            raise ValueError(f"tokenizer '{tokenizer.name_or_path}' has no chat_template; pass chat_template=")
        variables = {"bos_token": tokenizer.bos_token, "eos_token": tokenizer.eos_token,
                     "pad_token": tokenizer.pad_token, "unk_token": tokenizer.unk_token}
        return ChatRenderer(text, variables, tokenizer.all_special_tokens)
    handle = as_tokenizer_handle(tokenizer)
    text = template or handle.info.chat_template
    if not text:
        raise ValueError(f"tokenizer '{handle.info.name_or_path}' has no chat_template; pass chat_template=")
    return ChatRenderer.for_tokenizer(handle, text)


class ChatTemplateTransform:
    """Renders an example's messages (OpenAI `role`/`content` or ShareGPT `from`/`value`) into text.

    Args:
      tokenizer: a transformers tokenizer, a tokenizer directory / hub id, or a `TokenizerConfig`;
        its `chat_template` is used unless `chat_template` is given.
      messages_field: the field holding the messages.
      output_field: where the rendered text goes (the other fields are kept).
      add_generation_prompt: end with the assistant prompt (for generation, not training).
      drop_messages: remove `messages_field` from the result.
    """

    def __init__(self, tokenizer: Any, messages_field: str = "messages", output_field: str = "text",
                 add_generation_prompt: bool = False, chat_template: Optional[str] = None,
                 drop_messages: bool = False):
        self.renderer = _renderer(tokenizer, chat_template)
        self.messages_field, self.output_field = messages_field, output_field
        self.add_generation_prompt, self.drop_messages = add_generation_prompt, drop_messages

    def __call__(self, example: Example) -> Example:
        conversation = conversation_from_record(example.get(self.messages_field), example)
        text = self.renderer.render_text(conversation, generation_prompt=self.add_generation_prompt)
        out = {k: v for k, v in example.items() if not (self.drop_messages and k == self.messages_field)}
        out[self.output_field] = text
        return out


class TokenizedShardedSource(ShardedDataSource):
    """`source` with `input_ids` and `attention_mask` added, tokenized in batches on the fly.

    Args:
      source: examples with text in `content_field`.
      tokenizer: a tokenizer directory / hub id, `TokenizerConfig`, handle or transformers tokenizer.
      max_length: keep at most this many tokens per example (EOS included); None: all.
      content_field: the text field.
      add_special_tokens: False: no BOS.
      add_eos: append EOS (the pipeline's default, which keeps packed documents apart).
      remove_columns: fields left out of the result (the text stays unless listed).
      batch_size: examples per tokenizer call.
    """

    def __init__(self, source: ShardedDataSource, tokenizer: Any, max_length: Optional[int] = None,
                 content_field: str = "text", add_special_tokens: bool = True, add_eos: bool = True,
                 remove_columns: Sequence[str] = (), batch_size: int = 256):
        self.source, self.tokenizer = source, tokenizer
        self._handle: Any = None
        self.max_length, self.content_field = max_length, content_field
        self.add_bos = None if add_special_tokens else False
        self.add_eos, self.remove_columns, self.batch_size = add_eos, set(remove_columns), batch_size

    @property
    def handle(self) -> Any:
        """The tokenizer, loaded on first use (building the source costs nothing)."""
        if self._handle is None:
            self._handle = as_tokenizer_handle(self.tokenizer)
        return self._handle

    @property
    def shard_names(self) -> Sequence[str]:
        return self.source.shard_names

    def num_shards(self) -> int:
        return self.source.num_shards()

    def _tokenized(self, examples: Iterator[Example]) -> Iterator[Example]:
        batch: list[Example] = []
        for example in examples:
            batch.append(example)
            if len(batch) == self.batch_size:
                yield from self._encode(batch)
                batch = []
        if batch:
            yield from self._encode(batch)

    def _encode(self, batch: list[Example]) -> Iterator[Example]:
        texts = [str(example.get(self.content_field) or "") for example in batch]
        flat, offsets = self.handle.encode_batch(texts, add_bos=self.add_bos, add_eos=self.add_eos,
                                                 max_length=self.max_length)
        for i, example in enumerate(batch):
            ids = flat[offsets[i]:offsets[i + 1]]
            out = {k: v for k, v in example.items() if k not in self.remove_columns}
            out["input_ids"] = ids.tolist()
            out["attention_mask"] = np.ones(len(ids), dtype=np.int32).tolist()
            yield out

    def open_shard(self, shard_name: str) -> Iterator[Example]:
        return self._tokenized(self.source.open_shard(shard_name))

    def open_shard_at_row(self, shard_name: str, row: int) -> Iterator[Example]:
        return self._tokenized(self.source.open_shard_at_row(shard_name, row))

    def __len__(self) -> int:
        return len(self.source)
