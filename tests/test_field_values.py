"""Additional fields of a Parquet or Arrow input keep their column's type and exact values
(`easydata.io.field_values`), and every output writes them without a crash.

Before, a table's values went through Python and the type was inferred again: a `uint64` hash of 2**63 or more
made its record a dead letter ("an integer outside the int64 range"), a `timestamp[ns]` column made its whole
file unreadable in a local job (pyarrow gives nanoseconds only through pandas) or lost its nanoseconds, a map
became JSON text (now the list of key/value structs it is stored as: `datasets` loads no map), an `int8` an
`int64`; and a JSON lines output crashed with a traceback on a date, a decimal
or bytes, and wrote `NaN`, which is not JSON.
"""

from __future__ import annotations

import datetime
import decimal
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from easydata.cli import main
from easydata.config import DatasetConfig
from easydata.io.field_values import as_text, duration_text, exact_values, field_array, json_text, python_values, \
    table_types
from easydata.io.tf_example import decode_examples, encode_examples, record_types
from easydata.io.sources import plan_input, read_splits
from tests.conftest import WITHOUT_PANDAS, read_shard_table

N = 40
_NS = 1_600_000_000_123_456_789


def _typed_table(n: int = N) -> pa.Table:
    return pa.table({
        "text": [f"document {i} " * 3 for i in range(n)],
        "hash": pa.array([2**64 - 1 - i if i % 2 else i for i in range(n)], pa.uint64()),
        "seen": pa.array([_NS + i for i in range(n)], pa.timestamp("ns", tz="Europe/Paris")),
        "took": pa.array([i for i in range(n)], pa.duration("ns")),
        "tags": pa.array([[("k", i)] for i in range(n)], pa.map_(pa.string(), pa.int32())),
        "small": pa.array(range(n), pa.int8()),
        "price": pa.array([decimal.Decimal(f"{i}.25") for i in range(n)], pa.decimal128(10, 2)),
        "lang": pa.array(["en" if i % 3 else "fr" for i in range(n)]).dictionary_encode(),
        "score": pa.array([float("nan") if i % 5 == 0 else i / 2 for i in range(n)], pa.float32()),
    })


_FIELDS = ["hash", "seen", "took", "tags", "small", "price", "lang", "score"]


def _write(table: pa.Table, path: Path, **kwargs) -> Path:
    if path.suffix == ".parquet":
        pq.write_table(table, path, **kwargs)
    else:
        with pa.ipc.new_file(str(path), table.schema) as writer:
            writer.write_table(table, **kwargs)
    return path


def _same(a: pa.Array, b: pa.Array) -> bool:
    """`a.equals(b)`, NaN equal to NaN."""
    if pa.types.is_floating(a.type) and a.type == b.type:
        nan_a, nan_b = pc.is_nan(a), pc.is_nan(b)
        return nan_a.equals(nan_b) and pc.filter(a, pc.invert(nan_a)).equals(pc.filter(b, pc.invert(nan_b)))
    return a.equals(b)


