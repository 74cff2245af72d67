"""Parquet inputs: split by row groups (`row_group_ranges`); an unreadable row group is dead-lettered
with its rows and the others are read. Reading a row group counts the uncompressed bytes of the column chunks
it reads (`columns_bytes`), which planning counts too (`read_size`), so progress ends at 100 %."""

from __future__ import annotations

import itertools
from typing import Any, Iterator, Optional

from easydata.config import DatasetConfig
from easydata.errors import InputError
from easydata.io.documents import DocumentCollector, InputSplit, raise_unless_corrupt
from easydata.io.input_formats.tables import columns_needed, emit_bounded, open_table_file, read_from, reject_block

__all__ = ["read_parquet", "row_group_ranges", "read_size", "columns_bytes"]


def row_group_ranges(path: str, size: int, target_bytes: int) -> list[tuple[int, Optional[int], int]]:
    """Row-group ranges of about `target_bytes` of uncompressed data each, with their share of the file's
    `size` bytes (what a whole file's split counts: the same unit for every split)."""
    import pyarrow.parquet as pq

    with open_table_file(path) as f:
        meta = pq.ParquetFile(f).metadata
    data = [meta.row_group(rg).total_byte_size for rg in range(meta.num_row_groups)]
    total = max(sum(data), 1)
    cuts, acc = [0], 0
    for rg, group_bytes in enumerate(data):
        acc += group_bytes
        if acc >= target_bytes:
            cuts.append(rg + 1)
            acc = 0
    if cuts[-1] < len(data) or len(cuts) == 1:
        cuts.append(len(data))
    prefix = [0, *itertools.accumulate(data)]
    ends = [prefix[cut] for cut in cuts]
    return [(a, b, size * hi // total - size * lo // total) for a, b, lo, hi in zip(cuts, cuts[1:], ends, ends[1:])]


def _leaves(arrow_type: Any) -> int:
    """How many Parquet leaf columns a field of this Arrow type is stored as."""
    import pyarrow.types as pt

    if pt.is_struct(arrow_type):
        return sum(_leaves(arrow_type.field(i).type) for i in range(arrow_type.num_fields))
    if pt.is_map(arrow_type):
        return _leaves(arrow_type.key_type) + _leaves(arrow_type.item_type)
    if pt.is_list(arrow_type) or pt.is_large_list(arrow_type) or pt.is_fixed_size_list(arrow_type) \
            or pt.is_list_view(arrow_type) or pt.is_large_list_view(arrow_type):
        return _leaves(arrow_type.value_type)
    return 1


def columns_bytes(pf: Any, columns: list[str], groups: Optional[range] = None) -> dict[int, int]:
    """Per row group of the open `pyarrow.parquet.ParquetFile` `pf` (of `groups`; default all), the
    uncompressed bytes of the column chunks of the top-level `columns`: what reading the group for them counts
    as consumed. A file whose leaf columns do not follow its Arrow schema counts every column (the row group's
    own total)."""
    meta = pf.metadata
    owners = [field.name for field in pf.schema_arrow for _ in range(_leaves(field.type))]
    wanted = set(columns)
    chunks = [i for i, name in enumerate(owners) if name in wanted] if len(owners) == meta.num_columns else None
    sizes = {}
    for g in range(meta.num_row_groups) if groups is None else groups:
        group = meta.row_group(g)
        sizes[g] = group.total_byte_size if chunks is None else sum(group.column(i).total_uncompressed_size
                                                                    for i in chunks)
    return sizes


def read_size(path: str, dataset: DatasetConfig, messages_field: str = "messages") -> int:
    """The bytes reading the whole file counts (`columns_bytes` of the columns `dataset` reads): a request for
    its footer. Planning's count of a Parquet input, whose file size says little of it (compressed columns,
    columns not read)."""
    import pyarrow.parquet as pq

    with open_table_file(path) as f:
        pf = pq.ParquetFile(f)
        return sum(columns_bytes(pf, columns_needed(dataset, pf.schema_arrow.names, messages_field)).values())


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
        groups = range(split.start, end)
        row = sum(meta.row_group(g).num_rows for g in range(split.start))
        try:
            columns = columns_needed(dataset, pf.schema_arrow.names, out.messages_field)
        except InputError as e:  # its rows are known: each is a dead letter, as a corrupt row group's are
            rows = sum(meta.row_group(g).num_rows for g in groups)
            if rows:
                reject_block(out, f"Parquet row groups {split.start}..{end - 1}", row, rows, e)
            yield split.size  # what planning counted it at (its columns could not be sized either)
            return
        read_from(out, pf.schema_arrow, dataset)
        sizes = columns_bytes(pf, columns, groups)
        for g in groups:
            group_start, group_end = row, row + meta.row_group(g).num_rows
            reported = 0  # of the group's `sizes[g]` bytes; a batch counts its share of the group's rows
            batches = _group_batches(pf, g, columns, out)
            while not out.done:
                try:
                    batch = next(batches, None)
                except Exception as e:  # a corrupt row group: its rows not read are dead letters, the others are read
                    raise_unless_corrupt(e, split.path, f"in Parquet row group {g}")
                    row = reject_block(out, f"Parquet row group {g}", row, group_end - row, e)
                    break
                if batch is None:
                    break
                share = sizes[g] * (row + batch.num_rows - group_start) // (group_end - group_start) - reported
                yield from emit_bounded(batch, row, out, dataset, size=share)
                reported += share
                row += batch.num_rows
            if out.done:
                return
            yield sizes[g] - reported  # read, or dead-lettered, to its end: all of its bytes are counted
