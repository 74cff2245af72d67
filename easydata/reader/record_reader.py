"""The reader's blocks for record-file outputs (`tfrecord`, `arrayrecord`: one `tf.train.Example` per row).

A block is up to `BLOCK_ROWS` consecutive records of one shard. ArrayRecord reads any record by index;
a TFRecord shard is scanned once for its records' byte offsets (a gzipped one is first unpacked to a
temporary file, one shard at a time), after which any block is a seek away. Rows decode to the columns
and types the shard's first record names, as every other format's reader gives them.
"""

from __future__ import annotations

import struct
import tempfile
from typing import Any

import numpy as np
import pyarrow as pa

from easydata.io.filesystems import local_path, open_file
from easydata.io.tf_example import decode_examples, record_types
from easydata.reader.blocks import FORMAT_INDEXES, BlockIndex

__all__ = ["RecordBlockIndex", "BLOCK_ROWS"]

BLOCK_ROWS = 256


class _TFRecordShard:
    def __init__(self, path: str):
        with open_file(path, "rb", decompress=False) as probe:
            gzipped = probe.read(2) == b"\x1f\x8b"
        self._temp = None
        if gzipped:  # unpacked once to a temporary file: a gzip stream cannot seek
            self._temp = tempfile.NamedTemporaryFile(prefix="easydata-tfrecord-", suffix=".tfrecord")
            with open_file(path, "rb", compression="gzip") as f:
                while chunk := f.read(8 << 20):
                    self._temp.write(chunk)
            self._temp.flush()
            path = self._temp.name
        self._file = open_file(path, "rb", decompress=False)
        offsets, at = [], 0
        while True:
            self._file.seek(at)
            header = self._file.read(8)
            if len(header) < 8:
                break
            (length,) = struct.unpack("<Q", header)
            offsets.append(at)
            at += 12 + length + 4
        self.offsets = np.asarray(offsets, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.offsets)

    def read(self, indices: list[int]) -> list[bytes]:
        records = []
        for i in indices:
            self._file.seek(int(self.offsets[i]))
            (length,) = struct.unpack("<Q", self._file.read(8))
            self._file.seek(4, 1)
            records.append(self._file.read(length))
        return records


class _ArrayRecordShard:
    def __init__(self, path: str):
        from easydata.io.record_files import _array_record

        self._reader = _array_record().ArrayRecordReader(local_path(path) or path)
        self._count = int(self._reader.num_records())

    def __len__(self) -> int:
        return self._count

    def read(self, indices: list[int]) -> list[bytes]:
        return list(self._reader.read(indices))


class RecordBlockIndex(BlockIndex):
    """`BlockIndex` over record-file shards (see module docstring)."""

    FORMATS = ("tfrecord", "arrayrecord")

    def _open_shard(self, shard: int) -> Any:
        handle = (_TFRecordShard if self.fmt == "tfrecord" else _ArrayRecordShard)(self.shard_paths[shard])
        first = handle.read([0]) if len(handle) else []
        return handle, (record_types(first[0]) if first else None) or {}

    def _block_rows_of(self, shard: int) -> list[int]:
        total = len(self._open(shard)[0])
        return [min(BLOCK_ROWS, total - start) for start in range(0, total, BLOCK_ROWS)]

    def read(self, block: int, columns: list[str]) -> pa.Table:
        handle, types = self._open(int(self.block_shard[block]))
        start = int(self.block_local[block]) * BLOCK_ROWS
        rows = int(self.block_rows[block])
        batch = decode_examples(handle.read(list(range(start, start + rows))), columns, types)
        return pa.Table.from_batches([batch]).select([c for c in columns if c in batch.schema.names])


FORMAT_INDEXES["tfrecord"] = RecordBlockIndex
FORMAT_INDEXES["arrayrecord"] = RecordBlockIndex
