"""CSV and TSV inputs: records cut by `easydata.io.csv_records` (a malformed one is a dead letter and
never swallows the good ones after it), parsed by pyarrow in chunks. One split per file."""

from __future__ import annotations

import sys
from typing import Any, Iterator

from easydata.config import DatasetConfig
from easydata.errors import InputError
from easydata.io.documents import EXCERPT_CHARS, MAX_BATCH_CHARS, DocumentCollector, InputSplit
from easydata.io.filesystems import open_file, strip_compression
from easydata.io.input_formats.lines import line_buffer
from easydata.io.input_formats.tables import emit_table_batch

__all__ = ["read_csv"]


def read_csv(split: InputSplit, dataset: DatasetConfig, out: DocumentCollector) -> Iterator[int]:
    """CSV / TSV: records cut by `easydata.io.csv_records` (a malformed one is a dead letter and never
    swallows the good ones after it), parsed by pyarrow in chunks; column types are inferred from
    the first chunk and kept, the content field is always text."""
    import csv

    import pyarrow as pa
    import pyarrow.csv as pcsv

    from easydata.io.csv_records import csv_records

    delimiter = "\t" if strip_compression(split.path).lower().endswith(".tsv") else ","
    # Python's csv refuses fields over 128 KiB by default: a field may be as large as a document may
    # (larger ones become dead letters for their size, as in every other format). Raised, never lowered:
    # the limit is process-wide.
    limit = out.max_bytes if out.max_bytes is not None else sys.maxsize
    csv.field_size_limit(max(csv.field_size_limit(), min(limit, 2**31 - 1)))
    with open_file(split.path, buffer_size=line_buffer(split.size), read_bytes=split.size) as f:
        try:
            header, records = csv_records(f, delimiter)
        except (csv.Error, UnicodeDecodeError) as e:
            raise InputError(f"'{split.path}' is not readable CSV: its header is not a CSV line ({e})") from None
        if header is None:
            return
        header = header if header.endswith(b"\n") else header + b"\n"
        types: dict[str, Any] = {dataset.content_field: pa.string()}
        chunk: list[bytes] = []
        positions: list[int] = []

        def parse() -> int:
            data = b"".join(chunk)
            parse_options = pcsv.ParseOptions(delimiter=delimiter, newlines_in_values=True)
            # One block: a record larger than pyarrow's default block (1 MiB) must not straddle two.
            read_options = pcsv.ReadOptions(block_size=max(1 << 20, len(header) + len(data) + 1))
            try:
                table = pcsv.read_csv(pa.py_buffer(header + data), parse_options=parse_options, read_options=read_options,
                                      convert_options=pcsv.ConvertOptions(column_types=types, strings_can_be_null=False))
            except pa.ArrowInvalid:  # a value that does not fit the first chunk's types: this chunk as text
                table = pcsv.read_csv(pa.py_buffer(header + data), parse_options=parse_options, read_options=read_options,
                                      convert_options=pcsv.ConvertOptions(column_types={n: pa.string() for n in types},
                                                                          strings_can_be_null=False))
            types.update({field.name: field.type for field in table.schema if field.name not in types})
            start = 0
            for batch in table.to_batches():
                emit_table_batch(batch, positions[start:start + batch.num_rows], out, dataset)
                start += batch.num_rows
            chunk.clear()
            positions.clear()
            return len(data)

        size = 0
        for record in records:
            if record.reason is not None:
                out.reject(record.index, record.reason, record.data[:EXCERPT_CHARS].decode("utf-8", "replace"))
                yield len(record.data)
            else:
                chunk.append(record.data if record.data.endswith(b"\n") else record.data + b"\n")
                positions.append(record.index)
                size += len(record.data)
                if len(chunk) >= out.batch_size or size >= MAX_BATCH_CHARS:
                    size = 0
                    yield parse()
            if out.done:
                return
        if chunk:
            yield parse()
