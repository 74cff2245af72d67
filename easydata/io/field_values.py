"""Additional fields' values (`additional_fields`): their Arrow types from table inputs, and their text.

A Parquet or Arrow input's additional fields reach the output with the type their column has (`table_types`): an
`int8` stays `int8`, a `uint64` hash keeps its full range, a `timestamp[ns]` its nanoseconds (`plain_type` says
what changes: encodings, and maps, which the `datasets` library cannot load, as key/value lists). Values travel
between reading and tokenizing as Python values (a document batch is a list of rows), so the type is carried beside
them and the column is built again with it (`field_array`); a value Python cannot hold exactly (a nanosecond
timestamp, time or duration) travels as its integer count of nanoseconds (`exact_values`). Any other column's
values, and the readers' rows, are pyarrow's Python values, with numpy's for the nanoseconds pyarrow gives only
through pandas (`python_column`, `python_rows`). Without a type (JSON lines, CSV, a `format_callback`'s records, or
a batch whose documents came from files that type the field differently) the type is inferred from the values, as
before.

Where an output holds a field as text (JSON lines, a TFRecord feature of bytes, a column whose types could
not be unified), `python_values` and `json_text` give every value a text form: JSON's own values as they are,
dates, times and decimals as their text, durations as their seconds (`"1.5s"`), bytes as base64, and a float
that JSON cannot hold (NaN, infinity) as null.
"""

from __future__ import annotations

import base64
import collections
import datetime
import json
import math
from typing import Any, Optional

import numpy as np
import pyarrow as pa

__all__ = ["table_types", "plain_type", "exact_values", "field_array", "python_values", "python_column", "python_rows",
           "duration_text", "json_text", "as_text"]


def plain_type(arrow_type: pa.DataType) -> pa.DataType:
    """The type a field's values are written with (also inside lists and structs): a dictionary-encoded column
    as its values' type, Arrow's view types (`string_view`, `binary_view`) as `string` and `binary` (encodings of
    a column, not types of its values), and a map as the list of `key`/`value` structs it is stored as (the
    `datasets` library, which the output must load in, has no map type)."""
    t = arrow_type
    if pa.types.is_dictionary(t):
        return plain_type(t.value_type)
    if getattr(pa.types, "is_string_view", _never)(t):  # pyarrow >= 16
        return pa.string()
    if getattr(pa.types, "is_binary_view", _never)(t):
        return pa.binary()
    if pa.types.is_map(t):
        return pa.list_(pa.struct([pa.field("key", plain_type(t.key_type), nullable=False),
                                   pa.field("value", plain_type(t.item_type))]))
    return _children_replaced(t, plain_type)


def _never(arrow_type: pa.DataType) -> bool:
    return False


def table_types(schema: pa.Schema, fields: list[str], columns: Optional[list[str]] = None
                ) -> dict[str, pa.DataType]:
    """The types of the additional `fields` a table of `schema` holds, by field name; `columns` are the columns
    they are read from when not their names (a dataset's `format_fields` renames)."""
    counts = collections.Counter(schema.names)  # a name given twice types nothing (the reader refuses it)
    types = {field: plain_type(schema.field(column).type) for field, column in zip(fields, columns or fields)
             if counts[column] == 1}
    return {field: t for field, t in types.items() if _loadable(t)}


def _loadable(arrow_type: pa.DataType) -> bool:
    """Whether every type in `arrow_type` is one every output and the `datasets` library take: not an extension
    type (a UUID, JSON), an interval, a union, a list view or a run-end encoding, whose fields are typed from
    their Python values instead (a UUID as its text, as before)."""
    t = arrow_type
    plain = (pa.types.is_null(t) or pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t)
             or pa.types.is_decimal(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
             or pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
             or pa.types.is_temporal(t) and not pa.types.is_interval(t))
    nested = pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t) \
        or pa.types.is_struct(t)
    if isinstance(t, pa.BaseExtensionType) or not (plain or nested):
        return False
    return all(_loadable(t.field(i).type) for i in range(t.num_fields))


def _nanosecond_temporal(arrow_type: pa.DataType) -> bool:
    return ((pa.types.is_timestamp(arrow_type) or pa.types.is_duration(arrow_type) or pa.types.is_time64(arrow_type))
            and arrow_type.unit == "ns")


