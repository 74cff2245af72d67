"""Token lists as Arrow `list<int32>` columns built from, and taken apart into, flat numpy buffers.

The one conversion every stage uses between numpy token arrays (`flat`, `offsets`) and Arrow list
columns, and the one way tokens are added around each document of a flat buffer (`surround`), without
a per-row Python loop. A leaf module: it imports nothing of easydata.
"""

from __future__ import annotations

import functools
import threading
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa

__all__ = ["token_list_array", "ones_list_array", "list_column_values", "surround", "segments_from_lengths",
           "numpy_dtype"]


@functools.lru_cache(maxsize=None)
def numpy_dtype(arrow_type: pa.DataType) -> np.dtype:
    """The numpy dtype of a numeric or boolean Arrow type. pyarrow's own `to_pandas_dtype` imports pandas, which
    is not a dependency: where it is not installed, every TFRecord and ArrayRecord output was "unreadable"."""
    return pa.array([], arrow_type).to_numpy(zero_copy_only=False).dtype


def token_list_array(flat: np.ndarray, offsets: np.ndarray) -> pa.ListArray:
    """A `list<int32>` array from flat values and offsets, without copying per row."""
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(flat.astype(np.int32, copy=False)))


_ones = np.ones(0, dtype=np.int32)
_ones_lock = threading.Lock()


def ones_list_array(offsets: np.ndarray) -> pa.ListArray:
    """`token_list_array` of all ones over `offsets` (an unpacked row's attention mask), its values a view of
    one read-only buffer of ones per process (grown to the largest batch seen) instead of a fresh array per
    batch: a gigabyte of ones per gigabyte of ids otherwise, each page faulted in and zeroed first."""
    global _ones
    count = int(offsets[-1]) if len(offsets) else 0
    with _ones_lock:
        if len(_ones) < count:
            grown = np.ones(max(count, 2 * len(_ones)), dtype=np.int32)
            grown.flags.writeable = False
            _ones = grown
        values = _ones[:count]
    return token_list_array(values, offsets)


def list_column_values(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Flat values and offsets (rebased to 0) of a list column: the inverse of `token_list_array`."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    offsets = array.offsets.to_numpy().astype(np.int64)
    values = array.values.to_numpy(zero_copy_only=False)
    return values[offsets[0]:offsets[-1]], offsets - offsets[0]


def surround(values: np.ndarray, lengths: np.ndarray, prefix: Sequence[int], suffix: Sequence[int],
             front: Optional[np.ndarray] = None, back: Optional[np.ndarray] = None) -> np.ndarray:
    """`values` (documents back to back, `lengths[i]` values each) with `prefix` before every document
    and `suffix` after it; only before the documents where `front` is true and after those where `back`
    is, when given. Returns the new flat values (int32); each document grows by what was added to it.

    One `np.insert` (a boolean mask and one copy inside) instead of per-value index arrays, which cost
    ten times as much (docs/performance.md#figures-behind-design-choices). Insertions are listed
    document by document, prefix before suffix; `np.insert` keeps that order among equal positions, so
    an empty document gets its prefix then its suffix, and one document's suffix comes before the next
    one's prefix at their shared boundary.
    """
    values = values.astype(np.int32, copy=False)
    p, s, n = len(prefix), len(suffix), len(lengths)
    if not (p + s) or not n:
        return values
    starts = np.cumsum(lengths, dtype=np.int64) - lengths
    where = np.empty((n, p + s), dtype=np.int64)
    where[:, :p] = starts[:, None]
    where[:, p:] = (starts + lengths)[:, None]
    what = np.broadcast_to(np.asarray([*prefix, *suffix], dtype=np.int32), (n, p + s))
    if front is None and back is None:
        return np.insert(values, where.ravel(), what.ravel())
    wanted = np.empty((n, p + s), dtype=bool)
    wanted[:, :p] = True if front is None else np.asarray(front, dtype=bool)[:, None]
    wanted[:, p:] = True if back is None else np.asarray(back, dtype=bool)[:, None]
    return np.insert(values, where[wanted], what[wanted])


def segments_from_lengths(lengths: np.ndarray, piece_offsets: np.ndarray, row_offsets: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray]:
    """`segment_ids` and `positions` (flat int32, rows at `row_offsets`) of rows whose pieces have `lengths`
    (row `r`'s are `lengths[piece_offsets[r]:piece_offsets[r + 1]]`, back to back from its first column in
    segment order; zeros after them): what `easydata.ops.packing.fill_rows` wrote for the lengths
    `row_piece_lengths` gives. One slice per piece: for rows of long pieces (see `fill_rows`)."""
    total = int(row_offsets[-1]) if len(row_offsets) else 0
    segment_ids = np.zeros(total, dtype=np.int32)
    positions = np.zeros(total, dtype=np.int32)
    if len(lengths) == 0:
        return segment_ids, positions
    counts = np.diff(piece_offsets)
    row = np.repeat(np.arange(len(counts)), counts)
    ends = np.cumsum(lengths, dtype=np.int64)
    before = np.repeat(np.concatenate([[0], ends])[piece_offsets[:-1]], counts)  # tokens of earlier rows' pieces
    start = np.asarray(row_offsets, dtype=np.int64)[row] + ends - lengths - before
    segment = np.arange(len(lengths)) - np.repeat(piece_offsets[:-1], counts) + 1
    count = np.arange(int(lengths.max()), dtype=np.int32)
    rest = _fill_whole_rows(segment_ids, positions, lengths, piece_offsets, row_offsets, counts)
    for dst, n, k in zip(start[rest].tolist(), lengths[rest].tolist(), segment[rest].tolist()):
        segment_ids[dst:dst + n] = k
        positions[dst:dst + n] = count[:n]
    return segment_ids, positions


def _fill_whole_rows(segment_ids: np.ndarray, positions: np.ndarray, lengths: np.ndarray, piece_offsets: np.ndarray,
                     row_offsets: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Writes, at once, the rows of one length whose single piece fills them (a long document's full-row
    chunks: most rows of a corpus of long documents); returns which pieces are left to write one by one."""
    widths = np.diff(row_offsets)
    width = int(widths[0]) if len(widths) else 0
    if width == 0 or not np.all(widths == width):
        return np.ones(len(lengths), dtype=bool)
    whole = (counts == 1) & (lengths[np.minimum(piece_offsets[:-1], len(lengths) - 1)] == width)
    if whole.any():
        segment_ids.reshape(-1, width)[whole] = 1
        positions.reshape(-1, width)[whole] = np.arange(width, dtype=np.int32)
    return ~np.repeat(whole, counts)

