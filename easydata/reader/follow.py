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

import time
from typing import Any, Iterator, Optional

import numpy as np

from easydata.run.manifest import read_manifest
from easydata.reader._window import RowSpec, Window
from easydata.reader.blocks import BlockIndex
from easydata.reader.layouts import apply_layout, check_layout
from easydata.reader.permutation import derive_key, permute
from easydata.reader.batches import JaxBatches, resolve_processes

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
        process_index, process_count = resolve_processes(process_index, process_count)
        if batch_size <= 0 or batch_size % process_count:
            raise ValueError(f"`batch_size` {batch_size} must be a positive multiple of the {process_count} processes.")
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
        expected = self.state_dict()
        for key in ("version", "seed", "global_batch_size", "dataset"):
            if state.get(key) != expected[key]:
                raise ValueError(f"follow-reader state is for {key}={state.get(key)!r}, this reader has"
                                 f" {expected[key]!r}.")
        self._position = int(state["position"])

    # ---- reading -------------------------------------------------------------------------------

    def _refresh(self) -> None:
        _, output = read_manifest(self.path).output(self.name, self.path)
        if len(output.shards) != len(self.index.shard_paths):
            self.index = BlockIndex.from_output(self.path, self.name)

    def _shard_rows(self, shard: int) -> dict[str, np.ndarray]:
        """All rows of a shard, shuffled by `(seed, shard)`, as `[rows, L]` arrays."""
        window = Window(self.index, np.flatnonzero(self.index.block_shard == shard), self.row_spec)
        num_rows = int(window.starts[-1])
        return window.gather(permute(np.arange(num_rows), num_rows, derive_key(self.seed, shard, 3)))

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        """Local batches `[batch_size // process_count, L]`, following new windows as they commit."""
        shard_starts = lambda: np.concatenate([[0], np.cumsum([int(self.index.block_rows[
            self.index.block_shard == s].sum()) for s in range(len(self.index.shard_paths))])])
        pending: list[dict[str, np.ndarray]] = []
        pending_rows, read_to = 0, None
        idle_since = time.monotonic()
        while True:
            starts = shard_starts()
            if read_to is None:  # skip whole shards before the resume position, then the rest of one
                shard = int(np.searchsorted(starts, self._position, side="right") - 1)
                read_to, skip = shard, self._position - int(starts[min(shard, len(starts) - 1)])
            else:
                skip = 0
            if read_to < len(self.index.shard_paths):
                rows = self._shard_rows(read_to)
                pending.append({c: v[skip:] for c, v in rows.items()})
                pending_rows += len(next(iter(rows.values()))) - skip
                read_to += 1
                idle_since = time.monotonic()
                while pending_rows >= self.batch_size:
                    merged = {c: np.concatenate([p[c] for p in pending]) for c in pending[0]}
                    first = self.process_index * self.local_batch_size
                    batch = {c: v[first:first + self.local_batch_size] for c, v in merged.items()}
                    rest = {c: v[self.batch_size:] for c, v in merged.items()}
                    pending, pending_rows = [rest], pending_rows - self.batch_size
                    self._position += self.batch_size
                    yield apply_layout(self.layout, batch, self.pad_id, self.dtype)
                continue
            if self.timeout is not None and time.monotonic() - idle_since > self.timeout:
                return
            time.sleep(self.poll_seconds)
            self._refresh()
