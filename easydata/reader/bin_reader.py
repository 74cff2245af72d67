"""Reading `bin` outputs (flat token streams + document index, `easydata.io.token_files`).

Two ways, both deterministic and exactly resumable:

* **Document-aligned rows** through `TokenReader(path, batch_size, seq_length=L)`: `BinBlockIndex`
  presents each shard's documents as blocks of `save.row_group_size` documents, so the reader's
  shuffle, process split, layouts and resume work unchanged; each row is one document (or window)
  padded or cut to `L`.
* **Random windows** (nanoGPT's `get_batch`) through `WindowReader` (also `TokenReader.random_windows`):
  every row is `L + 1` consecutive tokens starting at a uniformly random position of the stream
  (across document boundaries, never across shards), split into inputs `[:L]` and targets `[1:]`.
  The starts of global batch `s` are a pure function of `(seed, s)`; process `p` of `P` takes its
  contiguous `batch_size / P` of them, so the state is just the step.

Local shards are memory-mapped (`np.memmap`: nothing is read until a window needs it); remote ones
(`gs://`, `s3://`) are read by byte range through fsspec. Importing this module imports neither
Apache Beam nor JAX.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Iterator, Optional

import numpy as np
import pyarrow as pa

from easydata.io.filesystems import local_path, get_fs
from easydata.io.token_arrays import token_list_array
from easydata.reader.blocks import FORMAT_INDEXES, BlockIndex
from easydata.reader.layouts import check_layout
from easydata.reader.batches import JaxBatches, check_state, is_count, resolve_processes
from easydata.io.token_files import bin_token_dtype, companion_path, read_bin_index

__all__ = ["BinShard", "BinBlockIndex", "WindowReader", "WINDOW_LAYOUTS"]

STATE_VERSION = 1
WINDOW_LAYOUTS = ("raw", "maxtext", "hf")


class _RemoteArray:
    """A 1-D array in a remote file, read by byte range on slicing."""

    def __init__(self, path: str, dtype: np.dtype, size: int):
        self.fs, self.inner = get_fs(path)
        self.dtype, self.size = dtype, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: slice) -> np.ndarray:
        start, stop, _ = index.indices(self.size)
        if stop <= start:
            return np.zeros(0, dtype=self.dtype)
        size = self.dtype.itemsize
        # start and end by name: s3fs's `cat_file` takes a `version_id` second (positional, a range read the
        # whole object from the window's end, or failed as an invalid VersionId)
        return np.frombuffer(self.fs.cat_file(self.inner, start=start * size, end=stop * size), dtype=self.dtype)


def _array(path: str, dtype: np.dtype, size: int) -> Any:
    if size == 0:
        return np.zeros(0, dtype=dtype)
    local = local_path(path)
    return np.memmap(local, dtype=dtype, mode="r", shape=(size,)) if local is not None else \
        _RemoteArray(path, dtype, size)


class BinShard:
    """One `.bin` shard: its token stream, document offsets and (chat data) loss mask.

    Attributes:
      path: the `.bin` file.
      offsets: int64 document boundaries (`documents + 1`).
      tokens: the token stream (`np.memmap` locally), uint16 or uint32.
      loss_mask: the uint8 mask stream, or None.
    """

    def __init__(self, path: str, offsets: Optional[np.ndarray] = None):
        self.path = path
        self.offsets = read_bin_index(path) if offsets is None else offsets
        size = int(self.offsets[-1]) if len(self.offsets) else 0
        self.tokens = _array(path, bin_token_dtype(path, size), size)
        mask_path = companion_path(path, "loss_mask")
        fs, inner = get_fs(mask_path)
        self.loss_mask = _array(mask_path, np.dtype(np.uint8), size) if fs.exists(inner) else None

    @property
    def num_documents(self) -> int:
        return len(self.offsets) - 1

    @property
    def num_tokens(self) -> int:
        return int(self.offsets[-1])

    def documents(self, first: int, last: int, columns: list[str]) -> pa.Table:
        """Documents `[first, last)` as `list<int32>` columns (`input_ids`, `loss_mask` if asked)."""
        offsets = self.offsets[first:last + 1]
        local = offsets - offsets[0]
        span = slice(int(offsets[0]), int(offsets[-1]))
        arrays = {"input_ids": self.tokens}
        if self.loss_mask is not None:
            arrays["loss_mask"] = self.loss_mask
        return pa.table({name: token_list_array(np.asarray(arrays[name][span]), local)
                         for name in columns if name in arrays})


@dataclasses.dataclass
class BinBlockIndex(BlockIndex):
    """`BlockIndex` over `bin` shards: block `b` of a shard is its documents
    `[b * R, (b + 1) * R)`, `R` = the output's `save.row_group_size` (default 1000)."""

    FORMATS: ClassVar[tuple[str, ...]] = ("bin",)
    _offsets: dict[int, np.ndarray] = dataclasses.field(default_factory=dict, repr=False)

    def shard(self, shard: int) -> BinShard:
        """Shard `shard` (open among the `MAX_OPEN_SHARDS` used last)."""
        return self._open(shard)

    def _open_shard(self, shard: int) -> BinShard:
        """The shard's streams mapped again; its document offsets read once (reopening a dropped shard costs
        a mapping, not its whole `.idx`)."""
        opened = BinShard(self.shard_paths[shard], self._offsets.get(shard))
        self._offsets[shard] = opened.offsets
        return opened

    @property
    def _block_documents(self) -> int:
        return int(((self.manifest.get("config") or {}).get("save") or {}).get("row_group_size") or 1000)

    def _block_rows_of(self, shard: int) -> list[int]:
        documents, per_block = self._open(shard).num_documents, self._block_documents
        return [min(per_block, documents - first) for first in range(0, documents, per_block)]

    def read(self, block: int, columns: list[str]) -> pa.Table:
        first = int(self.block_local[block]) * self._block_documents
        return self._open(int(self.block_shard[block])).documents(first, first + int(self.block_rows[block]), columns)