def _children_replaced(arrow_type: pa.DataType, child: Any) -> pa.DataType:
    """A list, map or struct type with each type it holds replaced by `child(type)`; any type itself where
    nothing changes."""
    t = arrow_type
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        value = child(t.value_type)
        if value == t.value_type:
            return t
        field = t.value_field.with_type(value)
        return pa.large_list(field) if pa.types.is_large_list(t) else \
            pa.list_(field, t.list_size) if pa.types.is_fixed_size_list(t) else pa.list_(field)
    if pa.types.is_map(t):
        key, item = child(t.key_type), child(t.item_type)
        return t if (key, item) == (t.key_type, t.item_type) else pa.map_(key, item)
    if pa.types.is_struct(t):
        fields = [t.field(i) for i in range(t.num_fields)]
        replaced = [f.with_type(child(f.type)) for f in fields]
        return t if replaced == fields else pa.struct(replaced)
    return t


def _leaves_replaced(arrow_type: pa.DataType, leaf: Any) -> pa.DataType:
    """`arrow_type` with each leaf type `t` (through lists, structs and maps) replaced by `leaf(t)`."""
    if arrow_type.num_fields == 0:
        return leaf(arrow_type)
    return _children_replaced(arrow_type, lambda t: _leaves_replaced(t, leaf))


def exact_values(column: Any) -> list[Any]:
    """A typed field's values, exactly: Python values, except a nanosecond timestamp, time or duration (also
    inside a list, struct or map) as its integer count of nanoseconds (pyarrow gives these only through pandas,
    which a local job does not import, and a Python `datetime` holds microseconds). `field_array(values, the
    column's type)` builds the column again."""
    as_ints = _leaves_replaced(column.type, lambda t: pa.int64() if _nanosecond_temporal(t) else t)
    return (column if as_ints == column.type else column.cast(as_ints)).to_pylist()


def field_array(values: list[Any], arrow_type: Optional[pa.DataType] = None) -> pa.Array:
    """The Arrow column of an additional field: of `arrow_type` when given (its input column's), else of the
    type Arrow infers from the values; text (`as_text`) when the values have no common type or it is not
    `_loadable` (a UUID)."""
    if arrow_type is not None:
        try:
            return pa.array(values, type=arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, TypeError):
            pass  # values that are not the column's (an extension type's objects): inferred, as any field's
    try:
        inferred = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        inferred = None
    if inferred is not None and _loadable(inferred.type):
        return inferred
    return pa.array([as_text(v) for v in values], type=pa.string())  # (pyarrow infers a `uuid.UUID` as arrow.uuid)


def python_values(column: Any) -> list[Any]:
    """An output column's values as Python values for a text format: `to_pylist`, except that a timestamp, date
    or time (also inside a list, struct or map) gives Arrow's text of it (exact to its unit: a Python `datetime`
    holds microseconds) and a duration its seconds (`duration_text`)."""
    def leaf(t: pa.DataType) -> pa.DataType:
        if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t):
            return pa.string()
        return pa.int64() if pa.types.is_duration(t) else t

    text_type = _leaves_replaced(column.type, leaf)
    values = (column if text_type == column.type else column.cast(text_type)).to_pylist()
    if _has(column.type, pa.types.is_duration):
        values = [_leaf_values_mapped(v, column.type, _duration_as_text) for v in values]
    return values


def _has(arrow_type: pa.DataType, test: Any) -> bool:
    """Whether `arrow_type` or a type inside it passes `test`."""
    if test(arrow_type):
        return True
    return any(_has(arrow_type.field(i).type, test) for i in range(arrow_type.num_fields))


def _leaf_values_mapped(value: Any, arrow_type: pa.DataType, leaf: Any) -> Any:
    """`value` (a Python value of `arrow_type`) with each non-null leaf value `v` of type `t` (through lists,
    structs and maps) replaced by `leaf(t, v)`."""
    t = arrow_type
    if value is None:
        return None
    if pa.types.is_map(t):
        return [(_leaf_values_mapped(k, t.key_type, leaf), _leaf_values_mapped(v, t.item_type, leaf))
                for k, v in value]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [_leaf_values_mapped(v, t.value_type, leaf) for v in value]
    if pa.types.is_struct(t):
        return {t.field(i).name: _leaf_values_mapped(value[t.field(i).name], t.field(i).type, leaf)
                for i in range(t.num_fields)}
    return leaf(t, value)


