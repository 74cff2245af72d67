"""Output file formats: streaming shard writers and readers for Parquet, Arrow IPC and JSONL.

Writers take Arrow record batches and write them in fixed-size row groups / record batches of
`row_group_size` rows, so the bytes of a shard depend only on its rows (never on how they arrived).
Nothing holds a whole shard in memory: at most one row group is buffered.

`bin` and `npz` shards (token files for numpy scripts) are written and read by
`easydata.io.token_files`; the functions here dispatch to it.

Also here: the output schemas (unpacked now; packed columns come from the packer) and the conversion
of tokenized documents into Arrow record batches.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import IO, Any, Callable, Iterable, Iterator, NamedTuple, Optional, Sequence

import numpy as np
import pyarrow as pa

from easydata.errors import PROGRAMMING_ERRORS, EasyDataError, EnvironmentFailure, ValidationFailed
from easydata.io.field_values import as_text, field_array, json_text, python_values
from easydata.io.filesystems import get_fs, open_arrow_file, staging_ipc_options, open_file, temp_name
from easydata.io.staged_columns import compact, restorer, rows_schema
from easydata.io.token_arrays import list_column_values, ones_list_array, token_list_array  # re-exported: the formats' token columns
from easydata.rows import TOKEN_COLUMNS

__all__ = [
    "SHARD_EXTENSIONS",
    "SHARD_FORMATS",
    "ShardFormat",
    "shard_format",
    "shard_file_name",
    "ShardWriter",
    "iter_shard_batches",
    "shard_errors",
    "ShardUnreadable",
    "token_list_array",
    "list_column_values",
    "documents_to_batch",
    "TOKEN_COLUMNS",
    "write_piece",
    "write_staged_batches",
    "iter_staged_rows",
    "assemble_shard",
    "AssembledShard",
    "common_schema",
    "conform",
    "take_rows",
    "SLICE_MIN_VALUES_PER_ROW",
]

_JSONL_COMPRESSION_SUFFIX = {"none": "", "gzip": ".gz", "zstd": ".zst"}
# Token-aligned columns: int32 lists whose lengths equal the row's length.


def shard_file_name(index: int, count: int, fmt: str, compression: str = "none") -> str:
    """`part-00003-of-00016.parquet` (JSONL gets `.gz` / `.zst` when compressed)."""
    suffix = SHARD_EXTENSIONS[fmt] + (_JSONL_COMPRESSION_SUFFIX.get(compression, "") if fmt == "jsonl" else "")
    return f"part-{index:05d}-of-{count:05d}{suffix}"


def common_schema(schemas: list[pa.Schema]) -> pa.Schema:
    """One schema for batches whose additional fields were typed independently.

    Compatible types unify as Arrow does (null takes the other type, int32 widens to int64, ...);
    a column whose types cannot unify (e.g. int64 in one batch, text in another) becomes text, with
    `field_values.as_text` values. Token columns come first in a fixed order, so any mix of batches converges on
    the same schema whatever their order.
    """
    try:
        unified = pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        names: list[str] = []
        for schema in schemas:
            names.extend(n for n in schema.names if n not in names)
        fields = []
        for name in names:
            present = [pa.schema([s.field(name)]) for s in schemas if name in s.names]
            try:
                fields.append(pa.unify_schemas(present, promote_options="permissive").field(name))
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                fields.append(pa.field(name, pa.string()))
        unified = pa.schema(fields)
    tokens = [unified.field(c) for c in TOKEN_COLUMNS if c in unified.names]
    return pa.schema(tokens + [f for f in unified if f.name not in TOKEN_COLUMNS])


def _default_loss_mask(batch: pa.RecordBatch) -> pa.Array:
    """The loss mask of rows that had none (plain text beside chat data): train every real token."""
    ids = batch.column("input_ids")
    offsets = ids.offsets.to_numpy().astype(np.int64)
    offsets = offsets - offsets[0]
    if "segment_ids" not in batch.schema.names:
        return ones_list_array(offsets)
    values = (batch.column("segment_ids").flatten().to_numpy(zero_copy_only=False) != 0).astype(np.int32)
    return token_list_array(values, offsets)


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """Casts `batch` to `schema` (from `common_schema`); non-text values headed for text become JSON."""
    if batch.schema == schema:
        return batch
    columns = []
    for field in schema:
        if field.name not in batch.schema.names and field.name == "loss_mask":
            columns.append(_default_loss_mask(batch))
            continue
        column = batch.column(field.name) if field.name in batch.schema.names else pa.nulls(batch.num_rows)
        if column.type == field.type:
            columns.append(column)
        elif pa.types.is_string(field.type) and not (pa.types.is_string(column.type) or
                                                     pa.types.is_null(column.type)):
            columns.append(pa.array([as_text(v) for v in python_values(column)], type=pa.string()))
        else:
            columns.append(column.cast(field.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def documents_to_batch(flat: np.ndarray, offsets: np.ndarray, fields: dict[str, list[Any]],
                       extra: Optional[dict[str, pa.Array]] = None,
                       loss_mask: Optional[np.ndarray] = None,
                       field_types: Optional[dict[str, pa.DataType]] = None) -> pa.RecordBatch:
    """Unpacked rows: `input_ids`, `attention_mask`, [`loss_mask`,] the additional fields (of `field_types`
    where given: `easydata.io.field_values`), then `extra` columns."""
    columns: dict[str, pa.Array] = {
        "input_ids": token_list_array(flat, offsets),
        "attention_mask": ones_list_array(offsets),
    }
    if loss_mask is not None:
        columns["loss_mask"] = token_list_array(loss_mask, offsets)
    for name, values in fields.items():
        columns[name] = field_array(values, (field_types or {}).get(name))
    columns.update(extra or {})
    return pa.RecordBatch.from_pydict(columns)


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The Parquet columns worth dictionary-encoding: all but lists of integers (token arrays).

    A token column's dictionary outgrows its page limit in every row group and falls back to plain
    encoding after the hashing was paid for: slower to write and a larger file (docs/performance.md).
    Additional fields (sources, languages) keep their dictionaries.
    """
    def token_like(t: pa.DataType) -> bool:
        return (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_integer(t.value_type)

    return [f.name for f in schema if not token_like(f.type)]


#: Rows at least this long (values of the longest list column per row, on average) are reordered
#: by concatenating one-row slices: a copy of each row's values, no per-value work.
SLICE_MIN_VALUES_PER_ROW = 64


def take_rows(batch: pa.RecordBatch, order: np.ndarray) -> pa.RecordBatch:
    """`batch.take(order)` (any row indices, repeats allowed), faster for long rows.

    Arrow's take on a list column builds an index of every value it moves; for long token rows,
    concatenating the rows' one-row slices gives the same batch with a copy of each row's values and no
    per-value work. Short rows (where a slice per row would cost more) use take.
    """
    lists = [c for c in batch.columns if pa.types.is_list(c.type) or pa.types.is_large_list(c.type)]
    values = max((len(c.flatten()) for c in lists), default=0)
    if len(order) == 0 or values < SLICE_MIN_VALUES_PER_ROW * batch.num_rows:
        return batch.take(pa.array(order, type=pa.int64()))
    return pa.concat_batches([batch.slice(int(i), 1) for i in order])


class _ParquetEncoder:
    """Row groups into a Parquet file (no statistics; dictionary encoding only for dictionary columns)."""

    def __init__(self, path: str, schema: pa.Schema, codec: Optional[str]):
        import pyarrow.parquet as pq

        self._file = open_arrow_file(path, "wb")
        self._writer = pq.ParquetWriter(self._file, schema, compression=codec or "none", write_statistics=False,
                                        use_dictionary=dictionary_columns(schema))

    def emit(self, table: pa.Table) -> None:
        self._writer.write_table(table, row_group_size=table.num_rows)

    def close(self) -> None:
        self._writer.close()
        self._file.close()


class _ArrowEncoder:
    """Record batches into an Arrow IPC file."""

    def __init__(self, path: str, schema: pa.Schema, codec: Optional[str]):
        self._file = open_arrow_file(path, "wb")
        self._writer = pa.ipc.new_file(self._file, schema, options=pa.ipc.IpcWriteOptions(compression=codec))

    def emit(self, table: pa.Table) -> None:
        # Fresh buffers: IPC would write a zero-copy slice with its parent's buffer extents, so the
        # bytes would depend on how the rows arrived.
        table = pa.Table.from_arrays([pa.concat_arrays(c.chunks) for c in table.columns], schema=table.schema)
        for b in table.to_batches(max_chunksize=table.num_rows):
            self._writer.write_batch(b)

    def close(self) -> None:
        self._writer.close()
        self._file.close()


class _JsonlEncoder:
    """JSON lines, optionally gzip (with no file name and mtime 0 in its header, so the bytes depend
    on the rows alone) or zstd."""

    def __init__(self, path: str, schema: pa.Schema, codec: Optional[str]):
        self._raw: Optional[IO] = None
        if codec == "gzip":
            import gzip

            self._raw = open_file(path, "wb")
            self._file: IO = gzip.GzipFile(filename="", mode="wb", fileobj=self._raw, mtime=0)
        else:
            self._file = open_file(path, "wb", compression=codec)

    def emit(self, table: pa.Table) -> None:
        columns = [python_values(c) for c in table.columns]
        lines = [json_text(dict(zip(table.column_names, row))) for row in zip(*columns)]
        self._file.write(("\n".join(lines) + "\n").encode("utf-8"))

    def close(self) -> None:
        self._file.close()
        if self._raw is not None:  # GzipFile does not close the file object it wraps
            self._raw.close()


class ShardWriter:
    """Streams record batches into one shard file (`parquet`, `arrow` or `jsonl`) in fixed-size row groups.

    Args:
      path: destination (local path or URL); written directly, so pass a temporary name.
      fmt: `parquet`, `arrow` or `jsonl` (token files have their own writers: `easydata.io.token_files`).
      schema: schema of every batch written.
      compression: codec (`none` for uncompressed).
      row_group_size: rows per Parquet row group / Arrow record batch / JSONL write.
    """

    companions: dict[str, str] = {}

    def __init__(self, path: str, fmt: str, schema: pa.Schema, compression: str = "zstd",
                 row_group_size: int = 1000):
        encoder = _ROW_ENCODERS.get(fmt)
        if encoder is None:
            raise ValueError(f"unknown output format {fmt!r}")
        self.path, self.fmt, self.schema = path, fmt, schema
        self.row_group_size = row_group_size
        self.rows = 0
        self.columns = tuple((f.name, str(f.type)) for f in schema)
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._encoder = encoder(path, schema, None if compression == "none" else compression)

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Buffers rows and writes every full row group."""
        if batch.num_rows == 0:
            return
        if batch.schema != self.schema:
            batch = batch.select(self.schema.names).cast(self.schema)
        for b in (batch.to_batches() if isinstance(batch, pa.Table) else [batch]):
            self._pending.append(b)
            self._pending_rows += b.num_rows
        while self._pending_rows >= self.row_group_size:
            table = pa.Table.from_batches(self._pending, self.schema)
            self._emit(table.slice(0, self.row_group_size))
            rest = table.slice(self.row_group_size)
            self._pending = rest.to_batches()
            self._pending_rows = rest.num_rows

    def _emit(self, table: pa.Table) -> None:
        table = table.combine_chunks()
        self.rows += table.num_rows
        self._encoder.emit(table)

    def close(self) -> int:
        """Writes the remaining rows and the footer; returns the number of rows written."""
        if self._pending_rows:
            self._emit(pa.Table.from_batches(self._pending, self.schema))
            self._pending, self._pending_rows = [], 0
        self._encoder.close()
        return self.rows


def _records() -> Any:
    """`easydata.io.record_files`, imported when a TFRecord or ArrayRecord shard is first written or read."""
    from easydata.io import record_files

    return record_files


def _record_encoder(kind: str) -> Any:
    def open_encoder(path: str, schema: pa.Schema, codec: Optional[str]) -> Any:
        records = _records()
        return (records.TFRecordEncoder if kind == "tfrecord" else records.ArrayRecordEncoder)(path, schema, codec)

    return open_encoder


_ROW_ENCODERS: dict[str, Any] = {"parquet": _ParquetEncoder, "arrow": _ArrowEncoder, "jsonl": _JsonlEncoder,
                                 "tfrecord": _record_encoder("tfrecord"), "arrayrecord": _record_encoder("arrayrecord")}


def _parquet_batches(path: str, columns: Optional[list[str]]) -> Iterator[pa.RecordBatch]:
    import pyarrow.parquet as pq

    with open_arrow_file(path) as f:
        pf = pq.ParquetFile(f)
        for g in range(pf.num_row_groups):
            yield from pf.read_row_group(g, columns=columns).to_batches()


def _arrow_batches(path: str, columns: Optional[list[str]]) -> Iterator[pa.RecordBatch]:
    with open_arrow_file(path) as f:
        reader = pa.ipc.open_file(f)
        for i in range(reader.num_record_batches):
            batch = reader.get_batch(i)
            yield batch.select(columns) if columns else batch


def _jsonl_batches(path: str, columns: Optional[list[str]]) -> Iterator[pa.RecordBatch]:
    import pyarrow.json as pj

    with open_file(path) as f:
        first = f.readline()
    if not first.strip():
        return
    # JSON has no integer widths: token columns are declared int32, other fields inferred.
    header = json.loads(first)
    explicit = pa.schema([(c, pa.list_(pa.int32())) for c in TOKEN_COLUMNS if c in header])
    options = pj.ParseOptions(explicit_schema=explicit, unexpected_field_behavior="infer")
    with open_file(path) as f:
        for batch in pj.open_json(f, parse_options=options):
            yield batch.select(columns) if columns else batch


@dataclasses.dataclass(frozen=True)
class ShardFormat:
    """One output format: its file extension, how a shard is written and how it is read back.

    Attributes:
      extension: the shard file's extension (JSONL adds `.gz` / `.zst` when compressed).
      open_writer: `(path, schema, compression, row_group_size, token_spec)` -> a writer with
        `write(batch)`, `close() -> rows`, `columns` (as stored) and `companions` (files beside it).
      batches: `(path, columns)` -> the shard's record batches, one row group / chunk at a time.
    """

    extension: str
    open_writer: Callable[..., Any]
    batches: Callable[[str, Optional[list[str]]], Iterator[pa.RecordBatch]]


def _row_format(fmt: str, extension: str, batches: Any) -> ShardFormat:
    def open_writer(path: str, schema: pa.Schema, compression: str, row_group_size: int, token_spec: Any) -> Any:
        return ShardWriter(path, fmt, schema, compression=compression, row_group_size=row_group_size)

    return ShardFormat(extension, open_writer, batches)


def _token_format(fmt: str, extension: str) -> ShardFormat:
    from easydata.io import token_files

    def open_writer(path: str, schema: pa.Schema, compression: str, row_group_size: int, token_spec: Any) -> Any:
        return token_files.open_token_file_writer(path, fmt, schema, token_spec, compression)

    return ShardFormat(extension, open_writer, lambda path, columns: token_files.iter_token_file_batches(path, fmt, columns))


#: Every output format (`save.format`), by name: the one place a format is looked up.
SHARD_FORMATS: dict[str, ShardFormat] = {
    "parquet": _row_format("parquet", ".parquet", _parquet_batches),
    "arrow": _row_format("arrow", ".arrow", _arrow_batches),
    "jsonl": _row_format("jsonl", ".jsonl", _jsonl_batches),
    "bin": _token_format("bin", ".bin"),
    "megatron": _token_format("megatron", ".bin"),
    "npz": _token_format("npz", ".npz"),
    # One serialized tf.train.Example per row (`easydata.io.record_files`): TensorFlow's and Grain's own files.
    "tfrecord": _row_format("tfrecord", ".tfrecord", lambda path, columns: _records().tfrecord_batches(path, columns)),
    "arrayrecord": _row_format("arrayrecord", ".array_record",
                               lambda path, columns: _records().arrayrecord_batches(path, columns)),
}
SHARD_EXTENSIONS = {name: f.extension for name, f in SHARD_FORMATS.items()}


def shard_format(fmt: str) -> ShardFormat:
    """The format named `fmt` (ValueError for an unknown one)."""
    found = SHARD_FORMATS.get(fmt)
    if found is None:
        raise ValueError(f"unknown shard format {fmt!r}")
    return found


class ShardUnreadable(ValidationFailed):
    """A shard that cannot be read as its format (empty, truncated, corrupt, columns missing)."""

    def __init__(self, path: str, detail: str):
        self.path, self.detail = path, detail
        super().__init__(f"shard '{path}' is unreadable ({detail}); `easydata validate` checks the whole output")


def iter_shard_batches(path: str, fmt: str, columns: Optional[list[str]] = None) -> Iterator[pa.RecordBatch]:
    """Streams the record batches of a shard (one row group at a time).

    Raises:
      ShardUnreadable: the file is empty, truncated or corrupt, or lacks a column asked for.
    """
    batches = shard_format(fmt).batches  # an unknown format is a caller's error, raised as it is
    with shard_errors(path):
        yield from batches(path, columns)


@contextlib.contextmanager
def shard_errors(path: str) -> Iterator[None]:
    """Raises what reading the shard at `path` raises as `ShardUnreadable` (the path and pyarrow's first line),
    or as `EnvironmentFailure` where the machine refused (`errno`: too many open files, permissions); this
    package's own errors and programming errors pass as they are."""
    try:
        yield
        return
    except EasyDataError:
        raise
    except (KeyError, IndexError, NotImplementedError) as e:  # pyarrow's: a missing column, a corrupt page or type
        error: Exception = e
    except PROGRAMMING_ERRORS:
        raise
    except Exception as e:  # pyarrow's ArrowInvalid / OSError, EOFError
        error = e
    failure = EnvironmentFailure.of(error, path)
    if failure is not None:  # the machine refused (too many open files, permissions): not the shard's fault
        raise failure from None
    first_line = str(error).splitlines()[0] if str(error) else ""
    raise ShardUnreadable(path, f"{type(error).__name__}: {first_line}"[:300]) from None


def write_piece(table: pa.Table, path: str) -> None:
    """Writes a staged piece (uncompressed Arrow IPC: cheapest to write and read back), through a
    temporary name of its own: a retried or duplicate attempt never leaves or reads half a piece.

    Held compactly (`easydata.io.staged_columns`): an all-ones attention mask (unpacked rows') is left out
    and token columns that fit in 16 bits are stored so; `iter_staged_rows` gives the rows back as they were."""
    table = compact(table)
    temp = temp_name(path)
    with open_arrow_file(temp, "wb") as f, pa.ipc.new_file(f, table.schema) as writer:
        writer.write_table(table)
    fs, target = get_fs(path)
    fs.mv(get_fs(temp)[1], target)


def write_staged_batches(batches: Iterable[pa.RecordBatch], path: str, narrow: Sequence[str] = ()
                         ) -> tuple[int, Optional[pa.Schema]]:
    """Streams record batches (one schema) into a staged Arrow IPC file (LZ4, `staging_ipc_options`), in order.

    Args:
      narrow: `list<int32>` columns whose values the caller knows lie in 0..65535 in every batch: stored as
        `uint16` (`easydata.io.staged_columns.compact`; a value that does not fit raises), widened back by
        `iter_staged_rows`.

    Returns:
      Rows written and their schema (the rows' the batches stand for, `staged_columns.rows_schema`, not the
      file's); `(0, None)` and no file when there are no batches.
    """
    rows, schema = 0, None
    f = writer = None
    try:
        for batch in batches:
            if writer is None:
                schema = rows_schema(batch.schema)
                f = open_arrow_file(path, "wb")
            staged = compact(batch, narrow)
            if writer is None:
                writer = pa.ipc.new_file(f, staged.schema, options=staging_ipc_options())
            writer.write_batch(staged)
            rows += batch.num_rows
    finally:
        if writer is not None:
            writer.close()
        if f is not None:
            f.close()
    return rows, schema


def iter_staged_rows(path: str, start: int = 0, stop: Optional[int] = None) -> Iterator[pa.RecordBatch]:
    """Rows `[start, stop)` of a staged Arrow IPC file, reading only the record batches they overlap
    (memory-mapped when local; a compressed batch is decompressed, an uncompressed one sliced without a copy)."""
    with open_arrow_file(path) as f:
        reader = pa.ipc.open_file(f)
        restore = restorer(reader.schema)
        first = 0
        for i in range(reader.num_record_batches):
            if stop is not None and first >= stop:
                break
            batch = reader.get_batch(i)
            last = first + batch.num_rows
            if last > start:
                lo = max(start - first, 0)
                hi = batch.num_rows if stop is None else min(stop - first, batch.num_rows)
                yield restore(batch if (lo, hi) == (0, batch.num_rows) else batch.slice(lo, hi - lo))
            first = last


class AssembledShard(NamedTuple):
    """What `assemble_shard` wrote: counts for the manifest, companion files and the columns as stored."""

    rows: int
    tokens: int
    padding_tokens: int
    trained_tokens: int
    documents: int  # rows that start a document (windows after a document's first do not)
    cut_documents: int  # documents truncated or cut into windows
    companions: dict[str, str]  # role -> path of files written beside `dest` (`bin`: index, loss_mask)
    columns: tuple[tuple[str, str], ...]  # (name, type) as stored


def assemble_shard(pieces: Sequence[str | tuple[str, int, int]], dest: str, fmt: str, schema: pa.Schema, *,
                   compression: str, row_group_size: int, drop_columns: tuple[str, ...] = (),
                   token_files: Any = None) -> AssembledShard:
    """Streams staged pieces, in order, into one shard file.

    Args:
      pieces: staged Arrow IPC files, whole (a path) or rows `[start, stop)` of one (`(path, start, stop)`).
      token_files: an `easydata.io.token_files.TokenFileSpec` for the `bin` / `npz` formats.

    Returns:
      The counts written: tokens are real tokens (`segment_ids != 0` in packed rows, every
      `input_ids` value otherwise), padding the rest, and trained tokens the ones with
      `loss_mask == 1` (all real tokens when there is no loss mask); documents from the hidden
      `__piece__` column of cut documents (`easydata.text.windows`).
    """
    from easydata.rows import PIECE_COLUMN, piece_counts

    drop = {*drop_columns, PIECE_COLUMN}  # hidden bookkeeping of cut documents is never written
    out_schema = pa.schema([f for f in schema if f.name not in drop])
    writer = shard_format(fmt).open_writer(dest, out_schema, compression, row_group_size, token_files)
    columns = writer.columns
    tokens = padding = trained = documents = cut = 0
    packed = "segment_ids" in out_schema.names
    masked = "loss_mask" in out_schema.names
    for piece in pieces:
        path, start, stop = (piece, 0, None) if isinstance(piece, str) else piece
        for batch in iter_staged_rows(path, start, stop):
            counts = piece_counts(batch)
            documents, cut = documents + counts.documents, cut + counts.cut_documents
            batch = conform(batch.select(out_schema.names), out_schema)
            if packed:
                segments = batch.column("segment_ids").flatten().to_numpy(zero_copy_only=False)
                real = int(np.count_nonzero(segments))
                tokens += real
                padding += len(segments) - real
            else:
                real = len(batch.column("input_ids").flatten())
                tokens += real
            trained += int(batch.column("loss_mask").flatten().to_numpy(zero_copy_only=False).sum()) if masked \
                else real
            writer.write(batch)
    rows = writer.close()
    return AssembledShard(rows, tokens, padding, trained, documents, cut, dict(writer.companions),
                          columns)
