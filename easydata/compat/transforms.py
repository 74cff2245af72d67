"""EasyData's transforms: lazy, per-row changes of a `ShardedDataSource`.

A transform is any callable `example -> example` (or `None` to drop the example).
`TransformedShardedSource(source, transform)` and the field helpers live with the protocol
(`easydata.core.protocols`, so every source's `.map()` / `.filter()` can use them);
`ChatTemplateTransform` renders messages with this package's sandboxed chat renderer
(`easydata.compat.chat_transform`); `TokenizedShardedSource` tokenizes with the pipeline's own stages
(`easydata.text.stages.DocumentStages`), in batches, so its ids equal the Beam job's for the same settings, and with the same tokenizer
engines (`easydata.text.engines`): a fast one only after it gave `tokenizers`' ids, checked again on a
sample while it runs.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from easydata.core.chat_transform import ChatTemplateTransform, as_tokenizer_handle
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
      engine: `tokenize.engine` of the pipeline: `auto` (a fast engine where it gives `tokenizers`' ids),
        `hf`, `fastokens` or `gigatoken`. The choice is made at the first batch a process encodes, on
        the built-in adversarial set and that batch (`engine_choice` then says what and why); 1 % of
        examples (by a hash of shard and row) are encoded again with `tokenizers` and a mismatch keeps
        its ids (`engine_counts`).
    """

    def __init__(self, source: ShardedDataSource, tokenizer: Any, max_length: Optional[int] = None,
                 content_field: str = "text", add_special_tokens: bool = True, add_eos: bool = True,
                 remove_columns: Sequence[str] = (), batch_size: int = 256, engine: str = "auto"):
        from easydata.text.engines import ENGINE_NAMES

        if engine not in ENGINE_NAMES:
            raise ValueError(f"engine must be one of {', '.join(ENGINE_NAMES)}, got {engine!r}")
        self.source, self.tokenizer = source, tokenizer
        self._handle: Any = None
        self.max_length, self.content_field = max_length, content_field
        self.add_bos = None if add_special_tokens else False
        self.add_eos, self.remove_columns, self.batch_size = add_eos, set(remove_columns), batch_size
        self.engine = engine
        self._document_stages: Any = None
        self._reset_engine()

    def _reset_engine(self) -> None:
        self.engine_choice: Any = None  # the `EngineChoice`, after the first batch
        self._verified: Any = None  # its `VerifiedEngine`; False: hf
        self._counts: collections.Counter = collections.Counter()
        self._choosing = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:  # a copy in another process chooses (and counts) again
        return {k: v for k, v in self.__dict__.items()
                if k not in ("engine_choice", "_verified", "_counts", "_choosing", "_document_stages")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._document_stages = None
        self._reset_engine()

    @property
    def handle(self) -> Any:
        """The tokenizer, loaded on first use (building the source costs nothing)."""
        if self._handle is None:
            self._handle = as_tokenizer_handle(self.tokenizer)
        return self._handle

    def engine_counts(self) -> dict[str, int]:
        """What the fast engine did in this process: `documents`, `verified` against `tokenizers`,
        `mismatches` (their `tokenizers` ids kept) and `hf_documents` (after 3 mismatches it stops)."""
        if self._verified:
            self._counts.update(self._verified.take_counts())
        return dict(self._counts)

    def _fast_engine(self, texts: list[str]) -> Any:
        """The `VerifiedEngine` to encode with, None for `tokenizers`: chosen once, on `texts`."""
        with self._choosing:
            if self._verified is None:
                self.engine_choice, verified = self.handle.choose_engine(self.engine, texts, self.add_bos is None)
                self._verified = verified or False
                if verified is None and self.engine != "hf":
                    logging.getLogger(__name__).info("tokenizer encodes with hf: %s", self.engine_choice.reason)
        return self._verified or None

    def open_shard(self, shard_name: str) -> Iterator[Example]:
        return self._apply(self.source.open_shard(shard_name), shard_name)

    def open_shard_at_row(self, shard_name: str, row: int) -> Iterator[Example]:
        return self._apply(self.source.open_shard_at_row(shard_name, row), shard_name, row)

    def _apply(self, examples: Iterator[Example], shard_name: str = "", row: int = 0) -> Iterator[Example]:
        batch: list[Example] = []
        for example in examples:
            batch.append(example)
            if len(batch) == self.batch_size:
                yield from self._encode(batch, shard_name, row)
                row += len(batch)
                batch = []
        if batch:
            yield from self._encode(batch, shard_name, row)

    def _stages(self) -> Any:
        """The pipeline's own chat-and-tokenize composition (`easydata.text.stages.DocumentStages`), with this
        source's settings: `max_length` truncates as `truncation: truncate` does."""
        if self._document_stages is None:
            from easydata.config import TokenizeStageConfig
            from easydata.text.stages import DocumentStages

            config = TokenizeStageConfig(max_length=self.max_length, truncation="truncate" if self.max_length else "none",
                                         add_bos=self.add_bos, add_eos=self.add_eos, engine=self.engine)
            self._document_stages = DocumentStages(self.handle, config, seed=0)
        return self._document_stages

    def _encode(self, batch: list[Example], shard_name: str, row: int) -> Iterator[Example]:
        from easydata.io.documents import DocumentBatch

        texts = [str(example.get(self.content_field) or "") for example in batch]
        keys = [f"{shard_name}@{row + i}" for i in range(len(batch))]  # which ones are checked: any process, any resume
        stages = self._stages()
        stages.engine = self._fast_engine(texts)
        rows = stages.process(DocumentBatch(dataset=shard_name, keys=keys, texts=texts, fields={})).rows
        ids_column = rows.column(rows.schema.get_field_index("input_ids"))
        flat, offsets = ids_column.values.to_numpy(), ids_column.offsets.to_numpy()
        for i, example in enumerate(batch):
            ids = flat[offsets[i]:offsets[i + 1]]
            out = {k: v for k, v in example.items() if k not in self.remove_columns}
            out["input_ids"] = ids.tolist()
            out["attention_mask"] = np.ones(len(ids), dtype=np.int32).tolist()
            yield out

    def __len__(self) -> int:
        return len(self.source)
