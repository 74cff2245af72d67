"""The interfaces EasyData code is written against: `ShardedDataSource`, `BaseStage`, `PipelineContext`.

A `ShardedDataSource` is a dataset cut into named shards, each opened as an iterator of row dicts,
and resumable at a row (`open_shard_at_row`); EasyDeL's trainers and `AsyncDataLoader` take any of
them. Every source class of `easydata` (files, Hub datasets, transforms, mixes, prepared outputs)
subclasses it, and so can a user's own. The lazy per-row helpers (`TransformedShardedSource`, `MapTransform`, ...) live here too, so every
source's `.map()` / `.filter()` can use them. A custom stage subclasses `BaseStage` and maps the
pipeline's `{name: source}` dict to a new one; `Pipeline.apply(stage)` runs it in the chain.
Nothing here imports Apache Beam, JAX or `datasets`.
"""

from __future__ import annotations

import dataclasses
import operator
from abc import ABC, abstractmethod
from typing import Any, Callable, Iterator, Optional, Sequence

__all__ = ["ShardInfo", "ShardedDataSource", "start_row", "BaseStage", "PipelineContext", "DerivedShardedSource", "TransformedShardedSource",
           "MapTransform", "FilterTransform", "RenameFields", "SelectFields", "DropFields"]

Example = dict[str, Any]


def start_row(row: Any) -> int:
    """`row` for `open_shard_at_row`: a non-negative integer (a negative or fractional row started the shard
    from its first row, or a row after it, without a word).

    Raises:
      ValueError: anything else.
    """
    try:
        index = operator.index(row)  # ints and numpy's integers; not floats or strings
    except TypeError:
        index = -1
    if isinstance(row, bool) or index < 0:
        raise ValueError(f"`row` must be a non-negative integer, got {row!r}.")
    return index


@dataclasses.dataclass
class ShardInfo:
    """What is known about one shard without reading it."""

    shard_id: int
    shard_name: str
    num_rows: Optional[int] = None
    byte_size: Optional[int] = None
    url: Optional[str] = None


