"""`FollowReader`: batches from a growing (streaming) output, picking up windows as they are committed.

A streaming output's manifest lists its shards in commit order and only ever appends. The follow
reader reads them in that order, each row once (rows of a shard shuffled by `seed`), and when it has
read every committed row it polls `manifest.json` every `poll_seconds` for new windows, until
`timeout` seconds pass without any (None: forever). The global batch `G` is split over processes like
`TokenReader`'s: process `p` of `P` takes rows `[p*G/P, (p+1)*G/P)` of each global batch. Rows that do
not fill a global batch wait for the next window.

The state is the global row position: `state_dict()` / `load_state_dict()` resume exactly, also after
the output grew. Layouts are `TokenReader`'s. Importing this module imports neither Beam nor JAX.
"""

from __future__ import annotations

import collections
import time
from typing import Any, Iterator, Optional

import numpy as np

from easydata.run.manifest import read_manifest
from easydata.reader._window import RowSpec, Window
from easydata.reader.blocks import BlockIndex
from easydata.reader.layouts import apply_layout, check_layout
from easydata.reader.permutation import derive_key, permute
from easydata.reader.batches import JaxBatches, check_state, resolve_processes

__all__ = ["FollowReader"]

STATE_VERSION = 1


class FollowReader(JaxBatches):
    """Follows a growing output (see module docstring).

    Args:
      path: the output directory.
      batch_size: GLOBAL batch size.
      seed: shuffles rows within each shard.
      process_index, process_count: this process and how many read together (default: JAX's, else 0/1).
      layout: `raw`, `maxtext` or `hf`.
      dtype: `int32` (as stored) or `int64` (every array of a batch widened).
      name: dataset inside the output (default: its only dataset).
      seq_length: row length for unpacked outputs (rows are padded / cut to it).
      poll_seconds: how often to look for new windows once every committed row is read.
      timeout: stop after this many seconds without a new window (None: follow forever).
    """

    drop_remainder = True

    def __init__(self, path: str, batch_size: int, seed: int = 0, process_index: Optional[int] = None,
                 process_count: Optional[int] = None, layout: str = "raw", *, name: Optional[str] = None,
                 seq_length: Optional[int] = None, poll_seconds: float = 5.0, timeout: Optional[float] = None,
                 dtype: str = "int32"):
        process_index, process_count = resolve_processes(process_index, process_count, batch_size)
        if not poll_seconds >= 0 or (timeout is not None and not timeout >= 0):
            raise ValueError(f"`poll_seconds` and `timeout` must be non-negative, got {poll_seconds} and {timeout}.")
        check_layout(layout, dtype)
        self.path, self.batch_size, self.seed, self.layout, self.dtype = path, batch_size, seed, layout, str(dtype)
        self.process_index, self.process_count = process_index, process_count
        self.poll_seconds, self.timeout = poll_seconds, timeout
        self.index = BlockIndex.from_output(path, name)
        self.name = self.index.name
        self.row_spec = RowSpec.of_output(self.index, seq_length)
        self.seq_length, self.pad_id = self.row_spec.seq_length, self.row_spec.pad_id
        self.local_batch_size = batch_size // process_count
        self._position = 0  # global rows consumed (whole batches)

    # ---- state ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "position": self._position, "seed": self.seed,
                "global_batch_size": self.batch_size, "dataset": f"{self.path}/{self.name}"}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues from `state`; refuses a state of another output, seed or batch size.

        Raises:
          ValueError: naming what differs, or a position that is not a whole number of global batches.
        """
        check_state(state, self.state_dict(), ("seed", "global_batch_size", "dataset"), "follow-reader",
                    counters=("position",))
        if state["position"] % self.batch_size:
            raise ValueError(f"follow-reader state has position={state['position']}, not a multiple of the global"
                             f" batch {self.batch_size}.")
        self._position = state["position"]

    # ---- reading -------------------------------------------------------------------------------

    def _refresh(self) -> None:
        """Indexes the shards committed since the last look (their footers only)."""
        manifest = read_manifest(self.path)
        _, output = manifest.output(self.name, self.path)
        known = len(self.index.shard_paths)
        if len(output.shards) > known:
            self.index.add_shards(output.shards[known:])
            self.index.manifest = manifest

    def _shard_rows(self, shard: int) -> dict[str, np.ndarray]:
        """All rows of a shard, shuffled by `(seed, shard)`, as `[rows, L]` arrays."""
        first, end = np.searchsorted(self.index.block_shard, [shard, shard + 1])  # a shard's blocks are consecutive
        window = Window(self.index, np.arange(first, end), self.row_spec)
        num_rows = int(window.starts[-1])
        return window.gather(permute(np.arange(num_rows), num_rows, derive_key(self.seed, shard, 3)))

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        """Local batches `[batch_size // process_count, L]`, following new windows as they commit.

        Memory holds the shard being read and the rows of earlier shards that wait for a full global
        batch; each batch copies only this process's rows out of them.
        """
        skip = self._position  # rows before the resume position: whole shards skipped unread
        shard, buffered = 0, 0
        chunks: collections.deque[dict[str, np.ndarray]] = collections.deque()
        first = self.process_index * self.local_batch_size
        idle_since = time.monotonic()
        rows_of = self.index.shard_rows()  # again only when new windows are indexed
        while True:
            if shard < len(self.index.shard_paths):
                if shard >= len(rows_of):
                    rows_of = self.index.shard_rows()
                rows = int(rows_of[shard])
                if skip >= rows:
                    skip -= rows
                else:
                    chunks.append({c: v[skip:] for c, v in self._shard_rows(shard).items()})
                    buffered += rows - skip
                    skip = 0
                shard += 1
                idle_since = time.monotonic()
                while buffered >= self.batch_size:
                    batch = _take(chunks, self.batch_size, first, first + self.local_batch_size)
                    buffered -= self.batch_size
                    self._position += self.batch_size
                    yield apply_layout(self.layout, batch, self.pad_id, self.dtype)
                continue
            if self.timeout is not None and time.monotonic() - idle_since > self.timeout:
                return
            time.sleep(self.poll_seconds)
            self._refresh()


def _take(chunks: "collections.deque[dict[str, np.ndarray]]", count: int, start: int,
          stop: int) -> dict[str, np.ndarray]:
    """Removes the first `count` rows of `chunks` and returns a copy of rows `[start, stop)` of them."""
    parts, at = [], 0
    while at < count:
        chunk = chunks[0]
        rows = len(next(iter(chunk.values())))
        used = min(rows, count - at)
        lo, hi = max(start - at, 0), min(stop - at, used)
        if lo < hi:
            parts.append({c: v[lo:hi] for c, v in chunk.items()})
        if used == rows:
            chunks.popleft()
        else:
            chunks[0] = {c: v[used:] for c, v in chunk.items()}
        at += used
    return {c: np.concatenate([p[c] for p in parts]) for c in parts[0]}
