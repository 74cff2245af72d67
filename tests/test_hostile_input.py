"""Hostile input: random, corrupted and truncated files never crash a reader with a traceback.

Planning a dataset may refuse a file with one clear `InputError` (before any work starts); reading a
split never raises for bad data: what cannot be read becomes dead letters with a reason, and the
documents before the damage are kept. Property-tested with hypothesis on every input type, plus
targeted cases: a Parquet file with one corrupt row group, a truncated gzip file.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from easydata.config import DatasetConfig
from easydata.errors import InputError
from easydata.sources import plan_splits, read_split

EXTENSIONS = ["jsonl", "json", "csv", "tsv", "txt", "parquet", "arrow", "jsonl.gz", "jsonl.zst", "txt.bz2",
              "jsonl.xz"]


def _read_everything(path: Path, **dataset) -> tuple[int, list]:
    """(documents, rejects) of a file; only planning may raise, and only `InputError`."""
    ds = DatasetConfig(name="d", data_files=str(path), additional_fields=["id"], **dataset)
    try:
        splits = plan_splits(ds, target_bytes=64)
    except InputError:
        return 0, []
    documents, rejects = 0, []
    for split in splits:
        for batch in read_split(split, ds, batch_size=7, rejects=rejects):
            documents += len(batch)
            assert all(isinstance(t, str) and t.strip() for t in batch.texts)
    return documents, rejects


def _valid_bytes(ext: str, n: int = 30) -> bytes:
    records = [{"text": f"document {i} " + "ünïcode " * (i % 4), "id": i} for i in range(n)]
    base = ext.split(".")[0]
    if base == "jsonl":
        data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()
    elif base == "json":
        data = json.dumps(records, ensure_ascii=False).encode()
    elif base in ("csv", "tsv"):
        sep = "," if base == "csv" else "\t"
        data = ("text" + sep + "id\n" + "".join(f'"{r["text"]}"{sep}{r["id"]}\n' for r in records)).encode()
    elif base == "txt":
        data = "".join(r["text"] + "\n" for r in records).encode()
    else:
        table = pa.Table.from_pylist(records)
        sink = io.BytesIO()
        if base == "parquet":
            pq.write_table(table, sink, row_group_size=7)
        else:
            with pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table, max_chunksize=7)
        data = sink.getvalue()
    return _compress(data, ext)


def _compress(data: bytes, ext: str) -> bytes:
    if ext.endswith(".gz"):
        return gzip.compress(data)
    if ext.endswith(".zst"):
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    if ext.endswith(".bz2"):
        import bz2

        return bz2.compress(data)
    if ext.endswith(".xz"):
        import lzma

        return lzma.compress(data)
    return data


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ext=st.sampled_from(EXTENSIONS), data=st.binary(max_size=400))
def test_random_bytes_never_crash(tmp_path_factory, ext, data):
    path = tmp_path_factory.mktemp("random") / f"in.{ext}"
    path.write_bytes(data)
    _read_everything(path)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ext=st.sampled_from(EXTENSIONS), cut=st.floats(0, 1), flips=st.lists(st.tuples(st.floats(0, 1),
       st.integers(0, 255)), max_size=6))
def test_corrupted_and_truncated_files_never_crash(tmp_path_factory, ext, cut, flips):
    data = bytearray(_valid_bytes(ext))
    for where, value in flips:
        data[int(where * (len(data) - 1))] = value
    data = bytes(data[:max(1, int(cut * len(data)))]) if cut < 0.95 else bytes(data)
    path = tmp_path_factory.mktemp("corrupt") / f"in.{ext}"
    path.write_bytes(data)
    documents, rejects = _read_everything(path)
    assert documents <= 30 + 30  # never invents documents (text lines may split into more pieces)
    assert all(r.reason for r in rejects)


def test_a_corrupt_parquet_row_group_is_dead_lettered_with_its_rows(tmp_path: Path):
    path = tmp_path / "in.parquet"
    path.write_bytes(_valid_bytes("parquet"))  # 30 rows in row groups of 7
    meta = pq.ParquetFile(path).metadata
    column = meta.row_group(1).column(0)
    data = bytearray(path.read_bytes())
    start = column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
    data[start:start + column.total_compressed_size] = b"\xff" * column.total_compressed_size
    path.write_bytes(bytes(data))
    documents, rejects = _read_everything(path)
    assert documents == 23
    assert len(rejects) == 1 and rejects[0].records == 7 and rejects[0].position == 7
    assert rejects[0].reason.startswith("unreadable Parquet row group 1 (rows 7..13): ")


def test_a_truncated_gzip_file_keeps_what_came_before(tmp_path: Path):
    path = tmp_path / "in.jsonl.gz"
    full = _valid_bytes("jsonl.gz", n=2000)
    path.write_bytes(full[:len(full) // 2])
    documents, rejects = _read_everything(path)
    assert 0 < documents < 2000
    assert len(rejects) == 1 and rejects[0].reason.startswith("unreadable input after ")
    assert "EOFError" in rejects[0].reason or "Compressed file ended" in rejects[0].reason


def test_an_unreadable_file_is_one_dead_letter(tmp_path: Path):
    path = tmp_path / "in.arrow"
    path.write_bytes(b"definitely not arrow")
    documents, rejects = _read_everything(path)
    assert documents == 0 and len(rejects) == 1
    assert "is not an Arrow IPC file or stream" in rejects[0].reason


def test_an_arrow_batch_with_corrupt_offsets_is_dead_lettered_not_a_crash(tmp_path: Path):
    """A string column's offsets pointing past its data made pyarrow read out of bounds (SIGBUS; found
    by `test_corrupted_and_truncated_files_never_crash`). Run in a child process, so a crash fails
    this test instead of ending the test run."""
    import subprocess
    import sys

    import numpy as np

    sink = io.BytesIO()
    with pa.ipc.new_file(sink, pa.schema([("text", pa.string())])) as writer:
        writer.write_table(pa.table({"text": ["doc one", "doc two", "doc three"]}))
        writer.write_table(pa.table({"text": ["doc four", "doc five"]}))
    offsets = np.array([0, 7, 14, 23], dtype=np.int32).tobytes()  # the first batch's, stored verbatim
    assert sink.getvalue().count(offsets) == 1
    path = tmp_path / "in.arrow"
    path.write_bytes(sink.getvalue().replace(offsets, np.array([0, 7, 1 << 30, 23], dtype=np.int32).tobytes()))
    child = subprocess.run(
        [sys.executable, "-c", "import json, sys; from pathlib import Path;"
         " from tests.test_hostile_input import _read_everything;"
         " n, rejects = _read_everything(Path(sys.argv[1]));"
         " print(json.dumps([n, [r.reason for r in rejects]]))", str(path)],
        capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent, timeout=120)
    assert child.returncode == 0, f"reader crashed (exit {child.returncode}): {child.stderr[-300:]}"
    documents, reasons = json.loads(child.stdout.strip().splitlines()[-1])
    assert documents == 2, "the second batch is still read"
    assert len(reasons) == 1 and "ArrowInvalid" in reasons[0] and "offset" in reasons[0].lower()
