"""Reading a little of a dataset from everywhere: places spread over its splits, and sample texts.

The dry run's estimates (`easydata.run.dry_run`) and the tokenizer engines' verification at planning
(`easydata.text.engines`) both want documents that stand for the whole input, not its first records
(files are often sorted by length, source or date).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

__all__ = ["spread", "split_units", "split_rows", "sample_batches", "sample_texts"]


def spread(split: Any, n: int) -> list[Any]:
    """Up to `n` places spread over `split` to sample from (a file's first records need not be like the
    rest: sorted by length, by source, by date): byte ranges of an uncompressed line file, row groups of
    a Parquet file, record batches of an Arrow file; the split itself where it can only be read from
    its start (compressed files, CSV, JSON arrays). A compressed file read in parts is sampled from its start
    as a whole (its first part, to the file's end: the sample a file read whole gives), and not at its other
    parts, reached only by decompressing everything before them (planning would decompress most of the file)."""
    from easydata.io.filesystems import compression_of

    if compression_of(split.path) is not None:
        return [dataclasses.replace(split, end=None)] if split.start == 0 else []
    if n <= 1:
        return [split]
    if split.type in ("jsonl", "txt") and split.size > 0:
        end = split.start + split.size
        bounds = [split.start + split.size * i // n for i in range(n + 1)]
        return [dataclasses.replace(split, start=a, end=b if b < end else split.end) for a, b in zip(bounds, bounds[1:])
                if b > a]
    if split.type in ("parquet", "arrow"):
        units = split_units(split)
        if units is not None and units > 1:
            picks = sorted({split.start + units * i // n for i in range(n)})
            return [dataclasses.replace(split, start=u, end=u + 1) for u in picks]
    return [split]


def _units(split: Any, *, rows: bool) -> Optional[list[int]]:
    """The rows of each row group (Parquet: from the footer) or record batch (Arrow file: counted at most once
    per process, `arrow_files.batch_rows`; zeros without `rows`, as only their number is wanted) a split
    covers; None for other types, streams and unreadable footers."""
    import pyarrow.parquet as pq

    from easydata.io.filesystems import compression_of, open_arrow_file, open_file

    if split.type not in ("parquet", "arrow"):
        return None
    try:
        with (open_file if compression_of(split.path) else open_arrow_file)(split.path) as f:
            if split.type == "parquet":
                meta = pq.ParquetFile(f).metadata
                end = meta.num_row_groups if split.end is None else split.end
                return [meta.row_group(g).num_rows for g in range(split.start, end)]
            import pyarrow.ipc as ipc

            from easydata.io.input_formats.arrow_files import batch_rows

            reader = ipc.open_file(f)
            end = reader.num_record_batches if split.end is None else split.end
            if not rows:
                return [0] * max(0, end - split.start)
            return batch_rows(reader, split.path, split.version, split.start, end)
    except Exception:  # noqa: BLE001 - a stream, or an unreadable footer
        return None


def split_units(split: Any) -> Optional[int]:
    """Row groups (Parquet) or record batches (Arrow file) of a split, None when unknown."""
    units = _units(split, rows=False)
    return None if units is None else len(units)


def split_rows(split: Any) -> Optional[int]:
    """The rows a Parquet or Arrow file split covers, None when not knowable from the footer."""
    units = _units(split, rows=True)
    return None if units is None else sum(units)


def sample_batches(dataset: Any, splits: list[Any], *, documents: int = 2000, places: int = 16,
                   messages_field: str = "messages") -> list[Any]:
    """`DocumentBatch`es of about `documents` documents in all, read at up to `places` places spread over
    `splits` (`spread`), as the pipeline's reader gives them."""
    from easydata.io.sources import read_split

    if not splits:
        return []
    chosen = splits[::max(1, len(splits) // places)][:places]
    points = [part for split in chosen for part in spread(split, max(1, places // len(chosen)))]
    per_point = max(1, documents // max(1, len(points)))
    return [batch for point in points
            for batch in read_split(point, dataset, batch_size=per_point, limit=per_point, rejects=[],
                                    messages_field=messages_field)]


def sample_texts(dataset: Any, splits: list[Any], *, documents: int = 2000, chars: int = 1_000_000,
                 places: int = 16, messages_field: str = "messages") -> list[str]:
    """Plain documents' texts read at up to `places` places spread over `splits` (chat records left out:
    they are not plain documents), at most `documents` of them and `chars` characters in all (a long
    document is cut, which keeps it real text)."""
    per_text = max(1000, chars // max(documents, 1))
    texts: list[str] = []
    for batch in sample_batches(dataset, splits, documents=documents, places=places, messages_field=messages_field):
        plain = batch.texts if batch.conversations is None else \
            [t for t, c in zip(batch.texts, batch.conversations) if c is None]
        texts.extend(t[:per_text] for t in plain if t)
    return texts[:documents]
