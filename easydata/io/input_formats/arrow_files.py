"""Arrow IPC inputs: files split by record batches (`record_batch_ranges`), streams read whole; every
batch is fully validated before use (IPC buffers are used as they are in the file), and a corrupt batch
of a file is dead-lettered with its rows. Reading counts the Arrow bytes of the columns read, which planning
estimates from a file's first batches (`read_size`)."""

from __future__ import annotations

import collections
import threading
from typing import Any, Iterator, Optional

from easydata.config import DatasetConfig
from easydata.errors import InputError
from easydata.io.filesystems import decompressed_size, file_facts
from easydata.io.documents import DocumentCollector, InputSplit, raise_unless_corrupt
from easydata.io.input_formats.tables import columns_needed, emit_bounded, open_table_file, read_from, reject_block

__all__ = ["read_arrow", "record_batch_ranges", "batch_rows", "read_size"]


def record_batch_ranges(path: str, size: int, target_bytes: int) -> list[tuple[int, Optional[int], int]]:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    with open_table_file(path) as f:
        try:
            n = ipc.open_file(f).num_record_batches
        except pa.ArrowInvalid:  # stream format (e.g. HF datasets cache files): not seekable
            return [(0, None, size)]
    per = max(1, int(n * target_bytes / max(size, 1)))
    return [(s, min(s + per, n), size * (min(s + per, n) - s) // max(n, 1)) for s in range(0, n, per)] or \
        [(0, 0, 0)]


#: Record batches `read_size` reads to estimate a whole file's.
SIZE_BATCHES = 8


def read_size(path: str, dataset: DatasetConfig, messages_field: str = "messages") -> int:
    """The bytes reading the whole file counts (the Arrow bytes of the columns `dataset` reads), from its first
    `SIZE_BATCHES` record batches: exact for a file of no more; else their bytes per batch times the file's
    batches, or for a stream (whose batches are not listed) their bytes per byte of the stream they span.
    Planning's count of an Arrow input, whose file size says little of it (compressed buffers, columns not
    read)."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    with open_table_file(path) as f:
        try:
            reader = ipc.open_file(f)
        except pa.ArrowInvalid:
            f.seek(0)
            read = spanned = 0
            for i, batch in enumerate(ipc.open_stream(f)):
                if i == SIZE_BATCHES:  # more than were read
                    return read * decompressed_size(path, file_facts(path)[0]) // max(spanned, 1)
                read += _columns_read(batch, dataset, messages_field).nbytes
                spanned = f.tell()
            return read
        batches = min(reader.num_record_batches, SIZE_BATCHES)
        read = sum(_columns_read(reader.get_batch(i), dataset, messages_field).nbytes for i in range(batches))
        return read * reader.num_record_batches // batches if batches else 0


class _BatchRowCounts:
    """The rows of an Arrow IPC file's record batches, counted once per file version in a process.

    Only a batch's own message says how many rows it holds, and pyarrow reads a batch whole (decompressing
    the buffers of a compressed file): a split summing the rows of the batches before it read all of them
    again, so reading a large compressed file split by split was quadratic in its splits (400 MB, 17 splits:
    2.96 CPU s against 0.34 for one pass), and planning's sample counted every batch of the file for each
    place it read. Counts are kept per `(path, version)` for the last `CAPACITY` files, and learnt from the
    batches a split reads as well as from counting.
    """

    CAPACITY = 64

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offsets: collections.OrderedDict[tuple[str, str], list[int]] = collections.OrderedDict()

    def _entry(self, key: tuple[str, str]) -> list[int]:
        """Rows before batch `i` for the `i` counted so far (`[0]` at first); the caller holds the lock. A file
        without a version (none was planned) is counted afresh each time."""
        if not key[1]:
            return [0]
        offsets = self._offsets.pop(key, None) or [0]
        self._offsets[key] = offsets
        while len(self._offsets) > self.CAPACITY:
            self._offsets.popitem(last=False)
        return offsets

    def offsets(self, reader: Any, key: tuple[str, str], stop: int) -> list[int]:
        """Rows before each batch `0 .. stop` (`stop + 1` numbers), counting the batches not counted yet."""
        with self._lock:
            offsets = self._entry(key)
            while len(offsets) <= stop:
                offsets.append(offsets[-1] + reader.get_batch(len(offsets) - 1).num_rows)
            return offsets[:stop + 1]

    def learn(self, key: tuple[str, str], index: int, rows: int) -> None:
        """Batch `index` holds `rows` rows (read by a split): kept when the batches before it are counted."""
        with self._lock:
            offsets = self._entry(key)
            if len(offsets) == index + 1:
                offsets.append(offsets[-1] + rows)


_COUNTS = _BatchRowCounts()


def batch_rows(reader: Any, path: str, version: str, start: int, end: int) -> list[int]:
    """The rows of record batches `start .. end - 1` of the Arrow IPC file `reader` reads (`path` at
    `version`), counted at most once per process."""
    offsets = _COUNTS.offsets(reader, (path, version), end)[start:]
    return [b - a for a, b in zip(offsets, offsets[1:])]


def read_arrow(split: InputSplit, dataset: DatasetConfig, out: DocumentCollector) -> Iterator[int]:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    key = (split.path, split.version)
    with open_table_file(split.path) as f:
        try:
            reader = ipc.open_file(f)
            indices = range(split.start, split.end or reader.num_record_batches)
            row = _COUNTS.offsets(reader, key, split.start)[-1]
        except pa.ArrowInvalid:
            f.seek(0)
            try:
                stream = ipc.open_stream(f)
            except pa.ArrowInvalid as e:
                raise InputError(f"'{split.path}' is not an Arrow IPC file or stream: {e}") from None
            # A stream has no index of its batches: a corrupt one ends the reading (see `read_split`).
            read_from(out, stream.schema, dataset)
            row = 0
            for batch in stream:
                batch = _checked_arrow_batch(batch, dataset, out.messages_field)
                yield from emit_bounded(batch, row, out, dataset, size=batch.nbytes)
                row += batch.num_rows
                if out.done:
                    return
            return
        read_from(out, reader.schema, dataset)
        for i in indices:
            batch, rows = None, None
            try:
                batch = reader.get_batch(i)
                rows = batch.num_rows
                batch = _checked_arrow_batch(batch, dataset, out.messages_field)
            except Exception as e:  # a corrupt batch of a file: its rows are dead letters, the others are read
                raise_unless_corrupt(e, split.path, f"in Arrow record batch {i}")
                if rows is None:
                    raise  # its row count is unknown, so the positions of the rows after it are too
                _COUNTS.learn(key, i, rows)
                row = reject_block(out, f"Arrow record batch {i}", row, rows, e)
                yield 0
                if out.done:
                    return
                continue
            _COUNTS.learn(key, i, rows)
            yield from emit_bounded(batch, row, out, dataset, size=batch.nbytes)
            row += batch.num_rows
            if out.done:
                return


def _checked_arrow_batch(batch: Any, dataset: DatasetConfig, messages_field: str) -> Any:
    """The batch's needed columns, fully validated: IPC buffers are used as they are in the file, and a
    corrupt offset would make pyarrow read out of bounds (a crash, found by tests/test_hostile_input.py).
    Checking is cheap next to tokenizing."""
    batch = _columns_read(batch, dataset, messages_field)
    batch.validate(full=True)
    return batch


def _columns_read(batch: Any, dataset: DatasetConfig, messages_field: str) -> Any:
    return batch.select(columns_needed(dataset, batch.schema.names, messages_field))
