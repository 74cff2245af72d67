"""`GroupBatchesViaFiles`: a GroupByKey for `(group, pa.RecordBatch)` that moves the rows through files.

Same input and output as `beam.GroupByKey()` on `(group, RecordBatch)` pairs, but only file names
are shuffled: each bundle appends its batches to one Arrow IPC file per group under `directory`
(`easydata.io.group_files`), and each group's files are memory-mapped on the other side. For runners
whose workers share this machine's files (the local runners, Dask on a local cluster): it saves the
pickling of every row and keeps the grouped rows out of the runner's memory.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import apache_beam as beam
import pyarrow as pa
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from easydata.io.group_files import GroupFileWriter, read_group_files
from transforms.coders import GroupedBatches

__all__ = ["GroupBatchesViaFiles"]


class _WriteGroupFilesFn(beam.DoFn):
    def __init__(self, directory: str):
        self._directory = directory
        self._writer: GroupFileWriter | None = None

    def start_bundle(self) -> None:
        self._writer = GroupFileWriter(self._directory)

    def process(self, element: tuple[int, pa.RecordBatch]) -> Iterator[Any]:
        group, batch = element
        if batch.num_rows:
            self._writer.write(group, batch)
        return iter(())

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for group, path in self._writer.close():
            yield WindowedValue((group, path), MAX_TIMESTAMP, (GlobalWindow(),))


def _read_group(element: tuple[int, Iterable[str]]) -> tuple[int, list[pa.RecordBatch]]:
    group, paths = element
    return group, list(read_group_files(paths))


class GroupBatchesViaFiles(beam.PTransform):
    """`(group, RecordBatch)` -> `(group, [RecordBatch, ...])`, the rows moved through files.

    Args:
      directory: where the group files go (below the run's staging directory).
    """

    def __init__(self, directory: str):
        super().__init__()
        self._directory = directory

    def expand(self, batches: beam.PCollection) -> beam.PCollection:
        return (batches
                | "WriteGroupFiles" >> beam.ParDo(_WriteGroupFilesFn(self._directory))
                | "GroupFileNames" >> beam.GroupByKey()
                | "MapGroupFiles" >> beam.Map(_read_group).with_output_types(GroupedBatches))
