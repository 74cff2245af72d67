"""Token rows as the run's own staged files hold them, and back.

Staged files (tokenize checkpoints, sorted groups, packed groups) are written by a run and read only by
easydata (`easydata.io.formats.iter_staged_rows`, `easydata.run.checkpoint.read_batch`), so they may hold
rows more compactly than the rows themselves, as long as reading gives back the same rows: the same
schema (metadata and column order too) and the same values. Two things are left out on writing:

- an all-ones attention mask over exactly `input_ids`' rows (every unpacked row's) is not written; it is
  made again as a view of one buffer of ones (`token_arrays.ones_list_array`): 4 of 8 bytes per token of
  an unpacked row;
- a `list<int32>` column whose values all lie in 0..65535 (token ids of a vocabulary of up to 65,536,
  the segment ids and positions of rows up to 65,535 long, loss masks) is stored as `list<uint16>` and
  widened back on reading: half the bytes to compress and write (LZ4 of packed Mistral rows 8.7 ->
  4.3 ns per token; docs/performance.md#writes-of-token-data).

Packed rows may also come without their `segment_ids` and `positions`: the pack stage then gives each row's
piece lengths in `SEGMENTS_COLUMN` instead (where `segment_ids` stood), and reading makes both columns from them
(`token_arrays.segments_from_lengths`): 4 of a packed Qwen3 row's 8 staged bytes per token, and their casts,
are never written (docs/performance.md).

What was left out is recorded in the schema's metadata (`STAGED_KEY`), so a file without it (an older
version's checkpoint) reads as it is. A leaf module beside `token_arrays`: it imports nothing else of
easydata.
"""

from __future__ import annotations

import json
from typing import Callable, Optional, Sequence, TypeVar

import pyarrow as pa

from easydata.io.token_arrays import list_column_values, ones_list_array, segments_from_lengths, token_list_array

__all__ = ["STAGED_KEY", "UINT16_MAX", "SEGMENTS_COLUMN", "compact", "restorer", "fits_uint16", "rows_schema",
           "derived_bytes"]

#: Schema metadata of a compacted staged file: JSON `{"ones_mask": <position>, "uint16": [<column>, ...],
#: "segments": <position>}`.
STAGED_KEY = b"easydata.staged"
_MASK = "attention_mask"
_MASK_FIELD = pa.field(_MASK, pa.list_(pa.int32()))
UINT16_MAX = 65535
#: Packed rows' piece lengths per row (`list<int32>`), standing for their `segment_ids` and `positions`.
SEGMENTS_COLUMN = "__segments__"
_DERIVED_FIELDS = (pa.field("segment_ids", pa.list_(pa.int32())), pa.field("positions", pa.list_(pa.int32())))

Rows = TypeVar("Rows", pa.Table, pa.RecordBatch)


def _is_int32_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) and t.value_type == pa.int32()


def _ones_mask_position(rows: pa.Table | pa.RecordBatch) -> Optional[int]:
    """The position of the rows' attention mask when it is all ones over exactly `input_ids`' rows (as an
    unpacked row's always is), else None. Arrow's kernels, no copy of the tokens."""
    import pyarrow.compute as pc

    names = rows.schema.names
    if _MASK not in names or "input_ids" not in names or rows.num_rows == 0:
        return None
    mask, ids = rows.column(_MASK), rows.column("input_ids")
    if rows.schema.field(_MASK) != _MASK_FIELD or mask.null_count or ids.null_count:
        return None
    flat = pc.list_flatten(mask)
    values = pc.min_max(flat)  # nulls left out: refused below
    if flat.null_count or values["min"].as_py() != 1 or values["max"].as_py() != 1:
        return None
    if not pc.all(pc.equal(pc.list_value_length(mask), pc.list_value_length(ids))).as_py():
        return None
    return names.index(_MASK)


def fits_uint16(column: pa.Array | pa.ChunkedArray) -> bool:
    """Whether every (non-null) value of a `list<int32>` column lies in 0..65535."""
    import pyarrow.compute as pc

    values = pc.min_max(pc.list_flatten(column))
    low, high = values["min"].as_py(), values["max"].as_py()
    return low is None or (low >= 0 and high <= UINT16_MAX)


def _with_value_type(t: pa.ListType, value_type: pa.DataType) -> pa.ListType:
    """`t` with another value type, keeping its value field's name and nullability (`item`, `element`)."""
    return pa.list_(t.value_field.with_type(value_type))


