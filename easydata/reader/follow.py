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
import pyarrow as pa

from easydata.manifest import read_manifest
from easydata.pack_stage import PACKED_COLUMNS
from easydata.reader.blocks import BlockIndex
from easydata.reader.layouts import LAYOUTS, apply_layout
from easydata.reader.permutation import derive_key, permute
from easydata.reader.token_reader import JaxBatches, _default_process

__all__ = ["FollowReader"]

STATE_VERSION = 1


def _dense(column: pa.ChunkedArray, length: int, pad: int) -> np.ndarray:
    """A list column as `[rows, length]` int32, padded or cut."""
    array = column.combine_chunks()
    values = array.flatten().to_numpy(zero_copy_only=False)
    offsets = np.arange(len(array) + 1) * array.type.list_size if pa.types.is_fixed_size_list(array.type) \
        else array.offsets.to_numpy() - array.offsets[0].as_py()
    sizes = np.minimum(np.diff(offsets), length)
    out = np.full((len(array), length), pad, dtype=np.int32)
    rows = np.repeat(np.arange(len(array)), sizes)
    rank = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    out[rows, rank] = values[np.repeat(offsets[:-1], sizes) + rank]
    return out


class FollowReader(JaxBatches):
    """Follows a growing output (see module docstring).

    Args:
      path: the output directory.
      batch_size: GLOBAL batch size.
      seed: shuffles rows within each shard.
      process_index, process_count: this process and how many read together (default: JAX's, else 0/1).
      layout: `raw`, `maxtext` or `hf`.
      name: dataset inside the output (default: its only dataset).
      seq_length: row length for unpacked outputs (rows are padded / cut to it).
      poll_seconds: how often to look for new windows once every committed row is read.
      timeout: stop after this many seconds without a new window (None: follow forever).
    """

    drop_remainder = True

    def __init__(self, path: str, batch_size: int, seed: int = 0, process_index: Optional[int] = None,
                 process_count: Optional[int] = None, layout: str = "raw", *, name: Optional[str] = None,
                 seq_length: Optional[int] = None, poll_seconds: float = 5.0, timeout: Optional[float] = None):
        if process_index is None or process_count is None:
            default_index, default_count = _default_process()
            process_index = default_index if process_index is None else process_index
            process_count = default_count if process_count is None else process_count
        if batch_size <= 0 or batch_size % process_count:
            raise ValueError(f"`batch_size` {batch_size} must be a positive multiple of the {process_count} processes.")
        if layout not in LAYOUTS:
            raise ValueError(f"`layout` must be one of {', '.join(LAYOUTS)}, got {layout!r}.")
        self.path, self.batch_size, self.seed, self.layout = path, batch_size, seed, layout
        self.process_index, self.process_count = process_index, process_count
        self.poll_seconds, self.timeout = poll_seconds, timeout
        self.index = BlockIndex.from_output(path, name)
        self.name = self.index.name
        schema = self.index.manifest.get("schema") or {}
        self.packed = bool(schema.get("packed"))
        self.seq_length = int(schema["seq_length"]) if self.packed else seq_length
        if not self.seq_length or self.seq_length <= 0:
            raise ValueError(f"'{path}' holds unpacked rows of varying length: pass seq_length= to pad or cut them.")
        own = (self.index.manifest.get("datasets") or {}).get(self.name, {}).get("columns")
        self.columns = [c for c in PACKED_COLUMNS if c in (own or schema.get("columns") or {})] or ["input_ids"]
        tok = self.index.manifest.get("tokenizer") or {}
        self.pad_id = next((int(v) for v in (tok.get("pad_token_id_used"), tok.get("pad_token_id"),
                                             tok.get("eos_token_id")) if v is not None), 0)
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
        manifest = read_manifest(self.path)
        if len(manifest["datasets"][self.name]["shards"]) != len(self.index.shard_paths):
            self.index = BlockIndex.from_output(self.path, self.name)

    def _shard_rows(self, shard: int) -> dict[str, np.ndarray]:
        """All rows of a shard, shuffled by `(seed, shard)`, as `[rows, L]` arrays."""
        blocks = np.flatnonzero(self.index.block_shard == shard)
        table = pa.concat_tables([self.index.read(int(b), self.columns) for b in blocks])
        rows = {c: _dense(table.column(c), self.seq_length, self.pad_id if c == "input_ids" else 0)
                for c in self.columns}
        if not self.packed:  # one segment per row
            lengths = np.minimum(np.diff(table.column("input_ids").combine_chunks().offsets.to_numpy()),
                                 self.seq_length)
            real = np.arange(self.seq_length)[None, :] < lengths[:, None]
            rows["segment_ids"] = real.astype(np.int32)
            rows["positions"] = np.where(real, np.arange(self.seq_length)[None, :], 0).astype(np.int32)
        order = permute(np.arange(table.num_rows), table.num_rows, derive_key(self.seed, shard, 3))
        return {c: v[order] for c, v in rows.items()}

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
                    yield apply_layout(self.layout, batch, self.pad_id)
                continue
            if self.timeout is not None and time.monotonic() - idle_since > self.timeout:
                return
            time.sleep(self.poll_seconds)
            self._refresh()