def _plain(column: Any) -> pa.Array:
    """`column` as an output holds it, built without `field_values`: a dictionary decoded, a map as its list of
    key/value structs."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_dictionary(column.type):
        return column.dictionary_decode()
    if pa.types.is_map(column.type):
        entries = pa.StructArray.from_arrays([column.keys, column.items], fields=[
            pa.field("key", column.type.key_type, nullable=False), pa.field("value", column.type.item_type)])
        return pa.ListArray.from_arrays(column.offsets, entries)
    return column


def _read(ds: DatasetConfig, target_bytes: int = 1 << 20, batch_size: int = 1000):
    rejects: list = []
    batches = list(read_splits(plan_input(ds, target_bytes=target_bytes).splits, ds, batch_size=batch_size,
                               rejects=rejects))
    return batches, rejects


def test_json_text_writes_what_json_has_no_value_for():
    value = {"t": datetime.datetime(2020, 1, 2, 3, 4, 5), "d": datetime.date(2020, 1, 2), "x": decimal.Decimal("1.50"),
             "b": b"\x00\xff", "n": float("nan"), "l": [1.5, float("inf"), {"m": float("-inf")}], "s": "ü",
             "dt": datetime.timedelta(seconds=1.5)}
    text = json_text(value)
    assert json.loads(text) == {"t": "2020-01-02 03:04:05", "d": "2020-01-02", "x": "1.50", "b": "AP8=", "n": None,
                                "l": [1.5, None, {"m": None}], "s": "ü", "dt": "1.5s"}
    assert "NaN" not in text and "Infinity" not in text and "ü" in text
    assert value["n"] != value["n"] and value["l"][1] == float("inf")  # the value itself is left as it was
    assert as_text(None) is None and as_text("a") == "a" and as_text(3) == "3" and as_text([1, "a"]) == '[1, "a"]'
    assert as_text(b"\x00") == "AA==" and as_text(decimal.Decimal("1.50")) == "1.50"  # text, not a JSON string


def test_python_values_give_nested_values_their_text():
    ns = 1_600_000_000_123_456_789
    assert python_values(pa.array([[ns, None], None], pa.list_(pa.timestamp("ns", tz="UTC")))) == \
        [["2020-09-13 12:26:40.123456789Z", None], None]
    nested = pa.array([[{"at": ns, "took": 1500, "tags": [(1, ns)]}]], pa.list_(pa.struct([
        ("at", pa.timestamp("ns")), ("took", pa.duration("ms")), ("tags", pa.map_(pa.int64(), pa.duration("ns")))])))
    assert python_values(nested) == [[{"at": "2020-09-13 12:26:40.123456789", "took": "1.5s",
                                       "tags": [(1, "1600000000.123456789s")]}]]
    assert exact_values(nested) == [[{"at": ns, "took": datetime.timedelta(seconds=1.5), "tags": [(1, ns)]}]]
    assert field_array(exact_values(nested), nested.type).equals(nested)
    assert [duration_text(n, 1000) for n in (0, 1500, -1, 2000)] == ["0s", "1.5s", "-0.001s", "2s"]
    plain = pa.array([[1, 2]], pa.list_(pa.field("element", pa.int32())))
    assert python_values(plain) == [[1, 2]]


def test_a_tfrecord_shard_gives_back_unsigned_and_narrow_integers():
    table = pa.table({"input_ids": pa.array([[1, 2], [3]], pa.list_(pa.int32())),
                      "hash": pa.array([[2**64 - 1, 5], [7]], pa.list_(pa.uint64())),
                      "one": pa.array([2**64 - 2, 3], pa.uint64()), "small": pa.array([[1], [-2]], pa.list_(pa.int8())),
                      "tags": pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int32())),
                      "seen": pa.array([[_NS], []], pa.list_(pa.timestamp("ns")))})
    records = encode_examples(table, with_types=True)
    back = decode_examples(records, schema=record_types(records[0]))
    for name in ("input_ids", "hash", "one", "small"):
        assert back.column(name).equals(table.column(name).combine_chunks()), name
    assert back.column("tags").to_pylist() == ['[["k", 1]]', "[]"]  # a map column (a list of pairs) as JSON
    assert back.column("seen").to_pylist() == [["2020-09-13 12:26:40.123456789"], []]


def test_a_field_of_a_type_datasets_cannot_load_is_written_as_text(tmp_path: Path):
    """pyarrow infers `uuid.UUID` values as the `arrow.uuid` extension type, which `datasets` cannot load
    (nor an interval, a union or a list view): such a field is typed from its values' text."""
    import uuid

    table = pa.table({"text": ["a b", "c d"], "u": pa.array([uuid.UUID(int=i).bytes for i in range(2)], pa.uuid()),
                      "n": pa.array([1, 2], pa.int16())})
    assert table_types(table.schema, ["u", "n"]) == {"n": pa.int16()}
    assert field_array([uuid.UUID(int=1), None]).to_pylist() == ["00000000-0000-0000-0000-000000000001", None]
    path = _write(table, tmp_path / "uuid.parquet")
    (batch,), rejects = _read(DatasetConfig(name="d", data_files=str(path), additional_fields=["u", "n"]))
    assert rejects == [] and batch.field_types == {"n": pa.int16()}
    assert field_array(batch.fields["u"]).type == pa.string()


