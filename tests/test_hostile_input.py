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
from easydata.io.sources import plan_splits, read_split
from tests.conftest import corrupt_row_group

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


@pytest.mark.slow
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
    corrupt_row_group(path, 1)
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


@pytest.mark.slow
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
         " print(json.dumps([n, [r.reason for r in rejects], [r.records for r in rejects]]))", str(path)],
        capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent, timeout=120)
    assert child.returncode == 0, f"reader crashed (exit {child.returncode}): {child.stderr[-300:]}"
    documents, reasons, records = json.loads(child.stdout.strip().splitlines()[-1])
    assert documents == 2, "the second batch is still read"
    assert len(reasons) == 1 and "ArrowInvalid" in reasons[0] and "offset" in reasons[0].lower()
    assert reasons[0].startswith("unreadable Arrow record batch 0 (rows 0..2)") and records == [3]


# ---- compressed streams cut short, BOMs, nesting, overlong lines --------------------------------------


@pytest.mark.parametrize("ext", ["jsonl.zst", "jsonl.gz", "jsonl.bz2"])
def test_a_truncated_compressed_stream_is_a_partial_input_dead_letter(tmp_path: Path, ext: str):
    """A `.zst` cut after 60 % of its records used to read as a complete, shorter file (0 rejected)."""
    full = _valid_bytes(ext, n=20_000)  # several compressed blocks: the records before the cut are read
    path = tmp_path / f"in.{ext}"
    path.write_bytes(full[:len(full) * 6 // 10])
    documents, rejects = _read_everything(path)
    assert documents < 20_000 and (documents > 0 or ext == "jsonl.bz2")  # bz2's 900 kB blocks: all cut off
    partial = [r for r in rejects if r.partial_input]
    assert len(partial) == 1, [r.reason for r in rejects]
    reject = partial[0]
    assert reject.reason.startswith("unreadable input after ") and "EOFError" in reject.reason
    assert reject.source == str(path) and reject.position == reject.read_bytes and (reject.read_bytes > 0) == (
        documents > 0)
    assert reject.unread_bytes is None  # what was cut off never arrived: its size is unknown
    assert reject.partial_entry() == {"path": str(path), "offset": reject.position, "read_bytes": reject.read_bytes,
                                      "unread_bytes": None, "reason": reject.reason}


@pytest.mark.parametrize("ext", ["jsonl.zst", "jsonl.gz", *(pytest.param(e, marks=pytest.mark.slow)
                                                          for e in ("jsonl.bz2", "jsonl.xz", "txt.gz", "csv.gz"))])
def test_a_large_read_buffer_reads_a_cut_stream_as_the_small_one_did(tmp_path: Path, ext: str,
                                                                      monkeypatch: pytest.MonkeyPatch):
    """Lines are read from a decompressed stream through a buffer of up to 1 MiB (`input_formats.lines`),
    filled one read of the stream at a time, so a stream cut short still gives every line before the cut
    and the same partial-input dead letter as through Python's 8 KiB buffer; and a whole stream all of it."""
    from easydata.io.input_formats import lines

    full = _valid_bytes(ext, n=40_000)
    assert len(full) > 30_000  # a buffer of more than 8 KiB: `line_buffer` follows the (compressed) size
    cut = tmp_path / f"cut.{ext}"
    cut.write_bytes(full[:len(full) * 6 // 10])
    whole = tmp_path / f"whole.{ext}"
    whole.write_bytes(full)

    def facts(path: Path) -> tuple[int, list[tuple]]:
        ds = DatasetConfig(name="d", data_files=str(path))
        rejects: list = []
        documents = sum(len(batch) for split in plan_splits(ds) for batch in read_split(split, ds, rejects=rejects))
        return documents, [(r.reason, r.position, r.read_bytes, r.records) for r in rejects]

    large = facts(cut), facts(whole)
    monkeypatch.setattr(lines, "LINE_BUFFER_BYTES", io.DEFAULT_BUFFER_SIZE)
    assert (facts(cut), facts(whole)) == large
    assert large[1] == (40_000, []) and 0 < large[0][0] < 40_000 and len(large[0][1]) == 1


def test_a_complete_multi_frame_zstd_file_reads_whole(tmp_path: Path):
    import zstandard

    records = [json.dumps({"text": f"doc {i}"}).encode() + b"\n" for i in range(50)]
    frames = b"".join(zstandard.ZstdCompressor().compress(b"".join(records[i:i + 10])) for i in range(0, 50, 10))
    (tmp_path / "in.jsonl.zst").write_bytes(frames)
    assert _read_everything(tmp_path / "in.jsonl.zst") == (50, [])


@pytest.mark.parametrize("ext, body", [
    ("jsonl", b'{"text": "first", "id": 1}\n{"text": "second", "id": 2}\n'),
    ("json", b'[{"text": "first", "id": 1}, {"text": "second", "id": 2}]'),
    ("txt", b"first\nsecond\n"),
    ("csv", b"text,id\nfirst,1\nsecond,2\n"),
])
def test_a_utf8_bom_is_not_part_of_the_first_record(tmp_path: Path, ext: str, body: bytes):
    from easydata.io.sources import read_split

    path = tmp_path / f"in.{ext}"
    path.write_bytes(b"\xef\xbb\xbf" + body)
    ds = DatasetConfig(name="d", data_files=str(path))
    rejects: list = []
    texts = [t for split in plan_splits(ds) for batch in read_split(split, ds, rejects=rejects) for t in batch.texts]
    assert texts == ["first", "second"] and rejects == []


def test_a_deeply_nested_json_line_is_a_dead_letter_not_a_crash(tmp_path: Path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"text": "before"}\n' + b"[" * 100_000 + b"]" * 100_000 + b"\n"
                     + b'{"text": "deep", "x": ' + b"[" * 5000 + b"]" * 5000 + b'}\n{"text": "after"}\n')
    documents, rejects = _read_everything(path)
    assert documents == 2
    assert [r.reason for r in rejects] == ["malformed JSON: nested too deeply"] * 2
    array = tmp_path / "deep.json"
    array.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    documents, rejects = _read_everything(array)
    assert documents == 0 and [r.reason for r in rejects] == ["malformed JSON array: nested too deeply"]


def test_an_overlong_line_is_rejected_without_being_read_whole(tmp_path: Path):
    """With `max_document_bytes` M, a line longer than 6 M (the most a JSON line of an M-byte text can
    need) is rejected unread: a 200 MB line no longer grows a worker past 10 GB."""
    from easydata.io.sources import read_split

    limit = 10_000
    path = tmp_path / "in.jsonl"
    huge = b'{"text": "' + b"x" * (6 * limit + 2**17) + b'"}\n'
    path.write_bytes(b'{"text": "ok"}\n' + huge + b'{"text": "' + b"y" * (2 * limit) + b'"}\n{"text": "end"}\n')
    ds = DatasetConfig(name="d", data_files=str(path))
    rejects: list = []
    texts = [t for split in plan_splits(ds) for batch in read_split(split, ds, max_document_bytes=limit,
                                                                     rejects=rejects) for t in batch.texts]
    assert texts == ["ok", "end"]
    assert [r.position for r in rejects] == [15, 15 + len(huge)]
    assert rejects[0].reason == f"line of {len(huge)} bytes is larger than max_document_bytes={limit} allows (not read)"
    assert rejects[1].reason == f"document is larger than max_document_bytes={limit}"


def test_symlink_loops_and_broken_links_under_a_glob_are_skipped_with_a_warning(tmp_path: Path, capsys):
    """A symlink loop used to end the run in a 41-line traceback."""
    import os

    from easydata.errors import InputError

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.jsonl").write_text('{"text": "kept"}\n')
    os.symlink("self.jsonl", tmp_path / "d" / "self.jsonl")            # a loop
    os.symlink("missing.jsonl", tmp_path / "d" / "broken.jsonl")       # a broken link
    os.symlink(tmp_path / "d" / "a.jsonl", tmp_path / "d" / "b.jsonl")  # a good link: read
    ds = DatasetConfig(name="d", data_files=str(tmp_path / "d" / "*.jsonl"))
    splits = plan_splits(ds)
    assert sorted(Path(s.path).name for s in splits) == ["a.jsonl", "b.jsonl"]
    err = capsys.readouterr().err
    assert err.startswith("easydata: warning: skipping 2 link(s) that lead to no file (a loop or a broken link)")
    assert len(err.splitlines()) == 1
    with pytest.raises(InputError, match="match only links that lead to no file"):
        plan_splits(DatasetConfig(name="d", data_files=str(tmp_path / "d" / "self*.jsonl")))


@pytest.mark.slow
def test_a_glob_matching_the_output_never_reads_the_previous_output_back(tmp_path: Path, tokenizer_dir, capsys):
    """Every `--overwrite` rerun used to read the previous (JSONL) output back as input."""
    from easydata.cli import main
    from tests.conftest import make_texts, write_jsonl

    write_jsonl(tmp_path / "data" / "web.jsonl", ({"text": t} for t in make_texts(40)))
    args = ["tokenize", "--data-files", str(tmp_path / "data" / "**" / "*.jsonl"), "--tokenizer", str(tokenizer_dir),
            "--output", str(tmp_path / "data" / "out"), "--format", "jsonl", "--quiet", "--overwrite",
            "--direct_num_workers=1"]
    counts = []
    for _ in range(3):
        assert main(args) == 0
        counts.append(json.loads((tmp_path / "data" / "out" / "manifest.json").read_text())["documents_in"])
    assert counts == [40, 40, 40]
    err = capsys.readouterr().err
    assert "file(s) inside the output directory" in err and "a run never reads its own output: skipped" in err
