"""Arrow IPC inputs: files split by record batches (`record_batch_ranges`), streams read whole; every
batch is fully validated before use (IPC buffers are used as they are in the file), and a corrupt batch
of a file is dead-lettered with its rows."""

from __future__ import annotations

from typing import Any, Iterator, Optional

from easydata.config import DatasetConfig
from easydata.errors import InputError
from easydata.io.documents import DocumentCollector, InputSplit, raise_unless_corrupt
from easydata.io.input_formats.tables import columns_needed, emit_bounded, open_table_file, reject_block

__all__ = ["read_arrow", "record_batch_ranges"]


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


def read_arrow(split: InputSplit, dataset: DatasetConfig, out: DocumentCollector) -> Iterator[int]:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    with open_table_file(split.path) as f:
        try:
            reader = ipc.open_file(f)
            indices = range(split.start, split.end or reader.num_record_batches)
            row = sum(reader.get_batch(i).num_rows for i in range(split.start))
        except pa.ArrowInvalid:
            f.seek(0)
            try:
                stream = ipc.open_stream(f)
            except pa.ArrowInvalid as e:
                raise InputError(f"'{split.path}' is not an Arrow IPC file or stream: {e}") from None
            # A stream has no index of its batches: a corrupt one ends the reading (see `read_split`).
            row = 0
            for batch in stream:
                yield from emit_bounded(_checked_arrow_batch(batch, dataset), row, out, dataset)
                row += batch.num_rows
                if out.done:
                    return
            return
        for i in indices:
            batch, rows = None, None
            try:
                batch = reader.get_batch(i)
                rows = batch.num_rows
                batch = _checked_arrow_batch(batch, dataset)
            except Exception as e:  # a corrupt batch of a file: its rows are dead letters, the others are read
                raise_unless_corrupt(e, split.path, f"in Arrow record batch {i}")
                if rows is None:
                    raise  # its row count is unknown, so the positions of the rows after it are too
                row = reject_block(out, f"Arrow record batch {i}", row, rows, e)
                yield 0
                if out.done:
                    return
                continue
            yield from emit_bounded(batch, row, out, dataset)
            row += batch.num_rows
            if out.done:
                return


def _checked_arrow_batch(batch: Any, dataset: DatasetConfig) -> Any:
    """The batch's needed columns, fully validated: IPC buffers are used as they are in the file, and a
    corrupt offset would make pyarrow read out of bounds (a crash, found by tests/test_hostile_input.py).
    Checking is cheap next to tokenizing."""
    batch = batch.select(columns_needed(dataset, batch.schema.names))
    batch.validate(full=True)
    return batch
