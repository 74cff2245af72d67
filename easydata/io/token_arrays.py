"""Token lists as Arrow `list<int32>` columns built from, and taken apart into, flat numpy buffers.

The one conversion every stage uses between numpy token arrays (`flat`, `offsets`) and Arrow list
columns, without a per-row Python loop. A leaf module: it imports nothing of easydata.
"""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa

__all__ = ["token_list_array", "ones_list_array", "list_column_values"]


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
