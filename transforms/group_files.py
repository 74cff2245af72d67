"""`GroupViaFiles`: a GroupByKey for `(group, bytes)` that moves the bytes through files.

Same input and output as `beam.GroupByKey()` on `(group, encoded rows)` pairs, but only file names
are shuffled: each bundle appends its elements to one file per group under `directory`
(`easydata.io.group_files`), read back on the other side. For runners whose workers share this
machine's files (the local runners, Dask on a local cluster): it keeps the grouped rows out of the
runner's memory.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, List, Tuple

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MAX_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from easydata.io.group_files import GroupFileWriter, read_group_files
from transforms.failures import classified_failures

__all__ = ["GroupViaFiles"]


@classified_failures
class _WriteGroupFilesFn(beam.DoFn):
    def __init__(self, directory: str):
        self._directory = directory
        self._writer: GroupFileWriter | None = None

    def start_bundle(self) -> None:
        self._writer = GroupFileWriter(self._directory)

    def process(self, element: tuple[int, bytes]) -> Iterator[Any]:
        self._writer.write(*element)
        return iter(())

    def finish_bundle(self) -> Iterator[WindowedValue]:
        for group, path in self._writer.close():
            yield WindowedValue((group, path), MAX_TIMESTAMP, (GlobalWindow(),))


@classified_failures
def _read_group(element: tuple[int, Iterable[str]], decode: Callable[[memoryview], Any]) -> tuple[int, list[Any]]:
    group, paths = element
    return group, [decode(e) for e in read_group_files(paths)]


class GroupViaFiles(beam.PTransform):
    """`(group, bytes)` -> `(group, [decode(bytes), ...])`, the bytes moved through files.

    Args:
      directory: where the group files go (below the run's staging directory).
      decode: what each element becomes when read back (on the reading worker, before Beam sees it).
      output_type: the type hint of the output (`(group, [decoded, ...])`), which picks its coder.
    """

    def __init__(self, directory: str, decode: Callable[[memoryview], Any] = bytes, output_type: Any = None):
        super().__init__()
        self._directory, self._decode = directory, decode
        self._output_type = output_type or Tuple[int, List[bytes]]

    def expand(self, batches: beam.PCollection) -> beam.PCollection:
        return (batches
                | "WriteGroupFiles" >> beam.ParDo(_WriteGroupFilesFn(self._directory))
                | "GroupFileNames" >> beam.GroupByKey()
                | "MapGroupFiles" >> beam.Map(_read_group, self._decode).with_output_types(self._output_type))
