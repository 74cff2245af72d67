"""The order in which an epoch visits rows: a pure function of (seed, epoch, position).

Shuffled epochs permute the blocks of all shards (a global permutation across shards), group the
permuted blocks into windows of `window_blocks`, and permute the rows inside each window. Every row
is visited exactly once per epoch; every block is loaded once per epoch (it belongs to one window);
and because the writer already stored rows in a global seeded shuffle, rows of any block are a random
sample of the dataset, so each epoch is a fresh global shuffle. Unshuffled epochs visit rows in
storage order.

No state is stored: `EpochOrder.locate(positions)` computes `(window, row in window)` for any epoch
positions, which is what makes resume exact and cheap. Cost: a window's row permutation is computed
once, vectorised over the whole window (8 bytes per row), and cached for the last few windows, so
each batch pays an index lookup rather than a Feistel evaluation.
"""

from __future__ import annotations

import numpy as np

from easydata.reader.permutation import derive_key, permute

__all__ = ["EpochOrder", "steps_per_epoch", "process_positions"]

_KEPT_WINDOWS = 4  # row permutations kept per epoch order (8 bytes per row of a window)


class EpochOrder:
    """Position -> (window, block, row) for one epoch.

    Args:
      block_rows: rows of each block.
      seed, epoch: select the permutations.
      shuffle: permute (True) or keep storage order (False).
      window_blocks: blocks per shuffle window (memory: one window of blocks at a time).
    """

    def __init__(self, block_rows: np.ndarray, *, seed: int, epoch: int, shuffle: bool, window_blocks: int):
        if window_blocks <= 0:
            raise ValueError(f"`window_blocks` must be positive, got {window_blocks}.")
        self.shuffle = shuffle
        self.seed, self.epoch = seed, epoch
        num_blocks = len(block_rows)
        positions = np.arange(num_blocks)
        self.blocks = permute(positions, num_blocks, derive_key(seed, epoch, 1)) if shuffle and num_blocks \
            else positions
        self.window_blocks = window_blocks
        rows_in_order = block_rows[self.blocks]
        self.block_start = np.concatenate([[0], np.cumsum(rows_in_order)])  # epoch position of each slot
        window_edges = np.arange(0, num_blocks + window_blocks, window_blocks).clip(max=num_blocks)
        window_edges = np.unique(window_edges)
        self.window_start = self.block_start[window_edges]  # epoch position where each window starts
        self.num_rows = int(self.block_start[-1])
        self._window_rows: dict[int, np.ndarray] = {}

    def window_blocks_of(self, window: int) -> np.ndarray:
        """Block ids of a window, in the order their rows are concatenated."""
        return self.blocks[window * self.window_blocks:(window + 1) * self.window_blocks]

    def window_rows(self, window: int) -> np.ndarray:
        """The row permutation of a shuffled window: `window_rows(w)[i]` is the row (in the window's
        concatenated rows) at the window's `i`-th position. Computed once per window and kept for the
        most recent windows, so `locate` costs an index lookup per position."""
        rows = self._window_rows.get(window)
        if rows is None:
            size = int(self.window_start[window + 1] - self.window_start[window])
            rows = permute(np.arange(size, dtype=np.int64), size, derive_key(self.seed, self.epoch, 2, int(window)))
            if len(self._window_rows) >= _KEPT_WINDOWS:
                self._window_rows.pop(next(iter(self._window_rows)))
            self._window_rows[window] = rows
        return rows

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For epoch positions: their window and their row index within the window's concatenated rows."""
        positions = np.asarray(positions, dtype=np.int64)
        window = np.searchsorted(self.window_start, positions, side="right") - 1
        local = positions - self.window_start[window]
        if not self.shuffle or not len(positions):
            return window, local
        if window[0] == window[-1] and (window == window[0]).all():
            return window, self.window_rows(int(window[0]))[local]
        rows = np.empty_like(local)
        for w in np.unique(window).tolist():
            in_window = window == w
            rows[in_window] = self.window_rows(w)[local[in_window]]
        return window, rows


def steps_per_epoch(num_rows: int, global_batch: int, drop_remainder: bool) -> int:
    """Global batches in one epoch."""
    return num_rows // global_batch if drop_remainder else -(-num_rows // global_batch)


def process_positions(step: int, global_batch: int, process_index: int, process_count: int,
                      num_rows: int) -> np.ndarray:
    """Epoch positions this process reads at `step`: its contiguous share of the global batch."""
    local = global_batch // process_count
    start = step * global_batch + process_index * local
    return np.arange(start, min(start + local, num_rows), dtype=np.int64)

