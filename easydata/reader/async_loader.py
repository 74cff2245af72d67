"""EasyData's `AsyncDataLoader`: batches of rows from any source, prepared on a background thread.

Rows become a dict of numpy arrays per batch; token lists of different lengths are padded on the
right to the batch's longest (pad 0; `attention_mask` 0 there), so `batch["input_ids"]` is always a
`(batch_size, seq_len)` array. Non-numeric columns stay lists. An optional shuffle buffer
(`shuffle_buffer_size`) mixes rows deterministically in `seed`. For exact global shuffling,
sharding over hosts and resume, read an easydata output with `easydata.reader.TokenReader`.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Iterable, Iterator, Optional

import numpy as np

from easydata.reader.batches import is_count

__all__ = ["AsyncDataLoader", "collate_rows"]


class AsyncDataLoader:
    """Batches of `batch_size` rows from `source`.

    Args:
      source: any iterable of row dicts (easydata or EasyDeL sources, `datasets` objects, lists).
      batch_size: rows per batch.
      prefetch_enabled, prefetch_buffer_size: prepare this many batches ahead on a thread.
      prefetch_workers: accepted (one thread prepares batches; rows are read in order).
      shuffle_buffer_size: shuffle rows through a buffer of this many (0 or None: source order).
      seed: the shuffle buffer's seed.
      drop_last: drop the last batch when it is smaller than `batch_size`.
      collate_fn: turns a list of rows into a batch (default `collate_rows`).
    """

    def __init__(self, source: Iterable[dict[str, Any]], batch_size: int = 8, prefetch_enabled: bool = True,
                 prefetch_workers: int = 2, prefetch_buffer_size: int = 4, shuffle_buffer_size: Optional[int] = None,
                 seed: Optional[int] = None, drop_last: bool = False, collate_fn: Any = None, **_: Any):
        if not is_count(batch_size, least=1):
            raise ValueError(f"`batch_size` must be a positive integer, got {batch_size!r}.")
        self.source, self.batch_size = source, batch_size
        self.prefetch_enabled, self.prefetch_workers = prefetch_enabled, prefetch_workers
        self.prefetch_buffer_size = max(prefetch_buffer_size, 1)
        self.shuffle_buffer_size, self.seed, self.drop_last = shuffle_buffer_size or 0, seed, drop_last
        self.collate_fn = collate_fn or collate_rows

    def _rows(self) -> Iterator[dict[str, Any]]:
        # EasyDeL's own sources iterate through `iter_shards`; ours, lists and `datasets` objects directly
        rows = self.source.iter_shards() if hasattr(self.source, "iter_shards") else iter(self.source)
        if self.shuffle_buffer_size <= 1:
            yield from rows
            return
        rng = np.random.default_rng(self.seed)
        buffer: list[dict[str, Any]] = []
        for row in rows:
            if len(buffer) < self.shuffle_buffer_size:
                buffer.append(row)
                continue
            i = int(rng.integers(len(buffer)))
            yield buffer[i]
            buffer[i] = row
        rng.shuffle(buffer)
        yield from buffer

    def _batches(self) -> Iterator[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for row in self._rows():
            rows.append(row)
            if len(rows) == self.batch_size:
                yield self.collate_fn(rows)
                rows = []
        if rows and not self.drop_last:
            yield self.collate_fn(rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if not self.prefetch_enabled:
            yield from self._batches()
            return
        with _Prefetcher(self._batches(), self.prefetch_buffer_size) as batches:
            yield from batches


def _pad(values: list[Any], fill: int) -> Optional[np.ndarray]:
    """Equal-length or ragged lists of numbers -> one right-padded 2-D array (None: not numeric lists)."""
    if not all(isinstance(v, (list, tuple, np.ndarray)) for v in values):
        return None
    arrays = [np.asarray(v) for v in values]
    if any(a.ndim != 1 or a.dtype.kind not in "iub" for a in arrays if a.size):
        return None
    width = max((len(a) for a in arrays), default=0)
    dtype = np.result_type(*[a.dtype for a in arrays if a.size]) if any(a.size for a in arrays) else np.int32
    out = np.full((len(arrays), width), fill, dtype=dtype)
    for i, a in enumerate(arrays):
        out[i, :len(a)] = a
    return out


def collate_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows -> a batch: numbers as arrays, token lists as right-padded `(rows, longest)` arrays. Every key of
    any row is in the batch (the first row's alone were: a field only later rows have was dropped); a row
    without it gives None there, so the key is a list."""
    out: dict[str, Any] = {}
    for key in dict.fromkeys(key for row in rows for key in row):
        values = [r.get(key) for r in rows]
        padded = _pad(values, 0)
        if padded is not None:
            out[key] = padded
            continue
        array = np.asarray(values) if all(isinstance(v, (int, float, bool, np.generic)) for v in values) else None
        out[key] = array if array is not None else values
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