FORMAT_INDEXES["bin"] = BinBlockIndex


class WindowReader(JaxBatches):
    """Random windows of `seq_length + 1` tokens from a `bin` output, nanoGPT style.

    Args:
      path: output directory.
      batch_size: GLOBAL batch size.
      seq_length: `L`: inputs and targets are `[batch, L]`.
      seed: window positions are a pure function of `(seed, step)`.
      name: dataset inside the output (default: its only dataset), e.g. `data/train`.
      num_steps: batches to yield (None: forever).
      process_index, process_count: this process and how many read together (default: JAX's, else 0/1).
      layout: `raw` (`input_ids`, `targets`), `maxtext` (`inputs`, `targets` and their
        `*_segmentation` (ones) / `*_position`) or `hf` (`input_ids`, `attention_mask`, `position_ids`,
        `labels` = `input_ids`, which Hugging Face models shift themselves).
      dtype: `int32` (as stored) or `int64` (every array of a batch widened, e.g. PyTorch labels).

    Raises:
      ValueError: no shard holds `seq_length + 1` tokens, or an invalid argument.
    """

    drop_remainder = True

    def __init__(self, path: str, batch_size: int, seq_length: int, *, seed: int = 0, name: Optional[str] = None,
                 num_steps: Optional[int] = None, process_index: Optional[int] = None,
                 process_count: Optional[int] = None, layout: str = "raw", dtype: str = "int32"):
        process_index, process_count = resolve_processes(process_index, process_count, batch_size)
        if not is_count(seq_length, least=1):
            raise ValueError(f"`seq_length` must be a positive integer, got {seq_length!r}.")
        if num_steps is not None and not is_count(num_steps, least=1):
            raise ValueError(f"`num_steps` must be a positive integer or None (forever), got {num_steps!r}.")
        check_layout(layout, dtype)
        self.dtype = str(dtype)
        index = BinBlockIndex.from_output(path, name)
        self.manifest, self.name = index.manifest, index.name
        self.index = index  # shards are opened through it (at most `MAX_OPEN_SHARDS` at once)
        self.path, self.batch_size, self.seq_length, self.seed = path, batch_size, seq_length, seed
        self.num_steps, self.layout = num_steps, layout
        self.process_index, self.process_count = process_index, process_count
        self.local_batch_size = batch_size // process_count
        starts = np.array([max(index.shard(s).num_tokens - seq_length, 0) for s in range(len(index.shard_paths))],
                          dtype=np.int64)
        self._cumulative = np.concatenate([[0], np.cumsum(starts)])
        if self._cumulative[-1] == 0:
            raise ValueError(f"'{path}' ({self.name}): no shard holds seq_length + 1 = {seq_length + 1} tokens.")
        self._step = 0
        self._fingerprint = f"{self.manifest.get('config_fingerprint')}/{self.name}/{self.manifest.get('created_at')}"

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable position of the next batch."""
        return {"version": STATE_VERSION, "step": self._step, "seed": self.seed, "global_batch_size": self.batch_size,
                "seq_length": self.seq_length, "dataset": self._fingerprint}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues from `state`.

        Raises:
          ValueError: naming what differs from this reader.
        """
        check_state(state, self.state_dict(), ("dataset", "global_batch_size", "seed", "seq_length"), "window reader",
                    counters=("step",))
        self._step = int(state["step"])

    def starts(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """`(shard, first token)` of every window of global batch `step`."""
        rng = np.random.default_rng([self.seed, step])
        flat = rng.integers(0, int(self._cumulative[-1]), size=self.batch_size, dtype=np.int64)
        shard = np.searchsorted(self._cumulative, flat, side="right") - 1
        return shard, flat - self._cumulative[shard]

    def get_batch(self, step: int) -> dict[str, np.ndarray]:
        """This process's part of global batch `step` (does not move the reader's position)."""
        batch = self._windows(step)
        return batch if self.dtype == "int32" else {key: array.astype(self.dtype) for key, array in batch.items()}

    def _windows(self, step: int) -> dict[str, np.ndarray]:
        """`get_batch` in the stored int32, in the reader's layout."""
        shard, start = self.starts(step)
        mine = slice(self.process_index * self.local_batch_size, (self.process_index + 1) * self.local_batch_size)
        length = self.seq_length
        windows = np.empty((self.local_batch_size, length + 1), dtype=np.int32)
        for row, (s, first) in enumerate(zip(shard[mine].tolist(), start[mine].tolist())):
            windows[row] = self.index.shard(s).tokens[first:first + length + 1]
        inputs, targets = windows[:, :-1], windows[:, 1:]
        if self.layout == "raw":
            return {"input_ids": inputs, "targets": targets}
        ones = np.ones_like(inputs)
        positions = np.broadcast_to(np.arange(length, dtype=np.int32), inputs.shape).copy()
        if self.layout == "maxtext":
            return {"inputs": inputs, "targets": targets, "inputs_segmentation": ones, "targets_segmentation": ones,
                    "inputs_position": positions, "targets_position": positions}
        return {"input_ids": inputs, "attention_mask": ones, "position_ids": positions, "labels": inputs.copy()}

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        while self.num_steps is None or self._step < self.num_steps:
            batch = self.get_batch(self._step)
            self._step += 1
            yield batch
