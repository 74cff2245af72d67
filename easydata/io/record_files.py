"""Record files of serialized `tf.train.Example`s (`easydata.io.tf_example`): TFRecord and ArrayRecord.

* TFRecord (`save.format: tfrecord`, `.tfrecord`): each record framed as TensorFlow writes it, an 8-byte
  little-endian length, its masked CRC-32C, the data and the data's masked CRC-32C; `compression: gzip`
  gzips the whole file (deterministic header), as `tf.data.TFRecordDataset(..., compression_type="GZIP")`
  reads it. Needs no TensorFlow: the CRC comes from `google-crc32c`.
* ArrayRecord (`save.format: arrayrecord`, `.array_record`): Grain's random-access container, written
  with the `array-record` package (extra `arrayrecord`) with one record per chunk group
  (`group_size:1`), so `ArrayRecordDataSource[i]` reads one row; `compression: zstd` (default) or none.

Both are row formats of `easydata.io.formats` (`SHARD_FORMATS`): staged, committed and listed in the
manifest like Parquet, read back by `validate`, `inspect`, `stats` and the reader.
"""

from __future__ import annotations

import struct
from typing import IO, Any, Iterator, Optional

import pyarrow as pa

from easydata.errors import EasyDataError
from easydata.io.filesystems import local_path, open_file
from easydata.io.tf_example import decode_examples, encode_examples, record_types

__all__ = ["TFRecordEncoder", "ArrayRecordEncoder", "tfrecord_batches", "arrayrecord_batches", "read_tfrecords",
           "masked_crc32c"]

_MASK_DELTA = 0xA282EAD8
_READ_BATCH = 1000


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C, rotated right by 15 bits, plus a constant."""
    import google_crc32c

    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


class TFRecordEncoder:
    """Rows into a TFRecord file, one `tf.train.Example` per row (`ShardWriter`'s row encoder)."""

    def __init__(self, path: str, schema: pa.Schema, codec: Optional[str]):
        self._raw: Optional[IO] = None
        if codec == "gzip":
            import gzip

            self._raw = open_file(path, "wb")
            self._file: IO = gzip.GzipFile(filename="", mode="wb", fileobj=self._raw, mtime=0)
        elif codec in (None, "none"):
            self._file = open_file(path, "wb")
        else:
            raise EasyDataError(f"format tfrecord supports compression none or gzip, not {codec!r}")
        self._first = True

    def emit(self, table: pa.Table) -> None:
        parts = []
        records, self._first = encode_examples(table, with_types=self._first), False
        for record in records:
            length = struct.pack("<Q", len(record))
            parts += [length, struct.pack("<I", masked_crc32c(length)), record, struct.pack("<I", masked_crc32c(record))]
        self._file.write(b"".join(parts))

    def close(self) -> None:
        self._file.close()
        if self._raw is not None:
            self._raw.close()


def read_tfrecords(path: str) -> Iterator[bytes]:
    """The records of a TFRecord file (gzipped when its name ends in `.gz` or its bytes say so), each
    checked against its CRC.

    Raises:
      ValueError: a cut or corrupt record.
    """
    with open_file(path, "rb", decompress=False) as probe:
        gzipped = probe.read(2) == b"\x1f\x8b"
    with open_file(path, "rb", compression="gzip" if gzipped else None, decompress=gzipped) as f:
        while True:
            header = f.read(12)
            if not header:
                return
            if len(header) < 12:
                raise ValueError("TFRecord file ends inside a record's header")
            (length,), (crc,) = struct.unpack("<Q", header[:8]), struct.unpack("<I", header[8:])
            if masked_crc32c(header[:8]) != crc:
                raise ValueError("a TFRecord length's checksum does not match (corrupt file)")
            data = f.read(length)
            footer = f.read(4)
            if len(data) < length or len(footer) < 4:
                raise ValueError("TFRecord file ends inside a record")
            if masked_crc32c(data) != struct.unpack("<I", footer)[0]:
                raise ValueError("a TFRecord record's checksum does not match (corrupt file)")
            yield data


def _batches(records: Iterator[bytes], columns: Optional[list[str]]) -> Iterator[pa.RecordBatch]:
    """Record batches of `_READ_BATCH` rows, typed as the file's first record says."""
    chunk: list[bytes] = []
    types: Optional[dict[str, str]] = None
    for record in records:
        if types is None:
            types = record_types(record) or {}
        chunk.append(record)
        if len(chunk) >= _READ_BATCH:
            yield decode_examples(chunk, columns, types)
            chunk = []
    if chunk:
        yield decode_examples(chunk, columns, types)


def tfrecord_batches(path: str, columns: Optional[list[str]]) -> Iterator[pa.RecordBatch]:
    yield from _batches(read_tfrecords(path), columns)


def _array_record() -> Any:
    try:
        from array_record.python import array_record_module
    except ImportError:
        raise EasyDataError("format arrayrecord needs the array-record package: pip install"
                            " 'easydata-beam[arrayrecord]'") from None
    return array_record_module


class ArrayRecordEncoder:
    """Rows into an ArrayRecord file, one `tf.train.Example` per row, one record per group (random access)."""

    def __init__(self, path: str, schema: pa.Schema, codec: Optional[str]):
        local = local_path(path)
        if local is None:
            raise EasyDataError("format arrayrecord writes local files only (array-record has no fsspec support):"
                                " write to a local or mounted (gcsfuse) output directory")
        if codec not in (None, "none", "zstd"):
            raise EasyDataError(f"format arrayrecord supports compression none or zstd, not {codec!r}")
        options = "group_size:1," + ("uncompressed" if codec in (None, "none") else "zstd:3")
        import os

        os.makedirs(os.path.dirname(os.path.abspath(local)), exist_ok=True)
        self._writer = _array_record().ArrayRecordWriter(local, options)
        self._first = True

    def emit(self, table: pa.Table) -> None:
        records, self._first = encode_examples(table, with_types=self._first), False
        for record in records:
            self._writer.write(record)

    def close(self) -> None:
        self._writer.close()


def arrayrecord_batches(path: str, columns: Optional[list[str]]) -> Iterator[pa.RecordBatch]:
    local = local_path(path)
    if local is None:
        raise EasyDataError("format arrayrecord reads local files only (array-record has no fsspec support)")
    reader = _array_record().ArrayRecordReader(local)
    try:
        total = reader.num_records()
        records = (r for start in range(0, total, _READ_BATCH)
                   for r in reader.read(list(range(start, min(start + _READ_BATCH, total)))))
        yield from _batches(records, columns)
    finally:
        reader.close()