def test_field_array_builds_the_column_of_its_type_exactly():
    table = _typed_table()
    types = table_types(table.schema, _FIELDS)
    assert types["lang"] == pa.string() and types["small"] == pa.int8()  # a dictionary is an encoding, not a type
    assert types["tags"] == pa.list_(pa.struct([pa.field("key", pa.string(), nullable=False),
                                                ("value", pa.int32())]))  # `datasets` loads no map
    for name in _FIELDS:
        column = table.column(name).combine_chunks()
        assert _same(field_array(exact_values(column), types[name]), _plain(column)), name
    assert table_types(table.schema, ["small", "absent"], ["hash", "absent"]) == {"small": pa.uint64()}  # renamed
    assert field_array(["x", "y"], pa.int64()).type == pa.string()  # values not of the type: inferred
    assert field_array([1, 2]).type == pa.int64()


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_a_tables_additional_fields_keep_their_type_and_values(tmp_path: Path, suffix):
    table = _typed_table()
    path = _write(table, tmp_path / f"typed{suffix}", **({"row_group_size": 16} if suffix == ".parquet"
                                                         else {"max_chunksize": 16}))
    table = pq.read_table(path) if suffix == ".parquet" else table  # as the file holds it (a map's field names)
    ds = DatasetConfig(name="d", data_files=str(path), additional_fields=_FIELDS)
    batches, rejects = _read(ds, target_bytes=512, batch_size=7)
    assert rejects == [] and sum(len(b) for b in batches) == N
    for name in _FIELDS:
        values, types = [], set()
        for batch in batches:
            types.add(batch.field_types[name])
            values.extend(batch.fields[name])
        want = _plain(table.column(name))
        assert types == {want.type}
        assert _same(field_array(values, types.pop()), want), name


