"""Reading a little of a dataset from everywhere: places spread over its splits, and sample texts.

The dry run's estimates (`easydata.run.dry_run`) and the tokenizer engines' verification at planning
(`easydata.text.engines`) both want documents that stand for the whole input, not its first records
(files are often sorted by length, source or date).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

__all__ = ["spread", "split_units", "sample_texts"]


def spread(split: Any, n: int) -> list[Any]:
    """Up to `n` places spread over `split` to sample from (a file's first records need not be like the
    rest: sorted by length, by source, by date): byte ranges of an uncompressed line file, row groups of
    a Parquet file, record batches of an Arrow file; the split itself where it can only be read from
    its start (compressed files, CSV, JSON arrays)."""
    from easydata.io.filesystems import compression_of

    if n <= 1 or compression_of(split.path) is not None:
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


def split_units(split: Any) -> Optional[int]:
    """Row groups (Parquet) or record batches (Arrow file) of a split, None when unknown."""
    import pyarrow.parquet as pq

    from easydata.io.filesystems import open_arrow_file

    try:
        with open_arrow_file(split.path) as f:
            if split.type == "parquet":
                total = pq.ParquetFile(f).metadata.num_row_groups
            else:
                import pyarrow.ipc as ipc

                total = ipc.open_file(f).num_record_batches
    except Exception:  # noqa: BLE001 - a stream, or an unreadable footer
        return None
    return (total if split.end is None else split.end) - split.start


def sample_texts(dataset: Any, splits: list[Any], *, documents: int = 2000, chars: int = 1_000_000,
                 places: int = 16, messages_field: str = "messages") -> list[str]:
    """Plain documents' texts read at up to `places` places spread over `splits` (chat records left out:
    they are not plain documents), at most `documents` of them and `chars` characters in all (a long
    document is cut, which keeps it real text)."""
    from easydata.io.sources import read_split

    if not splits:
        return []
    chosen = splits[::max(1, len(splits) // places)][:places]
    points = [part for split in chosen for part in spread(split, max(1, places // len(chosen)))]
    per_point, per_text = max(1, documents // len(points)), max(1000, chars // max(documents, 1))
    texts: list[str] = []
    for point in points:
        for batch in read_split(point, dataset, batch_size=per_point, limit=per_point, rejects=[],
                                messages_field=messages_field):
            plain = batch.texts if batch.conversations is None else \
                [t for t, c in zip(batch.texts, batch.conversations) if c is None]
            texts.extend(t[:per_text] for t in plain if t)
    return texts[:documents]
