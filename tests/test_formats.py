"""Tests for `easydata.io.formats`: shard writers round-trip every format and codec, write fixed-size
row groups, produce bytes that depend only on the rows, and assemble staged pieces in order."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from easydata.io.formats import (
    ShardWriter,
    assemble_shard,
    documents_to_batch,
    iter_shard_batches,
    shard_file_name,
    take_rows,
    iter_staged_rows,
    token_list_array,
    write_piece,
    write_staged_batches,
)
from easydata.ops.sharding import HASH_COLUMN, KEY_COLUMN
from tests.conftest import read_shard_table

TOKENS = pa.list_(pa.int32())
SCHEMA = pa.schema([("input_ids", TOKENS), ("attention_mask", TOKENS), ("path", pa.string()), ("n", pa.int64())])

FORMAT_CODECS = [("parquet", c) for c in ("none", "zstd", "snappy", "gzip", "lz4")] + \
                [("arrow", c) for c in ("none", "zstd", "lz4")] + \
                [("jsonl", c) for c in ("none", "gzip", "zstd")]


def make_rows(n: int, start: int = 0) -> list[dict[str, Any]]:
    rows = []
    for i in range(start, start + n):
        ids = [(i * 7 + j) % 50_000 for j in range(i % 6)]  # includes empty rows and ids > 2**15
        rows.append({"input_ids": ids, "attention_mask": [1] * len(ids),
                     "path": None if i % 5 == 0 else f"file-{i}.py", "n": i})
    return rows


def as_batches(rows: list[dict[str, Any]], sizes: list[int]) -> list[pa.RecordBatch]:
    """The rows cut into batches of the given sizes (the last takes the rest)."""
    batches, start = [], 0
    for size in [*sizes, len(rows)]:
        chunk = rows[start:start + size]
        if start >= len(rows):
            break
        batches.append(pa.RecordBatch.from_pylist(chunk, schema=SCHEMA))
        start += len(chunk)
    return batches


def write_shard(path: Path, fmt: str, compression: str, batches: list[pa.RecordBatch],
                row_group_size: int = 10) -> int:
    writer = ShardWriter(str(path), fmt, SCHEMA, compression=compression, row_group_size=row_group_size)
    for batch in batches:
        writer.write(batch)
    return writer.close()


def plain_read(path: Path, fmt: str, compression: str) -> list[dict[str, Any]]:
    """Reads a shard with nothing but pyarrow / the standard library."""
    if fmt == "parquet":
        return pq.read_table(path).to_pylist()
    if fmt == "arrow":
        with pa.OSFile(str(path), "rb") as f:
            return pa.ipc.open_file(f).read_all().to_pylist()
    data = path.read_bytes()
    if compression == "gzip":
        data = gzip.decompress(data)
    elif compression == "zstd":
        data = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()
    return [json.loads(line) for line in data.decode("utf-8").splitlines()]


# ---- names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("args, expected", [
    ((0, 1, "parquet"), "part-00000-of-00001.parquet"),
    ((3, 16, "parquet", "zstd"), "part-00003-of-00016.parquet"),
    ((15, 16, "arrow", "lz4"), "part-00015-of-00016.arrow"),
    ((2, 4, "jsonl"), "part-00002-of-00004.jsonl"),
    ((2, 4, "jsonl", "gzip"), "part-00002-of-00004.jsonl.gz"),
    ((2, 4, "jsonl", "zstd"), "part-00002-of-00004.jsonl.zst"),
    ((12345, 100000, "parquet", "snappy"), "part-12345-of-100000.parquet"),
])
def test_shard_file_name(args: tuple, expected: str) -> None:
    assert shard_file_name(*args) == expected


# ---- round trips ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt, compression", FORMAT_CODECS)
def test_round_trip(tmp_path: Path, fmt: str, compression: str) -> None:
    rows = make_rows(37)
    path = tmp_path / shard_file_name(0, 1, fmt, compression)
    assert write_shard(path, fmt, compression, as_batches(rows, [5, 1, 20])) == 37
    assert read_shard_table(str(path), fmt).to_pylist() == rows
    assert plain_read(path, fmt, compression) == rows
    assert read_shard_table(str(path), fmt).num_rows == 37
    table = read_shard_table(str(path), fmt)
    assert table.schema.field("input_ids").type == TOKENS
    assert table.schema.field("attention_mask").type == TOKENS
    assert read_shard_table(str(path), fmt, columns=["n"]).column("n").to_pylist() == list(range(37))


@pytest.mark.parametrize("compression, codec", [("none", "UNCOMPRESSED"), ("zstd", "ZSTD"), ("snappy", "SNAPPY"),
                                                ("gzip", "GZIP"), ("lz4", "LZ4")])
def test_parquet_uses_the_requested_codec_and_int32_lists(tmp_path: Path, compression: str, codec: str) -> None:
    path = tmp_path / "s.parquet"
    write_shard(path, "parquet", compression, as_batches(make_rows(20), []))
    meta = pq.ParquetFile(path).metadata
    assert meta.row_group(0).column(0).compression.startswith(codec)  # LZ4 is written as LZ4_RAW
    assert pq.read_schema(path).field("input_ids").type == TOKENS


def test_parquet_token_columns_skip_dictionaries_and_fields_keep_them(tmp_path: Path) -> None:
    """Token ids overflow a dictionary page anyway (hashing for nothing); repeated strings do not."""
    path = tmp_path / "s.parquet"
    write_shard(path, "parquet", "zstd", as_batches(make_rows(200), []))
    group = pq.ParquetFile(path).metadata.row_group(0)
    encodings = {group.column(i).path_in_schema.split(".")[0]: set(group.column(i).encodings)
                 for i in range(group.num_columns)}
    dictionary = {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}
    assert not encodings["input_ids"] & dictionary and not encodings["attention_mask"] & dictionary
    assert encodings["path"] & dictionary and encodings["n"] & dictionary
    assert read_shard_table(str(path), "parquet").to_pylist() == make_rows(200)


@pytest.mark.parametrize("compression", ["none", "zstd", "lz4"])
def test_arrow_files_are_memory_mappable(tmp_path: Path, compression: str) -> None:
    path = tmp_path / "s.arrow"
    write_shard(path, "arrow", compression, as_batches(make_rows(23), []))
    with pa.memory_map(str(path)) as source:
        table = pa.ipc.open_file(source).read_all()
    assert table.to_pylist() == make_rows(23)
    assert table.schema == SCHEMA


def test_jsonl_is_one_json_object_per_line(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    write_shard(path, "jsonl", "none", as_batches(make_rows(3), []))
    assert path.read_text().splitlines() == [
        '{"input_ids": [], "attention_mask": [], "path": null, "n": 0}',
        '{"input_ids": [7], "attention_mask": [1], "path": "file-1.py", "n": 1}',
        '{"input_ids": [14, 15], "attention_mask": [1, 1], "path": "file-2.py", "n": 2}',
    ]


def test_loads_with_pandas(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    path = tmp_path / "s.parquet"
    write_shard(path, "parquet", "zstd", as_batches(make_rows(12), []))
    frame = pd.read_parquet(path)
    assert len(frame) == 12 and list(frame["n"]) == list(range(12))
    assert [list(x) for x in frame["input_ids"]] == [r["input_ids"] for r in make_rows(12)]


# ---- row groups and batching ---------------------------------------------------------------------


@pytest.mark.parametrize("rows, row_group_size, expected", [
    (25, 10, [10, 10, 5]),
    (20, 10, [10, 10]),  # exact fit
    (9, 10, [9]),
    (1, 10, [1]),
    (7, 1, [1] * 7),
    (30, 100, [30]),
])
@pytest.mark.parametrize("sizes", [[], [1, 1, 1], [3, 7, 1, 14], [10, 10], [11]])
def test_row_groups_have_exactly_row_group_size_rows(tmp_path: Path, rows: int, row_group_size: int,
                                                     expected: list[int], sizes: list[int]) -> None:
    data = make_rows(rows)
    parquet, arrow = tmp_path / "s.parquet", tmp_path / "s.arrow"
    write_shard(parquet, "parquet", "zstd", as_batches(data, sizes), row_group_size)
    write_shard(arrow, "arrow", "none", as_batches(data, sizes), row_group_size)
    meta = pq.ParquetFile(parquet).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == expected
    with pa.OSFile(str(arrow), "rb") as f:
        reader = pa.ipc.open_file(f)
        assert [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)] == expected
    assert [b.num_rows for b in iter_shard_batches(str(parquet), "parquet")] == expected


def test_tables_and_empty_batches_are_accepted(tmp_path: Path) -> None:
    rows = make_rows(15)
    path = tmp_path / "s.parquet"
    writer = ShardWriter(str(path), "parquet", SCHEMA, compression="zstd", row_group_size=4)
    writer.write(pa.Table.from_pylist(rows[:6], schema=SCHEMA))
    writer.write(pa.RecordBatch.from_pylist([], schema=SCHEMA))
    writer.write(pa.Table.from_batches(as_batches(rows[6:], [2, 3])))
    assert writer.close() == 15
    meta = pq.ParquetFile(path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [4, 4, 4, 3]
    assert pq.read_table(path).to_pylist() == rows


def test_batches_are_cast_to_the_shard_schema(tmp_path: Path) -> None:
    # Columns in another order and with wider integer types are selected and cast.
    batch = pa.RecordBatch.from_pydict({
        "n": pa.array([1, 2], type=pa.int32()),
        "path": ["a", None],
        "attention_mask": pa.array([[1], [1, 1]], type=pa.list_(pa.int64())),
        "input_ids": pa.array([[5], [6, 7]], type=pa.list_(pa.int64())),
    })
    path = tmp_path / "s.arrow"
    write_shard(path, "arrow", "none", [batch])
    table = read_shard_table(str(path), "arrow")
    assert table.schema == SCHEMA
    assert table.to_pylist() == [{"input_ids": [5], "attention_mask": [1], "path": "a", "n": 1},
                                 {"input_ids": [6, 7], "attention_mask": [1, 1], "path": None, "n": 2}]


@pytest.mark.parametrize("fmt, compression", FORMAT_CODECS)
def test_bytes_depend_only_on_rows(tmp_path: Path, fmt: str, compression: str) -> None:
    rows = make_rows(53)
    name = shard_file_name(0, 1, fmt, compression)
    contents = set()
    for i, sizes in enumerate(([], [1] * 52, [3, 7, 1, 14, 2], [10, 10, 10], [52])):
        path = tmp_path / f"try{i}" / f"tmp-{i}-{name}"  # a different (temporary) name every time
        path.parent.mkdir()
        write_shard(path, fmt, compression, as_batches(rows, sizes), row_group_size=10)
        contents.add(path.read_bytes())
    assert len(contents) == 1


def test_empty_shard_is_readable(tmp_path: Path) -> None:
    for fmt, compression in (("parquet", "zstd"), ("arrow", "lz4"), ("jsonl", "gzip")):
        path = tmp_path / shard_file_name(0, 1, fmt, compression)
        assert write_shard(path, fmt, compression, []) == 0
        assert read_shard_table(str(path), fmt).num_rows == 0
        assert read_shard_table(str(path), fmt).num_rows == 0
    assert pq.read_table(tmp_path / "part-00000-of-00001.parquet").schema == SCHEMA


def test_unknown_format_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown output format 'bin'"):
        ShardWriter(str(tmp_path / "s.bin"), "bin", SCHEMA)
    with pytest.raises(ValueError, match="unknown shard format 'csv'"):
        list(iter_shard_batches(str(tmp_path / "s.csv"), "csv"))


# ---- documents to record batches -----------------------------------------------------------------


def test_token_list_array() -> None:
    arr = token_list_array(np.array([5, 6, 7, 8], dtype=np.int32), np.array([0, 1, 1, 4], dtype=np.int64))
    assert arr.type == TOKENS
    assert arr.to_pylist() == [[5], [], [6, 7, 8]]


def test_attention_masks_of_ones_share_one_read_only_buffer() -> None:
    """Unpacked rows' all-ones attention masks are views of one buffer per process, not a new array per batch
    (a gigabyte of ones per gigabyte of ids, each page faulted in), and equal what a fresh array of ones gives."""
    from easydata.io.token_arrays import ones_list_array

    for offsets in ([0], [0, 0], [0, 3, 3, 7], [0, 70_000, 70_001]):
        offsets = np.array(offsets, dtype=np.int64)
        assert ones_list_array(offsets).equals(token_list_array(np.ones(int(offsets[-1]), np.int32), offsets))
    first = documents_to_batch(np.arange(5, dtype=np.int32), np.array([0, 2, 5]), {})
    second = documents_to_batch(np.arange(3, dtype=np.int32), np.array([0, 3]), {})
    masks = [b.column("attention_mask").values for b in (first, second)]
    assert masks[0].buffers()[1].address == masks[1].buffers()[1].address  # the same ones
    assert second.column("attention_mask").to_pylist() == [[1, 1, 1]]
    with pytest.raises(ValueError, match="read-only"):
        masks[0].to_numpy()[0] = 0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 99), max_size=6), max_size=8), st.lists(st.integers(100, 109), max_size=3),
       st.lists(st.integers(110, 119), max_size=3), st.data())
def test_surround_adds_tokens_around_each_document_like_a_loop_over_them(docs, prefix, suffix, data) -> None:
    """`surround` (the one way tokens are added around documents: an engine's post-processor ids, BOS and EOS)
    equals adding them document by document, for every mix of empty documents, masks and prefix/suffix sizes."""
    from easydata.io.token_arrays import surround

    lengths = np.array([len(d) for d in docs], dtype=np.int64)
    flat = np.array([t for d in docs for t in d], dtype=np.int32)
    front = data.draw(st.none() | st.lists(st.booleans(), min_size=len(docs), max_size=len(docs)))
    back = data.draw(st.none() | st.lists(st.booleans(), min_size=len(docs), max_size=len(docs)))
    want = []
    for i, doc in enumerate(docs):
        want += (prefix if front is None or front[i] else []) + doc + (suffix if back is None or back[i] else [])
    got = surround(flat, lengths, prefix, suffix, front=None if front is None else np.array(front, dtype=bool),
                   back=None if back is None else np.array(back, dtype=bool))
    assert got.dtype == np.int32 and got.tolist() == want


def test_documents_to_batch_columns_and_types() -> None:
    flat = np.array([10, 11, 12, 13, 14, 15], dtype=np.int32)
    offsets = np.array([0, 2, 2, 6], dtype=np.int64)
    extra = {KEY_COLUMN: pa.array(["a@0", "a@9", "a@20"]), HASH_COLUMN: pa.array([3, 1, 2], type=pa.uint64())}
    batch = documents_to_batch(flat, offsets, {"path": ["x.py", None, "z.py"], "stars": [1, 2, None],
                                               "score": [0.5, 1, None], "empty": [None, None, None]}, extra)
    assert batch.schema.names == ["input_ids", "attention_mask", "path", "stars", "score", "empty", KEY_COLUMN,
                                  HASH_COLUMN]
    assert batch.column("input_ids").to_pylist() == [[10, 11], [], [12, 13, 14, 15]]
    assert batch.column("attention_mask").to_pylist() == [[1, 1], [], [1, 1, 1, 1]]
    assert batch.schema.field("input_ids").type == TOKENS and batch.schema.field("attention_mask").type == TOKENS
    assert batch.schema.field("path").type == pa.string()
    assert batch.schema.field("stars").type == pa.int64()
    assert batch.schema.field("score").type == pa.float64()
    assert batch.schema.field("empty").type == pa.null()
    assert batch.column(HASH_COLUMN).to_pylist() == [3, 1, 2]


def test_documents_to_batch_mixed_type_fields_become_text() -> None:
    """Strings stay as they are, other values become JSON (the same rule `conform` applies)."""
    flat = np.arange(5, dtype=np.int32)
    offsets = np.arange(6, dtype=np.int64)
    fields = {"meta": [1, "a", None, [1, 2], {"k": "é"}], "nested": [{"a": 1}, {"a": 2}, None, {"a": 3}, {"a": 4}]}
    batch = documents_to_batch(flat, offsets, fields)
    assert batch.schema.field("meta").type == pa.string()
    assert batch.column("meta").to_pylist() == ["1", "a", None, "[1, 2]", '{"k": "é"}']
    assert batch.column("nested").to_pylist() == fields["nested"], "uniform values keep their structure"


def test_documents_to_batch_without_documents() -> None:
    batch = documents_to_batch(np.zeros(0, dtype=np.int32), np.zeros(1, dtype=np.int64), {"path": []})
    assert batch.num_rows == 0 and batch.schema.names == ["input_ids", "attention_mask", "path"]


# ---- pieces and assembly -------------------------------------------------------------------------


def _piece(rows: list[dict[str, Any]], null_path: bool = False) -> pa.Table:
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    if null_path:
        table = table.set_column(table.schema.get_field_index("path"), "path", pa.nulls(len(rows)))
    keys = pa.array([f"k{r['n']}" for r in rows], type=pa.string())
    return table.append_column(KEY_COLUMN, keys).append_column(HASH_COLUMN, pa.array(
        [r["n"] * 11 for r in rows], type=pa.uint64()))


@pytest.mark.parametrize("fmt, compression", [("parquet", "zstd"), ("arrow", "lz4"), ("jsonl", "gzip")])
def test_assemble_shard_concatenates_pieces_in_order(tmp_path: Path, fmt: str, compression: str) -> None:
    rows = make_rows(30)
    rows_null = [dict(r, path=None) for r in rows[8:11]]  # a piece whose only values are null
    pieces = [_piece(rows[:8]), _piece(rows_null, null_path=True), _piece(rows[11:12]),
              _piece(rows[12:30]).slice(0, 18)]
    assert pieces[1].schema.field("path").type == pa.null()
    paths = []
    for i, piece in enumerate(pieces):
        paths.append(str(tmp_path / f"piece-{i}.arrow"))
        write_piece(piece, paths[-1])
    full_schema = SCHEMA.append(pa.field(KEY_COLUMN, pa.string())).append(pa.field(HASH_COLUMN, pa.uint64()))
    dest = tmp_path / shard_file_name(0, 1, fmt, compression)
    rows_written, tokens, *_ = assemble_shard(paths, str(dest), fmt, full_schema, compression=compression,
                                          row_group_size=7, drop_columns=(KEY_COLUMN, HASH_COLUMN))
    expected = rows[:8] + rows_null + rows[11:30]
    assert rows_written == 30
    assert tokens == sum(len(r["input_ids"]) for r in expected)
    table = read_shard_table(str(dest), fmt)
    assert table.schema.names == ["input_ids", "attention_mask", "path", "n"]
    assert table.to_pylist() == expected
    if fmt == "parquet":
        meta = pq.ParquetFile(dest).metadata
        assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [7, 7, 7, 7, 2]


def test_assemble_shard_counts_tokens_of_sliced_pieces(tmp_path: Path) -> None:
    rows = make_rows(12)
    piece = _piece(rows).slice(4, 5)  # list offsets not starting at zero
    write_piece(piece, str(tmp_path / "p.arrow"))
    schema = SCHEMA.append(pa.field(KEY_COLUMN, pa.string())).append(pa.field(HASH_COLUMN, pa.uint64()))
    dest = tmp_path / "s.parquet"
    written, tokens, *_ = assemble_shard([str(tmp_path / "p.arrow")], str(dest), "parquet", schema, compression="none",
                                     row_group_size=100)
    assert (written, tokens) == (5, sum(len(r["input_ids"]) for r in rows[4:9]))
    assert pq.read_table(dest).column(KEY_COLUMN).to_pylist() == ["k4", "k5", "k6", "k7", "k8"]


def test_write_piece_round_trips(tmp_path: Path) -> None:
    piece = _piece(make_rows(9))
    write_piece(piece, str(tmp_path / "p.arrow"))
    read = pa.Table.from_batches(list(iter_staged_rows(str(tmp_path / "p.arrow"))))
    assert read.equals(piece) and read.schema == piece.schema and read.num_rows == 9


def _mask_piece(lengths: list[int], mask_values=None, metadata=None) -> pa.Table:
    """An unpacked piece: ids, an attention mask (ones unless given), a text field, key and hash."""
    ids = [[(i * 31 + j) % 70_000 for j in range(n)] for i, n in enumerate(lengths)]
    masks = mask_values if mask_values is not None else [[1] * n for n in lengths]
    table = pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32())),
                      "attention_mask": pa.array(masks, pa.list_(pa.int32())),
                      "path": pa.array([f"f{i}" for i in range(len(lengths))]),
                      KEY_COLUMN: pa.array([f"k{i}" for i in range(len(lengths))]),
                      HASH_COLUMN: pa.array(range(len(lengths)), pa.uint64())})
    return table.replace_schema_metadata(metadata) if metadata else table


def test_write_piece_leaves_out_an_all_ones_attention_mask(tmp_path: Path) -> None:
    """An unpacked piece's attention mask (all ones) is not written, half of its token bytes, and reads back
    where it was, the same table; a mask with a zero, or lengths other than the ids', is written as it is."""
    lengths = [300, 0, 17, 1024, 5]
    piece = _mask_piece(lengths, metadata={b"origin": b"test"})
    path = str(tmp_path / "p.arrow")
    write_piece(piece, path)
    raw = read_shard_table(path, "arrow")
    assert "attention_mask" not in raw.schema.names and raw.num_rows == len(lengths)
    kept = tmp_path / "kept.arrow"
    write_piece(_mask_piece(lengths, [[1] * n for n in lengths[:-1]] + [[1, 1, 0, 1, 1]]), str(kept))
    assert Path(path).stat().st_size < kept.stat().st_size - 4 * sum(lengths) // 2
    read = pa.Table.from_batches(list(iter_staged_rows(path)))
    assert read.equals(piece) and read.schema == piece.schema  # metadata and column order too
    for masks in ([[1] * n for n in lengths[:-1]] + [[1, 1, 0, 1, 1]],  # a zero
                  [[1] * n for n in lengths[:-1]] + [[1] * 4],  # a row one shorter than its ids
                  [[1] * n for n in lengths[:-1]] + [[1, None, 1, 1, 1]]):  # a null inside
        other = _mask_piece(lengths, masks)
        write_piece(other, str(tmp_path / "o.arrow"))
        assert "attention_mask" in read_shard_table(str(tmp_path / "o.arrow"), "arrow").schema.names
        assert pa.Table.from_batches(list(iter_staged_rows(str(tmp_path / "o.arrow")))).equals(other)


@given(st.lists(st.integers(0, 40), min_size=1, max_size=12), st.data())
@settings(max_examples=40, deadline=None)
def test_pieces_without_their_mask_read_back_any_range(lengths: list[int], data) -> None:
    import tempfile

    table = _mask_piece(lengths)
    start = data.draw(st.integers(0, table.num_rows))
    stop = data.draw(st.integers(start, table.num_rows))
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "p.arrow")
        write_piece(table, path)
        got = list(iter_staged_rows(path, start, stop))
        assert pa.Table.from_batches(got, table.schema).equals(table.slice(start, stop - start))


