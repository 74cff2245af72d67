"""A text input in UTF-16 or UTF-32 (what Windows tools save as "Unicode") is one dead letter saying so.

Before, its lines were read as UTF-8: each a dead letter for malformed JSON, invalid UTF-8 or a broken CSV
header, and a `txt` file's lines documents of garbled text (NUL bytes between the letters), without a word of
the encoding.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from easydata.config import DatasetConfig
from easydata.io.sources import plan_input, read_splits

_LINES = [{"text": f"document {i} héllo"} for i in range(5)]


def _content(kind: str) -> str:
    if kind == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in _LINES)
    if kind == "json":
        return json.dumps(_LINES, ensure_ascii=False)
    if kind == "csv":
        return "text,id\n" + "".join(f"{r['text']},{i}\n" for i, r in enumerate(_LINES))
    return "".join(r["text"] + "\n" for r in _LINES)


@pytest.mark.parametrize("kind, sample_by", [("jsonl", "line"), ("json", "line"), ("csv", "line"), ("txt", "line"),
                                             ("txt", "document")])
@pytest.mark.parametrize("encoding, name, order", [("utf-16", "UTF-16", "little-endian"),
                                                   ("utf-32", "UTF-32", "little-endian"),
                                                   ("utf-16-be", "UTF-16", "big-endian")])
def test_a_utf16_or_utf32_input_is_one_dead_letter_naming_its_encoding(tmp_path: Path, kind, sample_by, encoding,
                                                                         name, order):
    data = _content(kind).encode(encoding)
    if encoding == "utf-16-be":
        data = b"\xfe\xff" + data  # Python's -be codec writes no mark; the tools that write one put it first
    path = tmp_path / f"data.{kind}"
    path.write_bytes(data)
    ds = DatasetConfig(name="d", data_files=str(path), sample_by=sample_by)
    rejects: list = []
    batches = list(read_splits(plan_input(ds).splits, ds, rejects=rejects))
    assert sum(len(b) for b in batches) == 0
    assert len(rejects) == 1 and rejects[0].reason.endswith(
        f"ValueError: {name} text ({order} byte-order mark), not UTF-8: convert it (iconv -f {name} -t UTF-8)")


@pytest.mark.parametrize("kind, sample_by", [("jsonl", "line"), ("json", "line"), ("csv", "line"), ("txt", "line"),
                                             ("txt", "document")])
@pytest.mark.parametrize("codec, name, order", [("utf-16-le", "UTF-16", "little-endian"),
                                                ("utf-16-be", "UTF-16", "big-endian"),
                                                ("utf-32-le", "UTF-32", "little-endian"),
                                                ("utf-32-be", "UTF-32", "big-endian")])
def test_a_utf16_or_utf32_input_without_a_byte_order_mark_is_named_too(tmp_path: Path, kind, sample_by, codec, name,
                                                                       order):
    """Without a mark (Python's `-le`/`-be` codecs, many exporters) each line was a dead letter for malformed
    JSON, or a `txt` document of letters and NULs; the NULs beside the first ASCII character say the encoding."""
    path = tmp_path / f"data.{kind}"
    path.write_bytes(_content(kind).encode(codec))
    ds = DatasetConfig(name="d", data_files=str(path), sample_by=sample_by)
    rejects: list = []
    batches = list(read_splits(plan_input(ds).splits, ds, rejects=rejects))
    assert sum(len(b) for b in batches) == 0
    assert len(rejects) == 1 and rejects[0].reason.endswith(
        f"ValueError: {name} text ({order}, no byte-order mark), not UTF-8: convert it"
        f" (iconv -f {codec.replace('-le', 'LE').replace('-be', 'BE').upper()} -t UTF-8)")


@pytest.mark.parametrize("head", [b"\x00\x00\x00\x00\x00\x00", b"\xc3\xa9\x00\x00 text", b'{"a": 1}\n'])
def test_nul_patterns_of_no_other_encoding_are_not_refused(head):
    """All-zero bytes, a UTF-8 letter before NULs and plain JSON are not taken for UTF-16 or UTF-32."""
    from easydata.io.documents import refuse_foreign_bytes

    refuse_foreign_bytes(head)


def test_a_utf8_input_with_its_byte_order_mark_is_read_as_before(tmp_path: Path):
    path = tmp_path / "data.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + _content("jsonl").encode())
    ds = DatasetConfig(name="d", data_files=str(path))
    rejects: list = []
    batches = list(read_splits(plan_input(ds).splits, ds, rejects=rejects))
    assert rejects == [] and [t for b in batches for t in b.texts] == [r["text"] for r in _LINES]


@pytest.mark.parametrize("kind", ["jsonl", "txt"])
@pytest.mark.parametrize("codec, said", [("utf-16", "UTF-16 text (little-endian byte-order mark), not UTF-8"),
                                         ("utf-16-le", "UTF-16 text (little-endian, no byte-order mark), not UTF-8")])
def test_every_split_of_a_large_utf16_file_says_so(tmp_path: Path, kind, codec, said):
    """A file cut into splits: each one's dead letter names the encoding (the first split's alone did, and a
    text file's later splits became documents of garbled text)."""
    path = tmp_path / f"data.{kind}"
    path.write_bytes((_content(kind) * 400).encode(codec))
    ds = DatasetConfig(name="d", data_files=str(path))
    splits = plan_input(ds, target_bytes=8 * 1024).splits
    assert len(splits) > 3
    rejects: list = []
    batches = list(read_splits(splits, ds, rejects=rejects))
    assert sum(len(b) for b in batches) == 0 and len(rejects) == len(splits)
    assert all(said in r.reason for r in rejects)


# ---- files that are not their data: Git LFS pointers, compressed data under a plain name (hostile round 9) --------

_POINTER = (b"version https://git-lfs.github.com/spec/v1\n"
            b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 1234567\n")
_LFS_REASON = ("a Git LFS pointer, not the file's data: fetch it (git lfs pull in the clone, or download the file with"
               " huggingface_hub)")


@pytest.mark.parametrize("name, sample_by", [("train-00000-of-00002.parquet", "line"), ("data.arrow", "line"),
                                             ("data.jsonl", "line"), ("data.json", "line"), ("data.csv", "line"),
                                             ("data.txt", "line"), ("data.txt", "paragraph"),
                                             ("data.jsonl.gz", "line"), ("data.jsonl.zst", "line")])
def test_a_git_lfs_pointer_in_place_of_a_data_file_is_one_dead_letter_saying_so(tmp_path: Path, name, sample_by):
    """A Hub dataset cloned without git-lfs (or pulled in part) holds ~130-byte pointers where its files were: a
    `txt` pointer was trained as three documents ("version https://git-lfs...", "oid sha256:..."), a JSON lines
    one was dead letters for malformed JSON, a Parquet one "magic bytes not found in footer"."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / name).write_bytes(_POINTER)
    pq.write_table(pa.table({"text": ["a real document"]}), tmp_path / "train-00001-of-00002.parquet")
    ds = DatasetConfig(name="d", data_files=[str(tmp_path / name), str(tmp_path / "train-00001-of-00002.parquet")],
                       sample_by=sample_by)
    rejects: list = []
    texts = [t for b in read_splits(plan_input(ds).splits, ds, rejects=rejects) for t in b.texts]
    assert texts == ["a real document"]
    assert len(rejects) == 1 and rejects[0].reason.endswith(_LFS_REASON) and rejects[0].source.endswith(name)


@pytest.mark.parametrize("kind", ["jsonl", "json", "csv", "txt"])
@pytest.mark.parametrize("codec, suffix", [("gzip", ".gz"), ("zstd", ".zst"), ("xz", ".xz"), ("bz2", ".bz2")])
def test_compressed_data_under_a_plain_name_is_one_dead_letter_naming_the_codec(tmp_path: Path, kind, codec, suffix):
    """A download saved without its `.gz` was a dead letter for "invalid UTF-8 at byte 1" per line (or documents
    of binary bytes where they happened to decode)."""
    import bz2
    import gzip
    import lzma

    import zstandard

    compress = {"gzip": gzip.compress, "zstd": zstandard.ZstdCompressor().compress, "xz": lzma.compress,
                "bz2": bz2.compress}[codec]
    path = tmp_path / f"data.{kind}"
    path.write_bytes(compress(_content(kind).encode()))
    ds = DatasetConfig(name="d", data_files=str(path))
    rejects: list = []
    assert [t for b in read_splits(plan_input(ds).splits, ds, rejects=rejects) for t in b.texts] == []
    assert len(rejects) == 1 and rejects[0].reason.endswith(
        f"{codec}-compressed data in a file whose name says no compression: add {suffix} to its name (or decompress it)")
    path.rename(tmp_path / f"data.{kind}{suffix}")  # named as it is: read
    ds = DatasetConfig(name="d", data_files=str(tmp_path / f"data.{kind}{suffix}"))
    assert len([t for b in read_splits(plan_input(ds).splits, ds, rejects=rejects) for t in b.texts]) == len(_LINES)


@pytest.mark.parametrize("head", [b"BZh9 is a model number\n", b"BZh91AY", b"version https://example.com/spec\n",
                                  b"(\xb5/ text"])
def test_text_that_only_resembles_a_pointer_or_a_codec_is_not_refused(head):
    from easydata.io.documents import refuse_foreign_bytes

    refuse_foreign_bytes(head)