class ShardedDataSource(ABC):
    """Rows (dicts) in named shards; each shard can be read from its start or from any row.

    Subclasses implement `shard_names` and `open_shard`; the rest has working defaults.
    """

    @property
    @abstractmethod
    def shard_names(self) -> Sequence[str]:
        """The shards, in order (paths, URLs or any names `open_shard` understands)."""

    @abstractmethod
    def open_shard(self, shard_name: str) -> Iterator[dict[str, Any]]:
        """The rows of one shard, in order."""

    def num_shards(self) -> int:
        return len(self.shard_names)

    def open_shard_at_row(self, shard_name: str, row: int) -> Iterator[dict[str, Any]]:
        """The rows of one shard from `row` on (resume). The default skips rows one by one; file
        sources skip whole record batches instead."""
        rows = self.open_shard(shard_name)
        for _ in range(start_row(row)):
            if next(rows, None) is None:
                break
        return rows

    def get_shard_info(self, shard_name: str) -> Optional[ShardInfo]:
        return None

    def iter_shards(self, shard_indices: Optional[Sequence[int]] = None, start_shard: int = 0,
                    start_row: int = 0) -> Iterator[dict[str, Any]]:
        """Rows of the chosen shards (all by default), resuming at `(start_shard, start_row)`."""
        indices = list(shard_indices) if shard_indices is not None else list(range(self.num_shards()))
        names = self.shard_names
        for i, index in enumerate(indices[start_shard:], start=start_shard):
            if i == start_shard and start_row > 0:
                yield from self.open_shard_at_row(names[index], start_row)
            else:
                yield from self.open_shard(names[index])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.iter_shards()

    def __len__(self) -> int:
        raise TypeError(f"{type(self).__name__} does not know its length without reading it")

    # ---- lazy transforms (EasyData's helpers) ------------------------------------------------------

    def map(self, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> "ShardedDataSource":
        return TransformedShardedSource(self, MapTransform(fn))

    def filter(self, predicate: Callable[[dict[str, Any]], bool]) -> "ShardedDataSource":
        return TransformedShardedSource(self, FilterTransform(predicate))

    def transform(self, transform: Callable[[dict[str, Any]], Any]) -> "ShardedDataSource":
        return TransformedShardedSource(self, transform)

    def rename_fields(self, mapping: dict[str, str]) -> "ShardedDataSource":
        return TransformedShardedSource(self, RenameFields(mapping))

    def select_fields(self, fields: list[str]) -> "ShardedDataSource":
        return TransformedShardedSource(self, SelectFields(fields))

    def drop_fields(self, fields: list[str]) -> "ShardedDataSource":
        return TransformedShardedSource(self, DropFields(fields))

    def apply_chat_template(self, tokenizer: Any, messages_field: str = "messages", output_field: str = "text",
                            **kwargs: Any) -> "ShardedDataSource":
        from easydata.core.chat_transform import ChatTemplateTransform

        return TransformedShardedSource(self, ChatTemplateTransform(tokenizer, messages_field=messages_field,
                                                                    output_field=output_field, **kwargs))


class DerivedShardedSource(ShardedDataSource):
    """A source whose examples are made from `source`'s, shard by shard (same shards): subclasses
    define `_apply` on one shard's examples."""

    source: ShardedDataSource

    @property
    def shard_names(self) -> Sequence[str]:
        return self.source.shard_names

    def num_shards(self) -> int:
        return self.source.num_shards()

    def _apply(self, examples: Iterator[Example]) -> Iterator[Example]:
        raise NotImplementedError

    def open_shard(self, shard_name: str) -> Iterator[Example]:
        return self._apply(self.source.open_shard(shard_name))

    def open_shard_at_row(self, shard_name: str, row: int) -> Iterator[Example]:
        """Rows counted in the source (a filter may drop some): resuming is exact either way."""
        return self._apply(self.source.open_shard_at_row(shard_name, row))


class TransformedShardedSource(DerivedShardedSource):
    """`source` with `transform` applied to every example (examples it maps to None are dropped)."""

    def __init__(self, source: ShardedDataSource, transform: Callable[[Example], Optional[Example]]):
        self.source, self.transform_fn = source, transform

    def _apply(self, examples: Iterator[Example]) -> Iterator[Example]:
        for example in examples:
            out = self.transform_fn(example)
            if out is not None:
                yield out


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


class BaseStage(ABC):
    """A pipeline stage: `process(data, context)` maps `{name: ShardedDataSource}` to a new dict."""

    def __init__(self, config: Any = None):
        self._config = config if config is not None else {}
        self._metrics: dict[str, Any] = {}

    @property
    @abstractmethod
    def name(self) -> str:
        """The stage's name (what `Pipeline.get_stages()` lists)."""

    @abstractmethod
    def process(self, data: dict[str, ShardedDataSource], context: "PipelineContext") -> dict[str, ShardedDataSource]:
        """The stage's output for `data`."""

    def validate_config(self, config: Any) -> bool:
        return True

    def get_metrics(self) -> dict[str, Any]:
        return dict(self._metrics)

    def _update_metric(self, key: str, value: Any) -> None:
        self._metrics[key] = value


@dataclasses.dataclass
class PipelineContext:
    """What every stage of one pipeline shares: its config, seed, position and metrics."""

    config: Any
    seed: Optional[int] = None
    step: int = 0
    epoch: int = 0
    metrics: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def update_step(self, step: int) -> None:
        self.step = step

    def update_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def record_metric(self, stage: str, key: str, value: Any) -> None:
        self.metrics.setdefault(stage, {})[key] = value

    def get_metrics(self) -> dict[str, dict[str, Any]]:
        return {stage: dict(values) for stage, values in self.metrics.items()}
