"""Cutting CSV input into records that can be trusted, before a CSV parser sees them.

A CSV reader given a quote that is never closed (`1,"unbalanced,2`) takes every following line into
that one field until the next quote: good records are swallowed into the bad one, or the whole file
fails. `csv_records` reads physical lines and keeps the quote balance itself: a record is the lines up
to the point where the quotes balance; a record that does not parse (strictly, with Python's `csv`)
or has another number of fields than the header is malformed. Only its first line is given up (a
reason, its position); scanning goes on with the next line, so every well-formed record after it is
kept. The clean records are then parsed in bulk by pyarrow (`easydata.io.sources`), which infers column
types as before.

Cost: one pass of Python over the lines (a quote count per line); CSV is a minor input format for
language-model corpora.
"""

from __future__ import annotations

import csv
import dataclasses
from typing import Iterable, Iterator, Optional

from easydata.io.documents import refuse_foreign_bytes

__all__ = ["CsvRecord", "csv_records", "MAX_RECORD_LINES"]

#: Lines a quoted value may span before its opening quote is taken for a mistake.
MAX_RECORD_LINES = 10_000
_BOM = b"\xef\xbb\xbf"


@dataclasses.dataclass(frozen=True)
class CsvRecord:
    """One record: its raw bytes (lines included; of a malformed one, its first line) and, when it is
    malformed, why.

    Attributes:
      index: the record's number among the data records (the header is not one), good or bad.
      offset: the byte offset of its first line.
    """

    index: int
    offset: int
    data: Optional[bytes] = None
    reason: Optional[str] = None


def _fields(record: bytes, delimiter: str) -> list[str]:
    """The record's fields, parsed strictly; raises csv.Error or UnicodeDecodeError."""
    text = record.decode("utf-8")
    rows = list(csv.reader(text.splitlines(keepends=True), delimiter=delimiter, strict=True))
    if len(rows) != 1:
        raise csv.Error(f"{len(rows)} rows where one record was expected")
    return rows[0]


def csv_records(lines: Iterable[bytes], delimiter: str = ",") -> tuple[Optional[bytes], Iterator[CsvRecord]]:
    """The header line (without a UTF-8 BOM) and the records after it.

    Args:
      lines: the file's physical lines, with their line ends (a binary file object).
      delimiter: `,` or a tab.

    Returns:
      `(header, records)`; header is None for an empty file.

    Raises:
      csv.Error, UnicodeDecodeError: the header itself is not a CSV line.
      ValueError: the file is UTF-16 or UTF-32 (`refuse_foreign_bytes`).
    """
    source = iter(lines)
    first = next(source, b"")
    refuse_foreign_bytes(first)
    if not first.strip():
        return None, iter(())
    offset = len(first)
    header_bytes = first[len(_BOM):] if first.startswith(_BOM) else first
    width = len(_fields(header_bytes, delimiter))
    return header_bytes, _records(source, offset, width, delimiter)


def _records(source: Iterator[bytes], offset: int, width: int, delimiter: str) -> Iterator[CsvRecord]:
    pending: list[tuple[int, bytes]] = []  # lines given back after a malformed record's first line
    index = 0

    def next_line() -> Optional[tuple[int, bytes]]:
        nonlocal offset
        if pending:
            return pending.pop(0)
        line = next(source, None)
        if line is None:
            return None
        at, offset = offset, offset + len(line)
        return at, line

    while True:
        line = next_line()
        if line is None:
            return
        if not line[1].strip():
            continue
        buffer, quotes = [line], line[1].count(b'"')
        while quotes % 2 and len(buffer) < MAX_RECORD_LINES:
            more = next_line()
            if more is None:
                break
            buffer.append(more)
            quotes += more[1].count(b'"')
        record = b"".join(part for _, part in buffer)
        reason = None
        if quotes % 2:
            reason = "malformed CSV: a quote is never closed"
        else:
            try:
                fields = _fields(record, delimiter)
            except UnicodeDecodeError as e:
                reason = f"invalid UTF-8 at byte {e.start}"
            except csv.Error as e:
                reason = f"malformed CSV: {e}"
            else:
                if len(fields) != width:
                    reason = f"malformed CSV: {len(fields)} fields, the header has {width}"
        if reason is None:
            yield CsvRecord(index, buffer[0][0], data=record)
        else:  # give up the first line only: what follows it may be good records it swallowed
            pending[:0] = buffer[1:]
            yield CsvRecord(index, buffer[0][0], data=buffer[0][1], reason=reason)
        index += 1
