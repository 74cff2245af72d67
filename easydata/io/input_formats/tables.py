"""What the table formats (Parquet, Arrow IPC, CSV) share: which columns a dataset needs, turning an
Arrow record batch into records, and dead-lettering an unreadable block with its row count."""

from __future__ import annotations

from typing import Any, Iterator, Optional

from easydata.config import DatasetConfig
from easydata.errors import InputError
from easydata.io.conversations import CHAT_FIELDS
from easydata.io.documents import MAX_BATCH_CHARS, DocumentCollector
from easydata.io.field_values import exact_values, python_column, table_types
from easydata.io.record_format import RecordFormatter
from easydata.io.filesystems import compression_of, open_arrow_file, open_file

__all__ = ["open_table_file", "columns_needed", "read_from", "emit_table_batch", "emit_bounded", "reject_block",
           "bounded_slices"]


def open_table_file(path: str):
    """Parquet / Arrow inputs: native pyarrow files when uncompressed, decompressing streams otherwise."""
    return open_file(path) if compression_of(path) else open_arrow_file(path)


def columns_needed(dataset: DatasetConfig, available: list[str], messages_field: str = "messages") -> list[str]:
    """The columns of `available` a record is judged on (`DocumentCollector.add_record`), in this order: the
    content field, the chat fields (`messages_field` and `CHAT_FIELDS`: `prompt`, `completion`, Alpaca's
    `instruction`, `input`, `output` and `history`, the system prompt `system`, and the tool definitions `tools`
    or OpenAI's legacy `functions`) and the additional fields. A
    table's records are so what the same records are as JSON lines: a `messages` column makes chat records when
    the content field is absent, as a `messages` key does (a table's chat records were read without it).

    Raises:
      InputError: a column it needs is named more than once (the file is then a dead letter with this reason)."""
    wanted = [*_document_fields(dataset.content_field, messages_field), *dataset.additional_fields]
    formatter = RecordFormatter.for_dataset(dataset)
    if formatter is not None:
        wanted = list(available) if formatter.needs_all_columns else formatter.source_columns(wanted)
    present = set(available)
    needed = [c for c in dict.fromkeys(wanted) if c in present]
    if len(present) < len(available):
        twice = [c for c in needed if available.count(c) > 1]
        if twice:  # Arrow allows it; which of them would a record hold?
            raise InputError(f"the table has {available.count(twice[0])} columns named '{twice[0]}', a column the"
                             " dataset reads: give them distinct names")
    return needed

def read_from(out: DocumentCollector, schema: Any, dataset: DatasetConfig) -> None:
    """Tells the collector it reads a table of `schema`: the fields its dead letters name, and the types of the
    additional fields it holds, which their output columns keep (`field_values.table_types`; none when a
    `format_callback` makes the records, whose values are then the callback's)."""
    out.source_fields = tuple(sorted(schema.names))
    if out.formatter is not None and out.formatter.needs_all_columns:
        out.source_types = {}
    else:
        out.source_types = table_types(schema, dataset.additional_fields, _source_columns(out, dataset.additional_fields))


#: Bytes of a table slice (`bounded_slices`): an eighth of a batch's bound, so a batch closes at most this much
#: (plus one row) past `MAX_BATCH_CHARS`.
SLICE_BYTES = MAX_BATCH_CHARS // 8


