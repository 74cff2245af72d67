"""Rows as serialized `tf.train.Example` protocol buffers, written and read without TensorFlow.

The wire format is written directly (it is small and stable): an `Example` holds `Features`, a map from
each column name to a `Feature`, here an `Int64List` (packed varints) for integer lists and integers,
a `BytesList` for text. Token columns keep their names (`input_ids`, `segment_ids`, `positions`,
`loss_mask`, `attention_mask`), which is what MaxText's `ParseFeatures` and `tf.io.parse_single_example`
expect. Varints are encoded and decoded with numpy, a column at a time, never a Python call per token.
The output is tested against TensorFlow's own parser (tests/test_record_files.py).
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

import numpy as np
import pyarrow as pa

from easydata.io.field_values import json_text, python_values
from easydata.io.token_arrays import numpy_dtype

__all__ = ["encode_examples", "decode_examples", "varints", "read_varints", "record_types", "TYPES_FEATURE"]


def _arrow_type(name: str, default: pa.DataType) -> pa.DataType:
    """The Arrow type a schema string (`int32`, `bool`, ...) names, else `default`."""
    simple = {"int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(), "uint8": pa.uint8(),
              "uint16": pa.uint16(), "uint32": pa.uint32(), "uint64": pa.uint64(), "bool": pa.bool_()}
    return simple.get(name, default)


def _item_type(kind: str) -> str:
    """The item type a list's schema string names (`list<item: int32>` -> `int32`)."""
    return kind.split(": ", 1)[-1].rstrip(">")


def varints(values: np.ndarray) -> bytes:
    """Protocol-buffer varints of non-negative integers (negative ones as their 64-bit two's complement)."""
    return _varints_with_ends(values)[0].tobytes()


