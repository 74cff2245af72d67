"""`SplitRows`: one dataset's token rows -> one PCollection per split (train / validation / ...).

Wiring only; the assignment is `easydata.ops.splits` (a pure function of the document key, so every row
of a document, including all its windows, lands in the same split, whatever the runner).
"""

from __future__ import annotations

from typing import Any, Iterator

import apache_beam as beam
import pyarrow as pa

from easydata.ops.splits import partition_rows
from transforms.failures import classified_failures

__all__ = ["SplitRows"]


@classified_failures
class _PartitionFn(beam.DoFn):
    def __init__(self, dataset: str, fractions: dict[str, float], split_seed: int):
        self._dataset, self._split_seed = dataset, split_seed
        self._names, self._fractions = list(fractions), list(fractions.values())

    def process(self, batch: pa.RecordBatch) -> Iterator[Any]:
        for name, rows in partition_rows(batch, dataset=self._dataset, names=self._names, fractions=self._fractions,
                                         split_seed=self._split_seed):
            yield beam.pvalue.TaggedOutput(name, rows)


class SplitRows(beam.PTransform):
    """Partitions token rows by split.

    Args:
      dataset: the dataset the rows come from (part of the split hash).
      fractions: split name -> fraction (`SaveStageConfig.split_fractions()`).
      split_seed: `save.split_seed`.

    Returns:
      A dict `{split name: PCollection of row batches}`.
    """

    def __init__(self, *, dataset: str, fractions: dict[str, float], split_seed: int):
        super().__init__()
        self._dataset, self._fractions, self._split_seed = dataset, dict(fractions), split_seed

    def expand(self, rows: beam.PCollection) -> dict[str, beam.PCollection]:
        parts = rows | "Partition" >> beam.ParDo(_PartitionFn(self._dataset, self._fractions, self._split_seed)
                                                 ).with_outputs(*self._fractions)
        for name in self._fractions:  # tagged outputs take no type hint: their elements are record batches
            parts[name].element_type = pa.RecordBatch
        return {name: parts[name] for name in self._fractions}

    def display_data(self) -> dict[str, Any]:
        return {"dataset": self._dataset, "fractions": str(self._fractions)}
