"""Parquet inputs: split by row groups (`row_group_ranges`); an unreadable row group is dead-lettered
with its rows and the others are read."""

from __future__ import annotations

from typing import Iterator, Optional

from easydata.config import DatasetConfig
from easydata.errors import InputError
from easydata.io.documents import DocumentCollector, InputSplit, raise_unless_corrupt
from easydata.io.input_formats.tables import columns_needed, emit_bounded, open_table_file, reject_block

__all__ = ["read_parquet", "row_group_ranges"]


def row_group_ranges(path: str, target_bytes: int) -> list[tuple[int, Optional[int], int]]:
    import pyarrow.parquet as pq

    with open_table_file(path) as f:
        meta = pq.ParquetFile(f).metadata
    ranges, start, acc = [], 0, 0
    for rg in range(meta.num_row_groups):
        acc += meta.row_group(rg).total_byte_size
        if acc >= target_bytes:
            ranges.append((start, rg + 1, acc))
            start, acc = rg + 1, 0
    if start < meta.num_row_groups or not ranges:
        ranges.append((start, meta.num_row_groups, acc))
    return ranges


def _group_batches(pf, group: int, columns: list[str], out: DocumentCollector) -> Iterator:
    """Row group `group`'s `columns` as record batches of at most `out.batch_size` rows.

    A whole row group is read at once, on one thread: a worker reads its content column (rarely more) while the
    other workers use the other cores, and Arrow's threads cost more than they save here (the 1 GB corpus'
    Parquet copy: 0.9-1.3 CPU s threaded, memory-mapped, against 0.85-0.92). A read with a record limit
    (planning's samples, whose batches are as large as their limit; previews) takes the group batch by batch and
    stops with the collector: a row group is often 100 MB or more of text, whose pages are decompressed as they
    are read, so a sample of a hundred documents from each of 16 row groups need not decompress them all. The
    batches are the same rows either way (the collector's batches too).
    """
    if out.limit is None:
        yield from pf.read_row_group(group, columns=columns, use_threads=False).to_batches(max_chunksize=out.batch_size)
    else:
        yield from pf.iter_batches(batch_size=out.batch_size, row_groups=[group], columns=columns, use_threads=False)


def read_parquet(split: InputSplit, dataset: DatasetConfig, out: DocumentCollector) -> Iterator[int]:
    import pyarrow.parquet as pq

    with open_table_file(split.path) as f:
        try:
            pf = pq.ParquetFile(f)
        except Exception as e:
            raise InputError(f"'{split.path}' is not a readable Parquet file: {e}") from None
        meta = pf.metadata
        end = meta.num_row_groups if split.end is None else split.end
        groups = list(range(split.start, end))
        row = sum(meta.row_group(g).num_rows for g in range(split.start))
        columns = columns_needed(dataset, pf.schema_arrow.names)
        for g in groups:
            group_end = row + meta.row_group(g).num_rows
            batches = _group_batches(pf, g, columns, out)
            while not out.done:
                try:
                    batch = next(batches, None)
                except Exception as e:  # a corrupt row group: its rows not read are dead letters, the others are read
                    raise_unless_corrupt(e, split.path, f"in Parquet row group {g}")
                    row = reject_block(out, f"Parquet row group {g}", row, group_end - row, e)
                    yield 0
                    break
                if batch is None:
                    break
                yield from emit_bounded(batch, row, out, dataset)
                row += batch.num_rows
            if out.done:
                return