def test_a_batch_keeps_a_fields_type_only_where_all_its_sources_agree(tmp_path: Path):
    narrow = pa.table({"text": ["a b", "c d"], "n": pa.array([1, 2], pa.int8()), "m": pa.array([1, 2], pa.int16())})
    wide = pa.table({"text": ["e f", "g h"], "n": pa.array([3, 4], pa.int64()), "m": pa.array([3, 4], pa.int16())})
    _write(narrow, tmp_path / "a.parquet")
    _write(wide, tmp_path / "b.parquet")
    (tmp_path / "c.jsonl").write_text(json.dumps({"text": "i j", "n": 5, "m": 5}) + "\n")
    both = DatasetConfig(name="d", data_files=[str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")],
                         additional_fields=["n", "m"])
    (batch,), _ = _read(both)
    assert batch.field_types == {"m": pa.int16()} and batch.fields["n"] == [1, 2, 3, 4]
    with_json = DatasetConfig(name="d", data_files=[str(tmp_path / "a.parquet"), str(tmp_path / "c.jsonl")],
                              additional_fields=["n", "m"])
    (batch,), _ = _read(with_json)
    assert batch.field_types is None and batch.fields["m"] == [1, 2, 5]


def test_a_format_callbacks_records_are_typed_by_their_values(tmp_path: Path):
    path = _write(_typed_table(), tmp_path / "typed.parquet")
    ds = DatasetConfig(name="d", data_files=str(path), additional_fields=["small"],
                       format_callback=lambda record: {**record, "small": record["small"] * 1000})
    batches, rejects = _read(ds)
    assert rejects == [] and all(b.field_types is None for b in batches)
    assert field_array([v for b in batches for v in b.fields["small"]]).type == pa.int64()


_CALLBACK_WITHOUT_PANDAS = WITHOUT_PANDAS + """
import numpy as np
from easydata.config import DatasetConfig
from easydata.io.sources import plan_input, read_splits
ds = DatasetConfig(name="d", data_files=sys.argv[1], additional_fields=["seen_ns"],
                   format_callback=lambda r: {"text": r["text"], "seen_ns": int(r["seen"].astype(np.int64))})
rejects = []
batches = list(read_splits(plan_input(ds, target_bytes=1 << 20).splits, ds, batch_size=1000, rejects=rejects))
print(json.dumps({"rejects": [str(r) for r in rejects], "seen": [v for b in batches for v in b.fields["seen_ns"]],
                  "pandas": "pandas" in sys.modules}))
"""


def test_a_format_callback_gets_nanoseconds_without_pandas(tmp_path: Path):
    """A callback's record holds every column: one of nanosecond timestamps made each row a dead letter where
    pandas is not installed (pyarrow gives nanoseconds only through it); now it holds numpy's exact value."""
    import subprocess
    import sys

    path = _write(_typed_table(), tmp_path / "typed.parquet")
    done = subprocess.run([sys.executable, "-c", _CALLBACK_WITHOUT_PANDAS, str(path)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    assert got == {"rejects": [], "seen": [_NS + i for i in range(N)], "pandas": False}


def _run(tmp_path: Path, tokenizer_dir: Path, fmt: str) -> Path:
    source = _write(_typed_table(), tmp_path / "typed.parquet")
    job = tmp_path / f"job-{fmt}.json"
    out = tmp_path / f"out-{fmt}"
    job.write_text(json.dumps({
        "default_tokenizer": str(tokenizer_dir), "pack": {"enabled": False},
        "datasets": [{"name": "d", "data_files": str(source), "additional_fields": _FIELDS}],
        "save": {"output_dir": str(out), "format": fmt, "num_shards": 1}}))
    assert main(["run", str(job), "--quiet", "--direct_num_workers=1"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["documents_written"] == N and manifest["documents_rejected"] == 0
    (shard,) = manifest["datasets"]["d"]["shards"]
    return out / shard["path"]


def test_a_parquet_output_holds_the_inputs_fields_as_they_were(tmp_path: Path, tokenizer_dir: Path):
    shard = _run(tmp_path, tokenizer_dir, "parquet")
    got = read_shard_table(str(shard), "parquet").sort_by("small")
    table = pq.read_table(tmp_path / "typed.parquet")
    for name in _FIELDS:
        want = _plain(table.column(name))
        assert _same(got.column(name).combine_chunks().cast(want.type), want), name
    import datasets  # SPEC §7: the files load in `datasets` (it has no map type: a map is written as key/value lists)

    loaded = datasets.load_dataset("parquet", data_files=str(shard), split="train", cache_dir=str(tmp_path / "hf"))
    assert sorted(row["hash"] for row in loaded) == sorted(table.column("hash").to_pylist())


@pytest.mark.slow
def test_a_json_lines_output_writes_every_field_as_json(tmp_path: Path, tokenizer_dir: Path):
    table = _typed_table()
    lines = _run(tmp_path, tokenizer_dir, "jsonl").read_text().splitlines()
    rows = sorted(map(json.loads, lines), key=lambda row: row["small"])  # strict JSON: no NaN
    assert len(rows) == N and not any("NaN" in line for line in lines)
    assert [row["hash"] for row in rows] == table.column("hash").to_pylist()  # beyond int64: JSON's integers hold it
    assert rows[1]["seen"] == "2020-09-13 14:26:40.123456790+0200" and rows[1]["took"] == "0.000000001s"
    assert rows[1]["price"] == "1.25" and rows[0]["score"] is None and rows[1]["score"] == 0.5
    assert rows[1]["tags"] == [{"key": "k", "value": 1}] and rows[1]["lang"] == "en"


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_planning_warns_of_an_additional_field_no_sampled_document_has(tmp_path: Path, capsys, suffix):
    """A misspelt field gave a column of nulls and no word of it."""
    from easydata.config import PipelineConfig
    from easydata.run.run_plan import check_fields

    records = [{"text": f"document {i}", "url": f"https://x/{i}", "lang": None} for i in range(30)]
    path = tmp_path / f"in{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    else:
        pq.write_table(pa.Table.from_pylist(records), path)
    for fields, expected in [(["url"], ""), (["url", "urll"], "additional field 'urll' holds no value"),
                             (["lang", "urll"], "additional fields 'lang', 'urll' hold no value")]:
        ds = DatasetConfig(name="d", data_files=str(path), additional_fields=fields)
        config = PipelineConfig(datasets=[ds], default_tokenizer="unused")
        check_fields(config, ds, plan_input(ds).splits)
        err = capsys.readouterr().err
        if not expected:
            assert err == ""
            continue
        assert err == (f"easydata: warning: dataset 'd': {expected} in any of the 30 documents sampled across its input"
                       f" (missing or null): check {'their names' if ' fields ' in expected else 'its name'}\n")