def _varints_with_ends(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`varints` as a uint8 array, and where each value's varint ends in it (for cutting rows out).

    Column-wise: every value's k-th varint byte is computed at once into an `(n, widest)` matrix, whose
    bytes in use (`k < its byte count`) are then taken in row order; `widest` follows the largest value
    (3 for token ids below 2**21), so a column costs a few passes, not one per possible byte.
    """
    v = np.asarray(values).astype(np.int64).view(np.uint64)
    if not len(v):
        return np.zeros(0, np.uint8), np.zeros(0, np.int64)
    largest = int(v.max())
    if largest < 0x80:  # every value one byte: the values themselves
        return v.astype(np.uint8), np.arange(1, len(v) + 1, dtype=np.int64)
    unsigned = np.uint32 if largest < 2**32 else np.uint64  # token ids: half the memory traffic
    v = v.astype(unsigned)
    widest = (largest.bit_length() + 6) // 7
    groups = np.ones(len(v), dtype=np.uint8)
    for k in range(1, widest):
        groups += v >= unsigned(1 << (7 * k))
    matrix = np.empty((len(v), widest), dtype=np.uint8)
    for k in range(widest):
        more = (groups > k + 1).view(np.uint8) << np.uint8(7)
        matrix[:, k] = (v >> unsigned(7 * k)).astype(np.uint8) & np.uint8(0x7F) | more
    used = np.arange(widest, dtype=np.uint8)[None, :] < groups[:, None]
    return matrix[used], np.cumsum(groups, dtype=np.int64)


def read_varints(data: bytes | memoryview) -> np.ndarray:
    """The integers of a packed varint buffer (as int64)."""
    b = np.frombuffer(data, dtype=np.uint8)
    if not len(b):
        return np.zeros(0, dtype=np.int64)
    ends = np.flatnonzero(b < 0x80)
    starts = np.concatenate([[0], ends[:-1] + 1])
    index = np.arange(len(b))
    owner = np.repeat(np.arange(len(ends)), ends - starts + 1)
    shifts = (7 * (index - starts[owner])).astype(np.uint64)
    payload = (b & 0x7F).astype(np.uint64) << shifts
    return np.add.reduceat(payload, starts).view(np.int64)


def _varint(n: int) -> bytes:
    """One non-negative integer's varint (lengths and tags: plain Python beats numpy for one value)."""
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _length_delimited(field: int, payload: bytes) -> bytes:
    return bytes([field << 3 | 2]) + _varint(len(payload)) + payload


def _bytes_feature(values: Iterable[bytes]) -> bytes:
    return _length_delimited(1, b"".join(_length_delimited(1, v) for v in values))


def _column_features(column: pa.Array) -> list[Optional[bytes]]:
    """Each row's `Feature` bytes for one column (None: the row has no value there)."""
    t = column.type
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        if not pa.types.is_integer(t.value_type):  # e.g. packed rows' sources: a BytesList of the items' text
            return [_bytes_feature([("" if x is None else _text(x)).encode("utf-8") for x in v]) if v is not None
                    else None for v in python_values(column)]
        offsets = column.offsets.to_numpy().astype(np.int64)
        offsets = offsets - offsets[0]
        encoded, ends = _varints_with_ends(column.flatten().to_numpy(zero_copy_only=False))
        byte_at = np.concatenate([[0], ends])[offsets]  # each row's varints, cut from the column's in one pass
        data = encoded.tobytes()
        valid = column.is_valid().to_numpy(zero_copy_only=False)
        return [_length_delimited(3, _length_delimited(1, data[byte_at[i]:byte_at[i + 1]])
                                  if byte_at[i + 1] > byte_at[i] else b"") if valid[i] else None
                for i in range(len(column))]
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return [_length_delimited(3, _length_delimited(1, _varint(int(v) & 0xFFFFFFFFFFFFFFFF)))
                if v is not None else None for v in column.to_pylist()]
    return [_bytes_feature([(v if isinstance(v, bytes) else _text(v).encode("utf-8"))]) if v is not None else None
            for v in python_values(column)]


def _text(value: Any) -> str:
    """A value of a BytesList feature: text as it is, a struct, map or list as JSON, anything else as `str`."""
    return json_text(value) if isinstance(value, (dict, list, tuple)) else str(value)


#: A feature of a file's first Example only: the Arrow type of every column (JSON), so the file reads back
#: with its schema (an int64 list and an int64 scalar look alike in an Example). Readers that ask for
#: named features (TensorFlow, MaxText) never see it.
TYPES_FEATURE = "__easydata_types__"


def encode_examples(table: pa.Table | pa.RecordBatch, with_types: bool = False) -> list[bytes]:
    """One serialized `tf.train.Example` per row, its features in the table's column order; `with_types`:
    the first one also carries `TYPES_FEATURE`."""
    import json

    keys = [_length_delimited(1, name.encode("utf-8")) for name in table.schema.names]
    columns = [_column_features(c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c) for c in table.columns]
    types = _length_delimited(1, _length_delimited(1, TYPES_FEATURE.encode()) + _length_delimited(
        2, _bytes_feature([json.dumps({f.name: str(f.type) for f in table.schema}).encode()])))
    out = []
    for i in range(table.num_rows):
        entries = b"".join(_length_delimited(1, key + _length_delimited(2, column[i]))
                           for key, column in zip(keys, columns) if column[i] is not None)
        out.append(_length_delimited(1, entries + (types if with_types and i == 0 else b"")))
    return out


def record_types(record: bytes) -> Optional[dict[str, str]]:
    """The column types a file's first Example carries (`TYPES_FEATURE`), if it does."""
    import json

    found = _parse(record).get(TYPES_FEATURE)
    return json.loads(found[0]) if isinstance(found, list) and found else None


def _fields(data: memoryview) -> Iterable[tuple[int, memoryview]]:
    """The length-delimited fields of a message: `(field number, payload)`."""
    at = 0
    while at < len(data):
        tag = data[at]
        at += 1
        if tag & 7 != 2:
            raise ValueError(f"unexpected wire type {tag & 7} in a tf.train.Example")
        length, shift = 0, 0
        while True:
            byte = data[at]
            at += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        yield tag >> 3, data[at:at + length]
        at += length


def _parse(record: bytes) -> dict[str, Any]:
    features: dict[str, Any] = {}
    for _, feature_map in _fields(memoryview(record)):          # Example.features
        for _, entry in _fields(feature_map):                    # Features.feature (map entries)
            key, value = None, None
            for number, payload in _fields(entry):
                if number == 1:
                    key = bytes(payload).decode("utf-8")
                else:
                    value = payload
            if key is None:
                continue
            kind, inner = next(iter(_fields(value)), (3, memoryview(b""))) if value is not None else (3, memoryview(b""))
            if kind == 3:                                         # Int64List, packed
                packed = [p for _, p in _fields(inner)]
                features[key] = read_varints(b"".join(bytes(p) for p in packed))
            elif kind == 1:                                       # BytesList
                features[key] = [bytes(p) for _, p in _fields(inner)]
    return features


def decode_examples(records: Iterable[bytes], columns: Optional[list[str]] = None,
                    schema: Optional[dict[str, str]] = None) -> pa.RecordBatch:
    """Serialized Examples (as `encode_examples` writes them) -> a record batch: integer lists as
    `list<int32>` token columns (int64 lists when `schema` says so), text as strings."""
    parsed = [_parse(r) for r in records]
    names: list[str] = list(schema or {})  # every column the file holds, even one that is null in these rows
    for row in parsed:
        row.pop(TYPES_FEATURE, None)
        names.extend(k for k in row if k not in names)
    if columns is not None:
        names = [n for n in columns if n in names]
    arrays = {}
    for name in names:
        values = [row.get(name) for row in parsed]
        kind = (schema or {}).get(name, "list<item: int32>")
        texts = name in (schema or {}) and kind.startswith(("list<", "large_list<")) and \
            any(v is not None and not isinstance(v, np.ndarray) for v in values)
        if kind.startswith(("list<item: string", "large_list<item: string")) or texts:
            # a list of text, or of values written as their text (timestamps, structs, maps): every item
            arrays[name] = pa.array([[x.decode("utf-8") for x in v] if v is not None else None for v in values],
                                    type=pa.list_(pa.string()))
        elif all(v is None for v in values) and kind == "string":
            arrays[name] = pa.nulls(len(values), pa.string())
        elif all(v is None or isinstance(v, np.ndarray) for v in values) and kind != "string":
            if kind.startswith("list") or kind.startswith("large_list"):
                lengths = np.array([len(v) if v is not None else 0 for v in values], dtype=np.int64)
                flat = np.concatenate([v for v in values if v is not None]) if any(v is not None for v in values) \
                    else np.zeros(0, np.int64)
                offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
                value_type = _arrow_type(_item_type(kind), pa.int32())
                flat = flat.astype(np.int64)  # a varint holds a uint64 as the int64 of its bits
                items = flat.view(np.uint64) if value_type == pa.uint64() else flat.astype(numpy_dtype(value_type))
                arrays[name] = pa.ListArray.from_arrays(pa.array(offsets), pa.array(items, type=value_type))
            else:
                value_type = _arrow_type(kind, pa.int64())
                bits = 0xFFFFFFFFFFFFFFFF if value_type == pa.uint64() else -1
                arrays[name] = pa.array([int(v[0]) & bits if v is not None and len(v) else None for v in values],
                                        type=pa.int64() if bits == -1 else pa.uint64()).cast(value_type)
        else:
            arrays[name] = pa.array([v[0].decode("utf-8") if v else None for v in values], type=pa.string())
    return pa.RecordBatch.from_pydict(arrays)
