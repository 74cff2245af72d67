"""Rows of hash groups moved between stages through files: how local runs group without holding them.

The local runners' GroupByKey keeps every grouped element in memory, encoded, and a job's memory grew
with its corpus. Instead, a local run writes each bundle's elements of each group (the rows as the
shuffle encodes them, `easydata.io.compact_rows`: the same bytes a remote runner's shuffle carries)
to one file per group under the run's staging directory (`GroupFileWriter`), groups only the file
names, and the consumer reads the files of its group (`read_group_files`). Which file an element
arrives in does not matter: every consumer sorts its group by (hash, key) first. The files go with
the staging directory when the run commits; a retried bundle writes new files under new names, and
Beam drops the failed attempt's names.

A file is a sequence of frames: an 8-byte little-endian length, then that many bytes.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, Iterable, Iterator

from easydata.io.filesystems import join, open_arrow_file
from easydata.io.staging import Staging

__all__ = ["GroupFileWriter", "read_group_files", "group_files_dir", "discard_group_files"]


_LENGTH = struct.Struct("<Q")


def group_files_dir(staging: str, stage: str, name: str) -> str:
    """Where a run's group files of one grouping stage (`pack`, `sort`) of one output go."""
    return Staging(staging).groups(stage, name)


def discard_group_files(staging: str) -> int:
    """Removes the group files an earlier attempt of the run left in `staging` (a resumed run writes its
    own: the old ones would only fill the disk until the commit); returns the bytes freed."""
    from easydata.io.filesystems import get_fs

    fs, root = get_fs(Staging(staging).groups())
    if not fs.exists(root):
        return 0
    freed = sum(int(size or 0) for size in fs.du(root, total=False).values())
    fs.rm(root, recursive=True)
    return freed


class GroupFileWriter:
    """Appends encoded elements to one file per group.

    Args:
      directory: where the files go (created as needed; local or any fsspec URL).
    """

    def __init__(self, directory: str):
        self._directory = directory
        self._open: dict[int, tuple[str, Any]] = {}

    def write(self, group: int, element: bytes) -> None:
        """Appends `element` to `group`'s file."""
        entry = self._open.get(group)
        if entry is None:
            path = join(self._directory, f"g{group:06d}-{uuid.uuid4().hex}.rows")
            entry = self._open[group] = (path, open_arrow_file(path, "wb"))
        entry[1].write(_LENGTH.pack(len(element)))
        entry[1].write(element)

    def close(self) -> list[tuple[int, str]]:
        """Closes every file; returns `(group, path)` of each file written since the last `close`."""
        closed = []
        for group, (path, sink) in self._open.items():
            sink.close()
            closed.append((group, path))
        self._open = {}
        return closed


def read_group_files(paths: Iterable[str]) -> Iterator[memoryview]:
    """The elements of a group's files, in file order."""
    for path in sorted(paths):
        with open_arrow_file(path, "rb") as f:
            data = memoryview(f.read())
        at = 0
        while at < len(data):
            (size,) = _LENGTH.unpack_from(data, at)
            yield data[at + _LENGTH.size:at + _LENGTH.size + size]
            at += _LENGTH.size + size