@given(st.lists(st.integers(1, 9), min_size=1, max_size=6), st.data())
@settings(max_examples=40, deadline=None)
def test_staged_rows_read_back_any_range(batch_rows: list[int], data) -> None:
    import tempfile

    rows = make_rows(sum(batch_rows))
    table = _piece(rows)
    batches, first = [], 0
    for n in batch_rows:
        batches.append(table.slice(first, n).combine_chunks().to_batches()[0])
        first += n
    start = data.draw(st.integers(0, table.num_rows))
    stop = data.draw(st.integers(start, table.num_rows))
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "g.arrow")
        assert write_staged_batches(iter(batches), path) == (table.num_rows, table.schema)
        got = list(iter_staged_rows(path, start, stop))
        assert pa.Table.from_batches(got, table.schema).equals(table.slice(start, stop - start))
        assert pa.Table.from_batches(list(iter_staged_rows(path)), table.schema).equals(table)


def test_staged_files_are_compressed(tmp_path: Path) -> None:
    """Staged batches (and checkpoints, the same options) are LZ4-compressed: packed rows' positions and
    segment ids shrink to a fraction; they read back equal."""
    from easydata.run.checkpoint import read_batch, write_batch

    n = 2048
    table = pa.table({"input_ids": pa.array([list(range(i, i + n)) for i in range(64)], pa.list_(pa.int32())),
                      "positions": pa.array([list(range(n))] * 64, pa.list_(pa.int32())),
                      "segment_ids": pa.array([[1] * n] * 64, pa.list_(pa.int32()))})
    raw = 3 * 4 * 64 * n
    assert write_staged_batches(table.to_batches(), str(tmp_path / "g.arrow")) == (64, table.schema)
    assert (tmp_path / "g.arrow").stat().st_size < raw / 2
    assert pa.Table.from_batches(list(iter_staged_rows(str(tmp_path / "g.arrow"))), table.schema).equals(table)
    write_batch(str(tmp_path / "c.arrow"), table.to_batches()[0], {"unit": 1})
    assert (tmp_path / "c.arrow").stat().st_size < raw / 2
    batch, info = read_batch(str(tmp_path / "c.arrow"))
    assert info == {"unit": 1} and pa.Table.from_batches([batch]).equals(table)


