"""EasyData's transforms: lazy, per-row changes of a `ShardedDataSource`.

A transform is any callable `example -> example` (or `None` to drop the example).
`TransformedShardedSource(source, transform)` and the field helpers live with the protocol
(`easydata.core.protocols`, so every source's `.map()` / `.filter()` can use them);
`ChatTemplateTransform` renders messages with this package's sandboxed chat renderer
(`easydata.compat.chat_transform`); `TokenizedShardedSource` tokenizes with the pipeline's tokenizer
code, in batches, so its ids equal the Beam job's for the same settings.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Sequence

import numpy as np

from easydata.compat.chat_transform import ChatTemplateTransform, as_tokenizer_handle
from easydata.core.protocols import (DropFields, FilterTransform, MapTransform, RenameFields, SelectFields,
                                     DerivedShardedSource, ShardedDataSource, TransformedShardedSource)

__all__ = ["TransformedShardedSource", "MapTransform", "FilterTransform", "RenameFields", "SelectFields",
           "DropFields", "ChatTemplateTransform", "TokenizedShardedSource", "as_tokenizer_handle"]

Example = dict[str, Any]


class TokenizedShardedSource(DerivedShardedSource):
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

    def _apply(self, examples: Iterator[Example]) -> Iterator[Example]:
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

    def __len__(self) -> int:
        return len(self.source)
