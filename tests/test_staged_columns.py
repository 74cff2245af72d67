"""Staged files hold token rows compactly and give back the same rows (`easydata.io.staged_columns`): the
all-ones attention mask left out, `list<int32>` columns that fit stored as `uint16`; through every writer
and reader of staged files (pieces, streamed packed groups, checkpoints)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from easydata.io.formats import iter_staged_rows, write_piece, write_staged_batches
from easydata.io.staged_columns import STAGED_KEY, compact, restorer
from easydata.run.checkpoint import read_batch, write_batch

INT32_LIST = pa.list_(pa.int32())


def _note(schema: pa.Schema) -> dict:
    return json.loads(schema.metadata[STAGED_KEY])


def _restored(path: str) -> pa.Table:
    batches = list(iter_staged_rows(path))
    return pa.Table.from_batches(batches)


def test_compact_narrows_exactly_the_columns_that_fit(tmp_path: Path) -> None:
    """0..65535 fits (both ends); -1, 65536 and a type other than `list<int32>` do not; nulls (a null row, a
    null value) and the value field's name (`element`, as Parquet names it) survive the round trip."""
    element = pa.list_(pa.field("element", pa.int32()))
    table = pa.table({
        "input_ids": pa.array([[0, 65535], [], None, [7, None]], element),
        "big": pa.array([[65536], [1], [2], [3]], INT32_LIST),
        "negative": pa.array([[-1], [1], [2], [3]], INT32_LIST),
        "wide": pa.array([[1], [2], [3], [4]], pa.list_(pa.int64())),
        "loss_mask": pa.array([[0, 1], [], [1], [1, 0]], INT32_LIST),
        "n": pa.array([1, 2, 3, 4], pa.int32()),
    }).replace_schema_metadata({b"origin": b"test"})
    staged = compact(table)
    assert _note(staged.schema) == {"ones_mask": None, "uint16": ["input_ids", "loss_mask"]}
    assert staged.schema.field("input_ids").type == pa.list_(pa.field("element", pa.uint16()))
    assert staged.schema.field("big").type == INT32_LIST and staged.schema.field("n").type == pa.int32()
    path = str(tmp_path / "p.arrow")
    write_piece(table, path)
    read = _restored(path)
    assert read.equals(table) and read.schema == table.schema  # types, field names, metadata, order


def test_compact_leaves_rows_without_anything_to_save_as_they_are() -> None:
    table = pa.table({"input_ids": pa.array([[70_000]], INT32_LIST), "n": [1]})
    assert compact(table) is table and restorer(table.schema)(table.to_batches()[0]).equals(table.to_batches()[0])


def test_streamed_batches_narrow_what_the_caller_names_and_refuse_what_does_not_fit(tmp_path: Path) -> None:
    """A streamed file narrows only the named columns (its batches share one schema) and never drops a mask; a
    named column with a value past 65,535 raises instead of wrapping."""
    batches = [pa.RecordBatch.from_pydict({"input_ids": pa.array([[1, 2], [3]], INT32_LIST),
                                           "attention_mask": pa.array([[1, 1], [1]], INT32_LIST)}),
               pa.RecordBatch.from_pydict({"input_ids": pa.array([[65535]], INT32_LIST),
                                           "attention_mask": pa.array([[1]], INT32_LIST)})]
    path = str(tmp_path / "g.arrow")
    assert write_staged_batches(iter(batches), path, narrow=["input_ids"]) == (3, batches[0].schema)
    with pa.memory_map(path) as f:
        schema = pa.ipc.open_file(f).schema
    assert schema.field("input_ids").type == pa.list_(pa.uint16()) and "attention_mask" in schema.names
    assert _restored(path).equals(pa.Table.from_batches(batches))
    too_big = pa.RecordBatch.from_pydict({"input_ids": pa.array([[65536]], INT32_LIST),
                                          "attention_mask": pa.array([[1]], INT32_LIST)})
    with pytest.raises(pa.ArrowInvalid):
        write_staged_batches(iter([batches[0], too_big]), str(tmp_path / "h.arrow"), narrow=["input_ids"])


@given(st.lists(st.lists(st.integers(0, 65535), max_size=30), min_size=1, max_size=5), st.data())
@settings(max_examples=40, deadline=None)
def test_streamed_narrow_batches_read_back_any_range(rows: list[list[int]], data) -> None:
    table = pa.table({"input_ids": pa.array(rows, INT32_LIST),
                      "positions": pa.array([list(range(len(r))) for r in rows], INT32_LIST)})
    cut = data.draw(st.integers(0, table.num_rows))
    batches = [b for b in (table.slice(0, cut), table.slice(cut)) for b in b.combine_chunks().to_batches()
               if b.num_rows]
    start = data.draw(st.integers(0, table.num_rows))
    stop = data.draw(st.integers(start, table.num_rows))
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "g.arrow")
        write_staged_batches(iter(batches), path, narrow=["input_ids", "positions"])
        got = list(iter_staged_rows(path, start, stop))
        assert pa.Table.from_batches(got, table.schema).equals(table.slice(start, stop - start))


def test_checkpoints_are_compact_and_read_back_equal(tmp_path: Path) -> None:
    """A tokenized batch (16-bit ids, all-ones mask) is checkpointed in well under half its bytes and reads
    back the same batch, metadata included; a checkpoint written without the compaction (an older version's)
    reads as it is."""
    import numpy as np

    rng = np.random.default_rng(0)
    lengths = rng.integers(200, 4000, 64)
    ids = pa.array([rng.integers(0, 32000, n).tolist() for n in lengths], INT32_LIST)
    mask = pa.array([[1] * int(n) for n in lengths], INT32_LIST)
    batch = pa.RecordBatch.from_pydict({"input_ids": ids, "attention_mask": mask, "k": [str(i) for i in range(64)]})
    batch = batch.replace_schema_metadata({b"origin": b"test"})
    write_batch(str(tmp_path / "c.arrow"), batch, {"unit": 3})
    got, info = read_batch(str(tmp_path / "c.arrow"))
    assert info == {"unit": 3} and got.equals(batch) and got.schema == batch.schema
    old = tmp_path / "old.arrow"
    schema = batch.schema.with_metadata({**batch.schema.metadata, b"easydata.run.checkpoint": b'{"unit": 3}'})
    with pa.OSFile(str(old), "wb") as f, pa.ipc.new_file(f, schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as w:
        w.write_batch(batch.replace_schema_metadata(schema.metadata))
    assert (tmp_path / "c.arrow").stat().st_size < old.stat().st_size * 0.6
    got, info = read_batch(str(old))
    assert info == {"unit": 3} and got.equals(batch) and got.schema == batch.schema
