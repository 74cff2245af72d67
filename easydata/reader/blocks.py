"""The blocks of an output: its shards' row groups (Parquet) or record batches (Arrow), read lazily.

A block is the unit the reader loads: one Parquet row group or one Arrow record batch of one shard.
`BlockIndex.from_output` lists them from each shard's footer (no data is read), and `BlockIndex.read`
loads one block's columns as an Arrow table: local files are memory-mapped, remote ones (`gs://`,
`s3://`, any fsspec URL) are read through fsspec; the `MAX_OPEN_SHARDS` shards used last stay open.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, ClassVar, Optional, Sequence

import numpy as np
import pyarrow as pa

from easydata.io.filesystems import open_arrow_file
from easydata.io.formats import shard_errors
from easydata.run.manifest import Manifest, member_path, read_manifest

__all__ = ["BlockIndex", "COMMIT_WAIT_SECONDS", "FORMAT_INDEXES", "MAX_OPEN_SHARDS"]

COMMIT_WAIT_SECONDS = 300.0  # a reader starting while a run replaces the output waits this long for it
#: Shards a reader keeps open at once (each holds a file descriptor; a mix of readers holds one set each).
MAX_OPEN_SHARDS = 64
#: Output formats whose blocks are not row groups or record batches -> their index class, registered by
#: the module that reads them (`bin`: `easydata.reader.bin_reader.BinBlockIndex`, imported with the package).
FORMAT_INDEXES: dict[str, type] = {}


@dataclasses.dataclass
class BlockIndex:
    """Where every block of one output dataset lives.

    Attributes:
      output_dir: the output directory.
      name: the dataset inside it.
      fmt: `parquet` or `arrow`.
      shard_paths: full paths of the shards, in manifest order.
      block_shard: shard index of each block.
      block_local: block number inside its shard.
      block_rows: rows of each block.
      manifest: the output's manifest.
    """

    output_dir: str
    name: str
    fmt: str
    shard_paths: list[str]
    block_shard: np.ndarray
    block_local: np.ndarray
    block_rows: np.ndarray
    manifest: Manifest
    FORMATS: ClassVar[tuple[str, ...]] = ("parquet", "arrow")
    _files: dict[int, Any] = dataclasses.field(default_factory=dict, repr=False)
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without its open files and lock (Grain's worker processes, `multiprocessing`): a copy
        opens the shards it reads itself; the block listing travels, so no footer is read again."""
        state = {k: v for k, v in self.__dict__.items() if k != "_lock"}
        state["_files"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def num_rows(self) -> int:
        return int(self.block_rows.sum())

    @property
    def num_blocks(self) -> int:
        return len(self.block_rows)

    @classmethod
    def from_output(cls, output_dir: str, name: Optional[str] = None,
                    commit_wait: float = COMMIT_WAIT_SECONDS) -> "BlockIndex":
        """Lists the blocks of dataset `name` (default: the output's only dataset).

        Args:
          commit_wait: seconds to wait for the new manifest while a run is replacing the output.

        Raises:
          ValidationFailed: no manifest (an incomplete or foreign directory, or a commit that did not
            finish within `commit_wait`).
          ValueError: unknown dataset name, or an unsupported output format.
          ShardUnreadable: a shard is empty, truncated or corrupt (its path and pyarrow's first line; also from
            `read`). A missing one is an `InputError` saying so.
        """
        manifest = read_manifest(output_dir, wait_for_commit=commit_wait)
        name, output = manifest.output(name, output_dir)
        fmt = manifest.format
        special = FORMAT_INDEXES.get(fmt)
        if special is not None and cls is BlockIndex:  # e.g. token streams: documents as blocks (bin_reader)
            return special.from_output(output_dir, name, commit_wait)
        if fmt not in cls.FORMATS:
            readable = ", ".join(sorted({*BlockIndex.FORMATS, *FORMAT_INDEXES}))
            raise ValueError(f"the reader reads {readable} outputs; '{output_dir}' is {fmt}"
                             + {"npz": " (np.load it, or write parquet / arrow / bin).",
                                "megatron": " (Megatron-LM's own IndexedDataset reads it; or write bin).",
                                "jsonl": " (read it line by line, or write parquet / arrow)."}.get(fmt, "."))
        index = cls(output_dir=output_dir, name=name, fmt=fmt, shard_paths=[], block_shard=np.zeros(0, np.int64),
                    block_local=np.zeros(0, np.int64), block_rows=np.zeros(0, np.int64), manifest=manifest)
        index.add_shards(output.shards)
        return index

    def add_shards(self, shards: Sequence[Any]) -> None:
        """Indexes `shards` (the manifest's entries: `path`, `rows`) after those already indexed: a growing
        streaming output's new windows are read from their footers alone, not every shard again.

        Raises:
          ValueError: a shard's blocks do not hold the rows its entry says (nothing is added then).
        """
        first = len(self.shard_paths)
        self.shard_paths.extend(member_path(self.output_dir, shard.path, "shard path") for shard in shards)
        shard_of, local, rows = [], [], []
        try:
            for s, shard in enumerate(shards, start=first):
                counts = self._block_rows_of(s)
                if sum(counts) != shard.rows:
                    raise ValueError(f"shard {self.shard_paths[s]} holds {sum(counts)} rows, the manifest says"
                                     f" {shard.rows}.")
                shard_of.extend([s] * len(counts))
                local.extend(range(len(counts)))
                rows.extend(counts)
        except BaseException:
            del self.shard_paths[first:]
            for s in range(first, first + len(shards)):
                self._files.pop(s, None)
            raise
        self.block_shard = np.concatenate([self.block_shard, np.asarray(shard_of, dtype=np.int64)])
        self.block_local = np.concatenate([self.block_local, np.asarray(local, dtype=np.int64)])
        self.block_rows = np.concatenate([self.block_rows, np.asarray(rows, dtype=np.int64)])

    def shard_rows(self) -> np.ndarray:
        """Rows of every shard (int64, in manifest order)."""
        return np.bincount(self.block_shard, weights=self.block_rows, minlength=len(self.shard_paths)).astype(np.int64)

    def _open(self, shard: int) -> Any:
        """Shard `shard`'s open handle (`_open_shard`'s), kept among the `MAX_OPEN_SHARDS` used last.

        An output may hold more shards than a process may open files (1,024 by default on Linux): the
        handle used longest ago is dropped, and its file closes once no read in flight holds it (local
        Arrow blocks already read keep their mapped pages). A dropped shard is opened again when needed.
        """
        with self._lock:
            handle = self._files.pop(shard, None)
            if handle is None:
                with shard_errors(self.shard_paths[shard]):
                    handle = self._open_shard(shard)
            self._files[shard] = handle  # dicts keep insertion order: the last is the one used last
            while len(self._files) > MAX_OPEN_SHARDS:
                del self._files[next(iter(self._files))]
            return handle

    def _open_shard(self, shard: int) -> Any:
        f = open_arrow_file(self.shard_paths[shard])
        if self.fmt == "parquet":
            import pyarrow.parquet as pq

            return pq.ParquetFile(f)
        return pa.ipc.open_file(f)

    def _block_rows_of(self, shard: int) -> list[int]:
        handle = self._open(shard)
        with shard_errors(self.shard_paths[shard]):
            if self.fmt == "parquet":
                meta = handle.metadata
                return [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
            return [handle.get_batch(i).num_rows for i in range(handle.num_record_batches)]

    def read(self, block: int, columns: list[str]) -> pa.Table:
        """One block's columns."""
        shard = int(self.block_shard[block])
        handle, local = self._open(shard), int(self.block_local[block])
        with shard_errors(self.shard_paths[shard]):
            if self.fmt == "parquet":
                return handle.read_row_group(local, columns=columns)
            return pa.Table.from_batches([handle.get_batch(local).select(columns)])
