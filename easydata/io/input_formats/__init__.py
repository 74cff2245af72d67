"""One module per input format, behind one registry (Beam io's layout): each format's reader turns a split
into records for a `easydata.io.documents.DocumentCollector`, yielding the bytes it consumed; the formats
that can be split within a file say how (`SPLITTERS`), and those whose reading counts other bytes than the
file's own how many (`READ_SIZES`). Split planning itself is shared
(`easydata.io.sources.plan_input`).
"""

from __future__ import annotations

from typing import Any, Callable

from easydata.io.input_formats import arrow_files, parquet_files
from easydata.io.input_formats.arrow_files import read_arrow, record_batch_ranges
from easydata.io.input_formats.csv_files import read_csv
from easydata.io.input_formats.json_array import read_json
from easydata.io.input_formats.lines import byte_ranges, compressed_parts, compressed_ranges, read_lines
from easydata.io.input_formats.parquet_files import read_parquet, row_group_ranges

__all__ = ["READERS", "SPLITTERS", "READ_SIZES", "byte_ranges", "compressed_parts", "compressed_ranges"]

#: input type -> `reader(split, dataset, collector)`, a generator of bytes consumed.
READERS: dict[str, Callable[..., Any]] = {"jsonl": read_lines, "txt": read_lines, "json": read_json, "csv": read_csv,
                                          "parquet": read_parquet, "arrow": read_arrow}
#: input types split inside a file by units of their own: `(path, ..., target_bytes) -> [(start, end, size)]`.
SPLITTERS: dict[str, Callable[..., Any]] = {"parquet": row_group_ranges, "arrow": record_batch_ranges}
#: input types whose readers count other bytes than the file's (the uncompressed bytes of the columns read):
#: `(path, dataset, messages_field) -> the bytes reading the whole file counts` (a request or two, at planning).
READ_SIZES: dict[str, Callable[..., int]] = {"parquet": parquet_files.read_size, "arrow": arrow_files.read_size}