def compact(rows: Rows, narrow: Optional[Sequence[str]] = None) -> Rows:
    """`rows` as a staged file holds them, with `STAGED_KEY` in the schema metadata when anything changed.

    Args:
      narrow: None for rows that make up a whole file: what they allow is found here (the attention mask
        left out when all ones, every `list<int32>` column whose values fit stored as `uint16`). For one
        batch of a streamed file, whose schema every batch must share: the `list<int32>` columns the caller
        knows fit, and nothing else changed. A value that does not fit raises (Arrow's checked cast): a
        caller's mistake, never a silent wrap.
    """
    position = _ones_mask_position(rows) if narrow is None else None
    if position is not None:
        rows = rows.drop_columns([_MASK])
    schema = rows.schema
    checked = narrow is None  # the values were just looked at: the cast need not look again
    if narrow is None:
        narrow = [f.name for f in schema if _is_int32_list(f.type) and fits_uint16(rows.column(f.name))]
    narrow = [name for name in narrow if name in schema.names and _is_int32_list(schema.field(name).type)]
    segments = schema.get_field_index(SEGMENTS_COLUMN) if SEGMENTS_COLUMN in schema.names else None
    if position is None and not narrow and segments is None:
        return rows
    columns = list(rows.columns)
    fields = list(schema)
    for name in narrow:
        i = schema.get_field_index(name)
        fields[i] = fields[i].with_type(_with_value_type(fields[i].type, pa.uint16()))
        columns[i] = columns[i].cast(fields[i].type, safe=not checked)
    note = {"ones_mask": position, "uint16": list(narrow), **({"segments": segments} if segments is not None else {})}
    metadata = {**(schema.metadata or {}), STAGED_KEY: json.dumps(note).encode()}
    out_schema = pa.schema(fields, metadata=metadata)
    if isinstance(rows, pa.Table):
        return pa.Table.from_arrays(columns, schema=out_schema)
    return pa.RecordBatch.from_arrays(columns, schema=out_schema)


def restorer(schema: pa.Schema) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
    """What turns a batch of a staged file with this schema back into the rows `compact` was given
    (identity for a file `compact` left as it was)."""
    metadata = dict(schema.metadata or {})
    raw = metadata.pop(STAGED_KEY, None)
    if raw is None:
        return lambda batch: batch
    note = json.loads(raw)
    position, widen, segments = note.get("ones_mask"), set(note.get("uint16", ())), note.get("segments")
    fields = [f.with_type(_with_value_type(f.type, pa.int32())) if f.name in widen else f for f in schema]
    if segments is not None:  # packed rows (never with an all-ones mask left out: unpacked rows' only)
        fields[segments:segments + 1] = _DERIVED_FIELDS
    if position is not None:
        fields.insert(int(position), _MASK_FIELD)
    restored = pa.schema(fields, metadata=metadata or None)
    widened = [i for i, f in enumerate(schema) if f.name in widen]

    def restore(batch: pa.RecordBatch) -> pa.RecordBatch:
        columns = list(batch.columns)
        for i in widened:
            columns[i] = columns[i].cast(restored.field(schema.field(i).name).type)
        if segments is not None:
            rows = list_column_values(columns[schema.get_field_index("input_ids")])[1]
            lengths, pieces = list_column_values(columns[segments])
            made = segments_from_lengths(lengths, pieces, rows)
            columns[segments:segments + 1] = [token_list_array(values, rows) for values in made]
        if position is not None:
            ids = columns[schema.get_field_index("input_ids")]
            columns.insert(int(position), ones_list_array(list_column_values(ids)[1]))
        return pa.RecordBatch.from_arrays(columns, schema=restored)
    return restore


def rows_schema(schema: pa.Schema) -> pa.Schema:
    """The schema of the rows that batches with `schema` stand for: `SEGMENTS_COLUMN`, when there, as the
    `segment_ids` and `positions` it is read back as."""
    if SEGMENTS_COLUMN not in schema.names:
        return schema
    fields = list(schema)
    i = schema.get_field_index(SEGMENTS_COLUMN)
    fields[i:i + 1] = _DERIVED_FIELDS
    return pa.schema(fields, metadata=schema.metadata)


def derived_bytes(batch: pa.RecordBatch) -> int:
    """Bytes the columns `SEGMENTS_COLUMN` stands for will have: two `list<int32>` columns over exactly
    `input_ids`' rows and values, so twice its bytes (as `fill_rows`' arrays would have had)."""
    return 2 * batch.column("input_ids").nbytes if SEGMENTS_COLUMN in batch.schema.names else 0
