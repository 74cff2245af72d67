"""Rows of hash groups moved between stages through files: how local runs group without holding them.

The local runners' GroupByKey keeps every grouped element in memory, encoded: each Arrow batch of
token rows was pickled, buffered and unpickled (three copies), and a job's memory grew with its
corpus. Instead, a local run writes each bundle's rows of each group to one uncompressed Arrow IPC
file under the run's staging directory (`GroupFileWriter`), groups only the file names, and the
consumer memory-maps the files of its group (`read_group_files`). Which file a row arrives in does
not matter: every consumer sorts its group by (hash, key) first. The files go with the staging
directory when the run commits; a retried bundle writes new files under new names, and Beam drops the
failed attempt's names.
"""

from __future__ import annotations

import uuid
from typing import Any, Iterable, Iterator, NamedTuple

import pyarrow as pa

from easydata.io.filesystems import join, open_arrow_file
from easydata.io.formats import iter_shard_batches

__all__ = ["GroupFileWriter", "read_group_files"]


class _OpenFile(NamedTuple):
    path: str
    sink: Any
    writer: Any
    schema: pa.Schema


class GroupFileWriter:
    """Appends record batches to one Arrow IPC file per group (a new file when a group's schema changes).

    Args:
      directory: where the files go (created as needed; local or any fsspec URL).
    """

    def __init__(self, directory: str):
        self._directory = directory
        self._open: dict[int, _OpenFile] = {}
        self._closed: list[tuple[int, str]] = []

    def write(self, group: int, batch: pa.RecordBatch) -> None:
        """Appends `batch` to `group`'s file."""
        entry = self._open.get(group)
        if entry is not None and not entry.schema.equals(batch.schema):  # additional fields typed differently
            self._finish(group)
            entry = None
        if entry is None:
            path = join(self._directory, f"g{group:06d}-{uuid.uuid4().hex}.arrow")
            sink = open_arrow_file(path, "wb")
            entry = self._open[group] = _OpenFile(path, sink, pa.ipc.new_file(sink, batch.schema), batch.schema)
        entry.writer.write_batch(batch)

    def _finish(self, group: int) -> None:
        done = self._open.pop(group)
        done.writer.close()
        done.sink.close()
        self._closed.append((group, done.path))

    def close(self) -> list[tuple[int, str]]:
        """Closes every file; returns `(group, path)` of each file written since the last `close`."""
        for group in list(self._open):
            self._finish(group)
        closed, self._closed = self._closed, []
        return closed


def read_group_files(paths: Iterable[str]) -> Iterator[pa.RecordBatch]:
    """The record batches of a group's files (memory-mapped when local: no copy)."""
    for path in sorted(paths):
        yield from iter_shard_batches(path, "arrow")
