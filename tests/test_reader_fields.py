"""The readers give an output's additional fields as their values (`GrainSource`, the `ShardedDataSource` family).

Before, `GrainSource` made every list an `int32` array: a `list<float>` field's `[0.5, 1.5]` came back as
`[0, 1]` and a `list<string>` field raised `ValueError`; and where pandas is not installed (it is not a
dependency), every reader raised on a nanosecond timestamp a Python `datetime` cannot hold, a type the output
keeps from a Parquet input since additional fields keep their types. A damaged shard is named by every reader.
"""

from __future__ import annotations

import decimal
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

from easydata.io.field_values import python_rows
from easydata.reader import GrainSource
from tests.conftest import WITHOUT_PANDAS, write_synthetic_output

_NS = 1_600_000_000_123_456_789

SCHEMA = pa.schema([
    ("input_ids", pa.list_(pa.int32())),
    ("attention_mask", pa.list_(pa.int32())),
    ("scores", pa.list_(pa.float32())),
    ("tags", pa.list_(pa.string())),
    ("counts", pa.list_(pa.int64())),
    ("price", pa.decimal128(10, 2)),
    ("at", pa.timestamp("ns")),
])


def _rows() -> list[dict]:
    return [{"input_ids": [5, 6, 7], "attention_mask": [1, 1, 1], "scores": [0.5, 1.5], "tags": ["a", "b"],
             "counts": [2**40, None], "price": decimal.Decimal("1.25"), "at": _NS},
            {"input_ids": [8], "attention_mask": [1], "scores": [-2.25], "tags": [], "counts": [3],
             "price": None, "at": _NS + 1}]


def test_grain_source_gives_each_field_its_values(tmp_path: Path) -> None:
    write_synthetic_output(str(tmp_path / "out"), {"web": [_rows()]}, SCHEMA)
    source = GrainSource(str(tmp_path / "out"))
    first, second = source[0], source[1]
    assert first["input_ids"].dtype == np.int32 and first["input_ids"].tolist() == [5, 6, 7]
    assert first["scores"].dtype == np.float32 and first["scores"].tolist() == [0.5, 1.5]
    assert first["tags"] == ["a", "b"] and second["tags"] == []
    assert first["counts"] == [2**40, None]  # a null inside: the list as it is
    assert second["counts"].dtype == np.int64 and second["counts"].tolist() == [3]
    assert first["price"] == decimal.Decimal("1.25") and second["price"] is None
    assert [_nanoseconds(r["at"]) for r in (first, second)] == [_NS, _NS + 1]


def _nanoseconds(value) -> int:
    """A timestamp's nanoseconds: pandas' `Timestamp` (pyarrow's value where pandas is installed) or numpy's."""
    return value.value if hasattr(value, "value") else int(value.astype("datetime64[ns]").astype(np.int64))


_WITHOUT_PANDAS = WITHOUT_PANDAS + """
import numpy as np
import pyarrow as pa
from easydata.io.field_values import python_rows
from easydata.reader import GrainSource, ParquetShardedSource
ns = lambda v: int(v.astype("datetime64[ns]").astype(np.int64)) if isinstance(v, np.datetime64) else \\
    int(v.astype("timedelta64[ns]").astype(np.int64))
out = sys.argv[1]
grain = GrainSource(out)
sharded = ParquetShardedSource(out)
table = pa.table({
    "at": pa.array([1_600_000_000_123_456_789, None], pa.timestamp("ns", tz="UTC")),
    "took": pa.array([[1_500_000_001, None], None], pa.list_(pa.duration("ns"))),
    "when": pa.array([{"t": 3_723_123_456_789}, None], pa.struct([("t", pa.time64("ns"))])),
    "n": [1, 2],
})
rows = python_rows(table)
print(json.dumps({
    "grain": [ns(grain[i]["at"]) for i in range(len(grain))],
    "sharded": [ns(r["at"]) for r in sharded.open_shard(sharded.shard_names[0])],
    "rows": [ns(rows[0]["at"]), rows[1]["at"], ns(rows[0]["took"][0]), rows[0]["took"][1], rows[1]["took"],
             ns(rows[0]["when"]["t"]), rows[1]["when"], rows[0]["n"], rows[1]["n"]],
    "pandas": "pandas" in sys.modules,
}))
"""


def test_readers_give_nanoseconds_without_pandas(tmp_path: Path) -> None:
    write_synthetic_output(str(tmp_path / "out"), {"web": [_rows()]}, SCHEMA)
    done = subprocess.run([sys.executable, "-c", _WITHOUT_PANDAS, str(tmp_path / "out")], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    assert got["pandas"] is False
    assert sorted(got["grain"]) == sorted(got["sharded"]) == [_NS, _NS + 1]
    assert got["rows"] == [_NS, None, 1_500_000_001, None, None, 3_723_123_456_789, None, 1, 2]


def test_python_rows_are_to_pylists_where_pyarrow_gives_them() -> None:
    table = pa.table({"a": [1, None], "b": [["x"], []], "at": pa.array([1_000, 2_000_000], pa.timestamp("us"))})
    assert python_rows(table) == table.to_pylist()
    assert python_rows(table.to_batches()[0]) == table.to_pylist()


def test_a_damaged_shard_is_named_by_the_reader(tmp_path: Path) -> None:
    """A truncated shard or a corrupt page raised pyarrow's bare `ArrowInvalid` / `OSError` from `TokenReader`,
    `GrainSource` and the sharded sources, without the file's path; now `ShardUnreadable` names it."""
    import pytest

    from easydata.io.formats import ShardUnreadable
    from easydata.reader import TokenReader

    rows = [{"input_ids": list(range(i, i + 40)), "attention_mask": [1] * 40} for i in range(64)]
    schema = pa.schema([("input_ids", pa.list_(pa.int32())), ("attention_mask", pa.list_(pa.int32()))])
    for damage in ("footer", "page"):
        out = tmp_path / damage
        manifest = write_synthetic_output(str(out), {"web": [rows]}, schema, compression="zstd", row_group_size=16)
        shard = out / manifest["datasets"]["web"]["shards"][0]["path"]
        data = bytearray(shard.read_bytes())
        if damage == "footer":
            data = data[:len(data) // 2]
        else:  # every byte of the first row group's pages after the file's magic: zstd refuses the frames
            data[4:200] = bytes(196)
        shard.write_bytes(bytes(data))
        with pytest.raises(ShardUnreadable, match=f"shard '{shard}' is unreadable"):
            list(TokenReader(str(out), batch_size=8, seq_length=40, num_epochs=1, shuffle=False))
        with pytest.raises(ShardUnreadable, match=f"shard '{shard}' is unreadable"):
            [GrainSource(str(out))[i] for i in range(64)]


def test_an_output_the_reader_cannot_read_is_refused_with_what_it_reads(tmp_path: Path) -> None:
    """The message listed "parquet, arrow" only, though the reader also reads bin, tfrecord and arrayrecord."""
    import pytest

    from easydata.reader import TokenReader

    schema = pa.schema([("input_ids", pa.list_(pa.int32())), ("attention_mask", pa.list_(pa.int32()))])
    write_synthetic_output(str(tmp_path / "out"), {"web": [[{"input_ids": [1, 2], "attention_mask": [1, 1]}]]},
                           schema, fmt="jsonl")
    with pytest.raises(ValueError) as info:
        TokenReader(str(tmp_path / "out"), batch_size=1, seq_length=2)
    assert str(info.value) == ("the reader reads arrayrecord, arrow, bin, parquet, tfrecord outputs;"
                               f" '{tmp_path / 'out'}' is jsonl (read it line by line, or write parquet / arrow).")
