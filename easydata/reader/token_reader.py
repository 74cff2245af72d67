"""`TokenReader`: batches of fixed-length rows from an easydata output, sharded over processes,
deterministically shuffled, exactly resumable, read ahead on a background thread, as numpy or JAX.

Row `i` of epoch `e` is a pure function of `(seed, e, i)` (`easydata.reader.order`), process `p` of
`P` reads the positions `[s*G + p*G/P, s*G + (p+1)*G/P)` of global batch `s`, so all processes
together read every row once per epoch and never the same row twice. The whole iterator state is
`{"version", "epoch", "step", ...}`: resuming from `state_dict()` continues with exactly the batches
an uninterrupted run would have produced, whatever the read-ahead depth.

Packed outputs give rows of their `seq_length`; unpacked outputs need `seq_length=` and are padded or
cut to it (`segment_ids` 1 on tokens, 0 on padding, so every layout works the same way).
Cost: each block's token columns become numpy arrays once (zero-copy from memory-mapped Arrow IPC and
from decoded Parquet row groups) and each batch is copied out of them with numpy
(`easydata.reader._window`); the arrays of a raw packed batch are views of one allocation.
Importing this module imports neither Apache Beam nor JAX; JAX is imported by `as_jax` / `as_pmap`.
`EpochRows` (raw rows at any positions of any epoch) and `JaxBatches` (`as_jax` / `as_pmap`) are
shared with `easydata.reader.mixed_reader.MixedReader`.
"""

from __future__ import annotations

import sys
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterator, Optional

import numpy as np

from easydata.reader._window import RowSpec, Window
from easydata.reader.batches import JaxBatches, check_prefetch, check_state, is_count, resolve_processes
from easydata.reader.blocks import COMMIT_WAIT_SECONDS, BlockIndex
from easydata.reader.layouts import apply_layout, check_layout
from easydata.reader.order import EpochOrder, process_positions, steps_per_epoch

__all__ = ["TokenReader", "EpochRows", "JaxBatches"]

STATE_VERSION = 1