def test_staging_no_batches_writes_no_file(tmp_path: Path) -> None:
    assert write_staged_batches(iter([]), str(tmp_path / "g.arrow")) == (0, None)
    assert not (tmp_path / "g.arrow").exists()


def test_assemble_shard_takes_row_ranges_of_staged_files(tmp_path: Path) -> None:
    rows = make_rows(20)
    write_piece(_piece(rows), str(tmp_path / "g.arrow"))
    schema = SCHEMA.append(pa.field(KEY_COLUMN, pa.string())).append(pa.field(HASH_COLUMN, pa.uint64()))
    written, *_ = assemble_shard([(str(tmp_path / "g.arrow"), 3, 9), (str(tmp_path / "g.arrow"), 15, 20)],
                                 str(tmp_path / "s.parquet"), "parquet", schema, compression="none",
                                 row_group_size=100)
    assert written == 11
    assert pq.read_table(tmp_path / "s.parquet").column("n").to_pylist() == [r["n"] for r in rows[3:9] + rows[15:20]]


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 300), max_size=40), seed=st.integers(0, 2**32 - 1),
       sliced=st.booleans(), indices=st.sampled_from(["permutation", "subset", "repeats"]))
def test_take_rows_equals_arrow_take(lengths: list[int], seed: int, sliced: bool, indices: str) -> None:
    """Both ways of taking rows (one-row slices for long rows, Arrow's take for short ones) give
    the batch `take` gives, also for a batch that is itself a slice of a larger one, and for the
    index arrays of its callers: a shuffle (hash groups), a subset (splits), repeats (mix copies)."""
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.integers(0, 1000, offsets[-1]), pa.int32()))
    batch = pa.record_batch({"input_ids": ids, KEY_COLUMN: pa.array([f"k{i}" for i in range(len(lengths))]),
                             HASH_COLUMN: pa.array(rng.integers(0, 2**63, len(lengths)), pa.uint64())})
    if sliced and len(lengths) > 2:
        batch = batch.slice(1, len(lengths) - 2)
    order = {"permutation": rng.permutation(batch.num_rows),
             "subset": np.flatnonzero(rng.random(batch.num_rows) < 0.5),
             "repeats": np.repeat(np.arange(batch.num_rows), rng.integers(0, 3, batch.num_rows))}[indices]
    assert take_rows(batch, order).equals(batch.take(pa.array(order, pa.int64())))