def _duration_as_text(arrow_type: pa.DataType, value: Any) -> Any:
    """A duration leaf (cast to its integer count) as `duration_text`; any other leaf as it is."""
    return duration_text(value, _PER_SECOND[arrow_type.unit]) if pa.types.is_duration(arrow_type) else value


def python_column(column: Any) -> list[Any]:
    """A column's values as `to_pylist` gives them, except a nanosecond value pyarrow refuses to give without
    pandas (a timestamp, duration or time with nanoseconds a Python `datetime` cannot hold): numpy's
    `datetime64[ns]` or `timedelta64[ns]` (a time: since midnight) instead of an error, exact. What the readers
    give, and what a `format_callback` or a chat template gets, the same whether pandas is installed or not but
    for pandas' own `Timestamp` and `Timedelta`."""
    try:
        return column.to_pylist()
    except ValueError:  # "Nanosecond resolution temporal type ... Install pandas ..."
        return [_leaf_values_mapped(v, column.type, _numpy_nanoseconds) for v in exact_values(column)]


def python_rows(table: pa.Table | pa.RecordBatch) -> list[dict[str, Any]]:
    """`table`'s rows as `to_pylist` gives them, each value as `python_column` gives it."""
    try:
        return table.to_pylist()
    except ValueError:
        columns = [python_column(column) for column in table.columns]
        return [dict(zip(table.column_names, values)) for values in zip(*columns)]


def _numpy_nanoseconds(arrow_type: pa.DataType, value: Any) -> Any:
    """A nanosecond temporal leaf (as `exact_values` gives it, an integer) as numpy's exact value."""
    if not _nanosecond_temporal(arrow_type):
        return value
    return np.datetime64(value, "ns") if pa.types.is_timestamp(arrow_type) else np.timedelta64(value, "ns")


_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def duration_text(count: int, per_second: int) -> str:
    """A duration of `count` units (`per_second` to a second) as its seconds, exactly, in the form of Google's
    JSON durations (`"1.5s"`, `"-0.000000001s"`)."""
    seconds, fraction = divmod(abs(count), per_second)
    digits = len(str(per_second)) - 1
    text = f"{seconds}.{fraction:0{digits}d}".rstrip("0").rstrip(".") if digits else str(seconds)
    return ("-" if count < 0 else "") + text + "s"


def _json_default(value: Any) -> Any:
    """JSON for what `json` cannot write: bytes as base64, a duration as `duration_text`, anything else (dates
    and times, decimals) as its text."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime.timedelta):
        return duration_text((value.days * 86_400 + value.seconds) * 10**6 + value.microseconds, 10**6)
    return str(value)


def _finite(value: Any) -> Any:
    """`value` with every float JSON cannot hold (NaN, infinity) replaced by None, walked without recursion."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    root = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        container, key = stack.pop()
        item = container[key]
        if isinstance(item, float) and not math.isfinite(item):
            container[key] = None
        elif isinstance(item, dict):
            item = container[key] = dict(item)
            stack.extend((item, k) for k in item)
        elif isinstance(item, (list, tuple)):
            item = container[key] = list(item)
            stack.extend((item, i) for i in range(len(item)))
    return root[0]


def json_text(value: Any) -> str:
    """`value` as one line of JSON (`ensure_ascii=False`), with the forms the module docstring gives for what
    JSON has no value for: the same text whichever output writes it."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, default=_json_default)
    except ValueError:  # NaN or infinity somewhere: null, as pandas and JavaScript write them
        return json.dumps(_finite(value), ensure_ascii=False, allow_nan=False, default=_json_default)


def as_text(value: Any) -> Optional[str]:
    """The text form of a field value in a text column: strings as they are, a value JSON has no form for (a date,
    a decimal, bytes, a UUID) as its text without JSON's quotes, anything else as `json_text`."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (dict, list, tuple, int, float, bool)):
        return json_text(value)
    return _json_default(value)
