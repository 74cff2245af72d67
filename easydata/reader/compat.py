"""EasyData-compatible names for users migrating from `easydel.data`, as thin wrappers.

`ParquetShardedSource(glob)` / `ArrowShardedSource(glob)` list shard files (`shard_names`) and open
one as an iterator of row dicts (`open_shard(name)`, `open_shard_at_row(name, row)`), streaming one
record batch at a time. `AsyncDataLoader(source, batch_size, ...)` yields numpy batches of rows,
prefetched on a background thread.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Iterator

import numpy as np

from easydata.filesystems import expand_data_files, get_fs, join
from easydata.formats import iter_shard_batches
from easydata.manifest import MANIFEST_NAME, member_path, read_manifest

__all__ = ["ParquetShardedSource", "ArrowShardedSource", "AsyncDataLoader"]


class _ShardedSource:
    """EasyData's `ShardedDataSource` over files (a path, glob or list) or an easydata output directory
    (read through its manifest: its shards, never `manifest.json` or dead letters; `name=` picks one
    dataset of the output, default all)."""

    fmt = ""

    def __init__(self, data_files: str | list[str], *, name: str | None = None):
        if isinstance(data_files, str) and _is_output(data_files):
            manifest = read_manifest(data_files)
            datasets = manifest.get("datasets") or {}
            if name is not None and name not in datasets:
                raise ValueError(f"'{data_files}' has no dataset {name!r}; it has {sorted(datasets)}")
            self.shard_names = [member_path(data_files, shard["path"], "shard path")
                                for dataset, info in sorted(datasets.items()) if name in (None, dataset)
                                for shard in info.get("shards", [])]
        else:
            self.shard_names = expand_data_files([data_files] if isinstance(data_files, str) else data_files)

    def num_shards(self) -> int:
        return len(self.shard_names)

    def open_shard(self, shard_name: str) -> Iterator[dict[str, Any]]:
        """Rows of one shard, in order."""
        return self.open_shard_at_row(shard_name, 0)

    def open_shard_at_row(self, shard_name: str, row: int) -> Iterator[dict[str, Any]]:
        """Rows of one shard from `row` on (earlier record batches are skipped, not decoded)."""
        if shard_name not in self.shard_names:
            raise ValueError(f"unknown shard {shard_name!r}; see shard_names")
        seen = 0
        for batch in iter_shard_batches(shard_name, self.fmt):
            if seen + batch.num_rows <= row:
                seen += batch.num_rows
                continue
            yield from batch.slice(max(row - seen, 0)).to_pylist()
            seen += batch.num_rows

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for name in self.shard_names:
            yield from self.open_shard(name)


def _is_output(path: str) -> bool:
    """`path` is a directory holding an easydata manifest."""
    fs, inner = get_fs(path)
    try:
        return fs.isdir(inner) and fs.exists(join(inner, MANIFEST_NAME))
    except Exception:  # a glob or an unreachable URL: not an output directory
        return False


class ParquetShardedSource(_ShardedSource):
    """Parquet shards matched by a path, glob or list (any fsspec URL)."""

    fmt = "parquet"


class ArrowShardedSource(_ShardedSource):
    """Arrow IPC shards matched by a path, glob or list (any fsspec URL)."""

    fmt = "arrow"


class AsyncDataLoader:
    """Batches of `batch_size` rows from a source as dicts of numpy arrays (ragged columns as lists).

    Args:
      source: a `ParquetShardedSource` / `ArrowShardedSource` (anything iterating row dicts).
      batch_size: rows per batch; the last, smaller batch is kept.
      prefetch_enabled: prepare batches on a background thread.
      prefetch_buffer_size: batches prepared ahead.
    """

    def __init__(self, source: Any, batch_size: int, prefetch_enabled: bool = True, prefetch_buffer_size: int = 4):
        if batch_size <= 0:
            raise ValueError(f"`batch_size` must be positive, got {batch_size}.")
        self.source, self.batch_size = source, batch_size
        self.prefetch_enabled, self.prefetch_buffer_size = prefetch_enabled, prefetch_buffer_size

    def _batches(self) -> Iterator[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for row in self.source:
            rows.append(row)
            if len(rows) == self.batch_size:
                yield _stack(rows)
                rows = []
        if rows:
            yield _stack(rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if not self.prefetch_enabled:
            yield from self._batches()
            return
        with _Prefetcher(self._batches(), self.prefetch_buffer_size) as batches:
            yield from batches


def _stack(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in rows[0]:
        values = [r[key] for r in rows]
        try:
            out[key] = np.asarray(values)
            if out[key].dtype == object:
                out[key] = values
        except ValueError:  # ragged
            out[key] = values
    return out


class _Prefetcher:
    """Runs a generator on a daemon thread, `depth` items ahead; re-raises its errors; stops cleanly."""

    _DONE = object()

    def __init__(self, source: Iterator[Any], depth: int):
        self._source, self._queue = source, queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="easydata-prefetch", daemon=True)

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            for item in self._source:
                if not self._put(item):
                    return
            self._put(self._DONE)
        except BaseException as e:  # hand the error to the consumer
            self._put(e)

    def __enter__(self) -> Iterator[Any]:
        self._thread.start()
        return self._items()

    def _items(self) -> Iterator[Any]:
        while True:
            item = self._queue.get()
            if item is self._DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