class TokenReader(JaxBatches):
    """Iterates batches of an easydata output.

    Args:
      path: output directory (local, `gs://`, `s3://`, any fsspec URL).
      batch_size: GLOBAL batch size (rows per step over all processes).
      shuffle: shuffle rows (deterministic in `seed` and epoch).
      seed: shuffle seed.
      num_epochs: epochs to read (None: forever).
      drop_remainder: drop the last incomplete global batch of each epoch.
      process_index, process_count: this process and how many read together (default: JAX's, else 0/1).
      layout: `raw`, `maxtext`, `maxtext-stock` (MaxText's own boundary convention) or `hf` (see
        `easydata.reader.layouts`).
      dtype: `int32` (as stored) or `int64` (every array of a batch widened, e.g. PyTorch labels).
      pad_id: the id at padding positions of the batches (default: the output's own, the manifest's
        `pad_token_id_used`); MaxText pads with 0. Padding is `segment_ids == 0` either way.
      name: dataset inside the output (default: its only dataset).
      seq_length: row length for unpacked outputs (rows are padded / cut to it).
      prefetch: shuffle windows read ahead on a background thread (0: none, a window loads when a
        batch first needs it). Loading (file reads, Parquet decoding, mapping Arrow pages) is the
        slow part and runs there; each batch is copied out of the loaded windows on the calling
        thread with numpy (about 0.5 ms per 64 x 2048 batch), which costs less than handing finished
        batches between threads would.
      window_blocks: blocks (row groups) per shuffle window; memory holds about `2 + prefetch`
        windows (decoded for Parquet, page cache for local Arrow).
      commit_wait: when a run is replacing the output at construction (its old manifest already
        removed), seconds to wait for the new one before raising.
    """

    def __init__(self, path: str, batch_size: int, shuffle: bool = True, seed: int = 0,
                 num_epochs: Optional[int] = None, drop_remainder: bool = True, process_index: Optional[int] = None,
                 process_count: Optional[int] = None, layout: str = "raw", *, name: Optional[str] = None,
                 seq_length: Optional[int] = None, prefetch: int = 1, window_blocks: int = 4,
                 commit_wait: float = COMMIT_WAIT_SECONDS, dtype: str = "int32", pad_id: Optional[int] = None):
        process_index, process_count = resolve_processes(process_index, process_count, batch_size)
        if num_epochs is not None and not is_count(num_epochs, least=1):
            raise ValueError(f"`num_epochs` must be a positive integer or None (forever), got {num_epochs!r}.")
        check_prefetch(prefetch)
        check_layout(layout, dtype)
        self.dtype = str(dtype)
        self.index = BlockIndex.from_output(path, name, commit_wait)
        self.row_spec = RowSpec.of_output(self.index, seq_length)
        self.packed, self.seq_length = self.row_spec.packed, self.row_spec.seq_length
        self.columns, self.pad_id = list(self.row_spec.columns), self.row_spec.pad_id
        self.pad_override = pad_id is not None and pad_id != self.pad_id
        if pad_id is not None:
            self.pad_id = int(pad_id)
        self.path, self.batch_size, self.shuffle, self.seed = path, batch_size, shuffle, seed
        self.num_epochs, self.drop_remainder, self.layout = num_epochs, drop_remainder, layout
        self.process_index, self.process_count = process_index, process_count
        self.prefetch, self.window_blocks = prefetch, window_blocks
        self.local_batch_size = batch_size // process_count
        self.num_rows = self.index.num_rows
        self.steps_per_epoch = steps_per_epoch(self.num_rows, batch_size, drop_remainder)
        if self.steps_per_epoch == 0:
            raise ValueError(f"'{path}' ({self.index.name}) has {self.num_rows} rows, fewer than one global batch"
                             f" of {batch_size}.")
        self._epoch, self._step = 0, 0
        self._fingerprint = (f"{self.index.manifest.get('config_fingerprint')}/{self.index.name}/"
                             f"{self.num_rows}/{self.index.manifest.get('created_at')}")

    @staticmethod
    def random_windows(path: str, batch_size: int, seq_length: int, **options: Any) -> Any:
        """nanoGPT-style random windows of `seq_length + 1` tokens from a `bin` output (inputs and
        targets); `easydata.reader.bin_reader.WindowReader`. (`TokenReader(path, ..., seq_length=L)`
        itself reads a `bin` output document by document.)"""
        from easydata.reader.bin_reader import WindowReader

        return WindowReader(path, batch_size, seq_length, **options)

    # ---- state ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable position of the next batch this reader yields."""
        return {"version": STATE_VERSION, "epoch": self._epoch, "step": self._step, "seed": self.seed,
                "shuffle": self.shuffle, "global_batch_size": self.batch_size, "dataset": self._fingerprint,
                "window_blocks": self.window_blocks}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues from `state`; refuses a state of another dataset or batch size.

        Raises:
          ValueError: naming what differs.
        """
        check_state(state, self.state_dict(), ("dataset", "global_batch_size", "seed", "shuffle", "window_blocks"),
                    "reader", counters=("epoch", "step"))
        self._epoch, self._step = int(state["epoch"]), int(state["step"])

    # ---- reading -------------------------------------------------------------------------------

    def _empty_batch(self) -> dict[str, np.ndarray]:
        """This process's share of a final partial batch can be empty: it still yields, in step."""
        return {name: np.zeros((0, self.seq_length), dtype=np.int32) for name in self.row_spec.keys}

    def _batches(self, rows: "EpochRows", epoch: int,
                 step: int) -> Iterator[tuple[dict[str, np.ndarray], tuple[int, int]]]:
        """Yields `(batch, (epoch, step) after it)` from `(epoch, step)` on."""
        while self.num_epochs is None or epoch < self.num_epochs:
            if step >= self.steps_per_epoch:
                epoch, step = epoch + 1, 0
                continue
            positions = process_positions(step, self.batch_size, self.process_index, self.process_count,
                                          self.num_rows)
            batch = rows.read(epoch, positions, storage_order=True)
            step += 1
            yield apply_layout(self.layout, batch, self.pad_id, self.dtype, self.pad_override), (epoch, step)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        """Batches of `[batch_size // process_count, L]` arrays, from the current state on."""
        rows = EpochRows(self, read_ahead=self.prefetch, num_epochs=self.num_epochs)
        try:
            for batch, (self._epoch, self._step) in self._batches(rows, self._epoch, self._step):
                yield batch
        finally:
            rows.close()