def bounded_slices(batch: Any, max_rows: int) -> Iterator[Any]:
    """`batch` in consecutive slices of at most `max_rows` rows and about `SLICE_BYTES` each.

    The collector closes a batch of documents only between two things a reader yields, so a whole Parquet row
    group or Arrow record batch became one tokenize batch (1,000 documents of 23 KB: 23 MB of text), past the
    `MAX_BATCH_CHARS` every other input keeps to. A slice is a view, not a copy.
    """
    rows = batch.num_rows
    if rows == 0:
        yield batch
        return
    step = max(1, min(max_rows, int(SLICE_BYTES * rows // max(batch.nbytes, 1))))
    for start in range(0, rows, step):
        yield batch.slice(start, step)


def emit_bounded(batch: Any, first_row: int, out: DocumentCollector, dataset: DatasetConfig,
                 size: Optional[int] = None) -> Iterator[int]:
    """A record batch into the collector in `bounded_slices` (`emit_table_batch` each), yielding each slice's
    bytes: its Arrow bytes, or its share of `size` (the bytes the batch counts for: slices that all yield add
    up to it); stops when the collector is done."""
    rows, done, counted = batch.num_rows, 0, 0
    for piece in bounded_slices(batch, out.batch_size):
        emit_table_batch(piece, first_row, out, dataset)
        first_row += piece.num_rows
        if size is None:
            yield piece.nbytes
        else:
            done += piece.num_rows
            share = size * done // rows if rows else size
            yield share - counted
            counted = share
        if out.done:
            return


def emit_table_batch(batch: Any, first_row: Any, out: DocumentCollector, dataset: DatasetConfig) -> None:
    """Feeds the rows of an Arrow record batch into the collector; `first_row` is the first row's
    position (the others follow it), or a list of every row's position.

    A plain-text table (a string content column, flat columns beside it) goes in column-wise
    (`DocumentCollector.add_text_rows`: no dict per row); any other row by row as a record."""
    if out.formatter is None and batch.num_rows and not _makes_documents(batch.schema.names, out):
        # no row can be a document: one dead letter for the slice, not one per row (a million lines, each "{}")
        first = first_row[0] if isinstance(first_row, list) else first_row
        rows = batch.num_rows if out.limit is None else min(batch.num_rows, out.limit - out.count)  # `num_rows`
        last = first_row[rows - 1] if isinstance(first_row, list) else first + rows - 1
        out.reject(first, f"missing content field '{dataset.content_field}'",
                   f"{rows} records (positions {first} to {last}) of a table without that column", records=rows,
                   fields=tuple(sorted(batch.schema.names)))
        return
    typed = set(_source_columns(out, list(out.source_types)))
    columns = {name: exact_values(column) if name in typed else python_column(column)
               for name, column in zip(batch.schema.names, batch.columns)}
    names = list(columns)
    positions = first_row if isinstance(first_row, list) else range(first_row, first_row + batch.num_rows)
    if out.takes_text_rows(batch.schema):
        out.add_text_rows(positions, columns)
        return
    for i, position in zip(range(batch.num_rows), positions):
        out.add_record(position, {n: columns[n][i] for n in names})
        if out.done:
            return


def _makes_documents(columns: list[str], out: DocumentCollector) -> bool:
    """Whether a row of a table with these columns may be a document: it has the content field, the messages
    field or a chat field (`CHAT_FIELDS`); else each row is a dead letter for its missing content field."""
    return not set(_document_fields(out.ds.content_field, out.messages_field)).isdisjoint(columns)


def _document_fields(content_field: str, messages_field: str) -> tuple[str, ...]:
    """The fields whose values make a record a document: the content field, the messages field and the chat
    fields (`CHAT_FIELDS`)."""
    return (content_field, messages_field, *CHAT_FIELDS)


def _source_columns(out: DocumentCollector, fields: list[str]) -> list[str]:
    """The columns `fields` are read from (their `format_fields` renames' sources)."""
    return fields if out.formatter is None else out.formatter.source_columns(fields)


def reject_block(out: DocumentCollector, block: str, row: int, rows: int, error: Exception) -> int:
    """Dead-letters the `rows` records of an unreadable block starting at `row`; returns the next row."""
    out.reject(row, f"unreadable {block} (rows {row}..{row + rows - 1}): {type(error).__name__}:"
                    f" {str(error).splitlines()[0] if str(error) else ''}"[:500], records=rows)
    return row + rows