class EpochRows:
    """Raw rows (`[n, L]` arrays, before the layout) at any positions of any epoch of one reader.

    Keeps the epoch orders in use (`EpochOrder`) and the two most recently used shuffle windows
    (`Window`: their blocks' token columns as numpy arrays, converted once when a block loads), so
    reading positions that advance through epochs loads each block once per epoch and copies each
    batch's rows with numpy `take`. With `read_ahead > 0` one background thread loads the next
    `read_ahead` windows (into the next epoch too, below `num_epochs`) while batches are copied out
    of the current one, and every load goes through that thread (one reader of the shard files at a
    time). `TokenReader` reads its batches through it, `MixedReader` keeps one per source. Not
    thread-safe: one per iterating thread; `close()` stops the read-ahead thread.
    """

    def __init__(self, reader: "TokenReader", read_ahead: int = 0, num_epochs: Optional[int] = None):
        self.reader, self.read_ahead, self.num_epochs = reader, read_ahead, num_epochs
        self._orders: dict[int, EpochOrder] = {}
        self._windows: dict[tuple[int, int], Window] = {}
        self._pending: dict[tuple[int, int], Future] = {}
        self._loader = ThreadPoolExecutor(1, thread_name_prefix="easydata-read-ahead") if read_ahead > 0 else None

    def close(self, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        """Cancels pending loads and joins the read-ahead thread (after a load already running).

        An iterator left unfinished (a training loop that breaks out) is closed by the garbage collector,
        possibly at interpreter exit, when `concurrent.futures` is already torn down: the interpreter then
        joins the thread itself, and closing prints nothing."""
        loader, self._loader = self._loader, None
        if loader is None:
            return
        self._pending.clear()
        if not _finalizing():
            loader.shutdown(wait=True, cancel_futures=True)

    def _order(self, epoch: int) -> EpochOrder:
        order = self._orders.get(epoch)
        if order is None:
            reader = self.reader
            order = self._orders[epoch] = EpochOrder(reader.index.block_rows, seed=reader.seed, epoch=epoch,
                                                     shuffle=reader.shuffle, window_blocks=reader.window_blocks)
            if len(self._orders) > 3:  # the current epoch's, the next one's (read-ahead) and one spare
                self._orders.pop(next(iter(self._orders)))
        return order

    def _new_window(self, key: tuple[int, int]) -> Window:
        epoch, w = key
        return Window(self.reader.index, self._order(epoch).window_blocks_of(w), self.reader.row_spec)

    def _window(self, epoch: int, w: int) -> Window:
        key = (epoch, w)
        window = self._windows.get(key)
        if window is None:
            if self._loader is None:
                window = self._new_window(key)  # blocks load when a batch first needs them
            else:
                future = self._pending.pop(key, None) or self._loader.submit(self._new_window(key).load)
                window = future.result()
            if len(self._windows) >= 2:
                self._windows.pop(next(iter(self._windows)))
            self._windows[key] = window
            if self._loader is not None:
                self._read_ahead_of(key)
        return window

    def _read_ahead_of(self, key: tuple[int, int]) -> None:
        """Starts loading the `read_ahead` windows after `key` (and forgets other pending ones)."""
        upcoming, (epoch, w) = [], key
        while len(upcoming) < self.read_ahead:
            w += 1
            if w >= len(self._order(epoch).window_start) - 1:
                epoch, w = epoch + 1, 0
                if self.num_epochs is not None and epoch >= self.num_epochs:
                    break
            upcoming.append((epoch, w))
        for stale in set(self._pending) - set(upcoming):
            self._pending.pop(stale).cancel()
        for ahead in upcoming:
            if ahead not in self._pending and ahead not in self._windows:
                self._pending[ahead] = self._loader.submit(self._new_window(ahead).load)

    def read(self, epoch: int, positions: np.ndarray, storage_order: bool = False) -> dict[str, np.ndarray]:
        """The rows at `positions` (in `[0, num_rows)`) of `epoch`, in the order of `positions`, or with
        `storage_order` in the order they are stored (window, then row in window): the same rows, copied
        once per block instead of twice (gathered per block, then permuted into position order)."""
        if len(positions) == 0:
            return self.reader._empty_batch()
        window, rows = self._order(epoch).locate(positions)
        if storage_order:
            storage = np.lexsort((rows, window))
            window, rows = window[storage], rows[storage]
        first = int(window[0])
        if window[-1] == first and (window == first).all():
            return self._window(epoch, first).gather(rows)
        parts = []
        for w in dict.fromkeys(window.tolist()):  # windows in order of first use
            where = np.flatnonzero(window == w)
            parts.append((where, self._window(epoch, w).gather(rows[where])))
        return _merge(parts, len(positions))


def _merge(parts: list[tuple[np.ndarray, dict[str, np.ndarray]]], n: int) -> dict[str, np.ndarray]:
    first = parts[0][1]
    out = {k: np.empty((n,) + v.shape[1:], dtype=v.dtype) for k, v in first.items()}
    for where, arrays in parts:
        for k, v in arrays.items():
            out[k][where] = v
    return out
