"""Deterministic train / validation (/ test ...) splits by document hash.

A document's split is a pure function of `(split_seed, dataset, document key)`: a 64-bit blake2b
hash of the key, read as a number `u` in `[0, 1)`, falls in one of the consecutive intervals the
split fractions cut `[0, 1)` into. So the split is the same whatever the runner, worker count,
batching or pipeline `seed` (changing the shuffle seed never moves a document into another split),
splits are disjoint, and a document's windows (`easydata.text.windows`: keys `<key>#w<k>`) stay in their
document's split. Each split's share of documents is its fraction up to sampling noise.

Split outputs are named `<dataset>/<split>` (files under `OUT/<dataset>/<split>/`).
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np
import pyarrow as pa

from easydata.io.formats import take_rows
from easydata.ops.sharding import KEY_COLUMN, row_hashes

__all__ = ["document_keys", "assign_splits", "partition_rows", "split_output_name"]

_WINDOW_SUFFIX = re.compile(r"#w\d+$")


def split_output_name(dataset: str, split: str) -> str:
    return f"{dataset}/{split}"


def document_keys(row_keys: Sequence[str]) -> list[str]:
    """The document key of each row (a window's key without its `#w<k>` suffix)."""
    return [_WINDOW_SUFFIX.sub("", key) for key in row_keys]


def assign_splits(keys: Sequence[str], fractions: Sequence[float], *, dataset: str, split_seed: int) -> np.ndarray:
    """The index into `fractions` of each document key's split.

    Args:
      keys: document keys.
      fractions: the splits' fractions (positive, summing to 1).
      dataset: the dataset the documents belong to.
      split_seed: selects another assignment.
    """
    hashes = row_hashes(split_seed, f"split:{dataset}", list(keys))
    u = (hashes >> np.uint64(11)).astype(np.float64) * 2.0**-53  # exactly representable, in [0, 1)
    bounds = np.cumsum(np.asarray(fractions, dtype=np.float64))
    return np.minimum(np.searchsorted(bounds, u, side="right"), len(bounds) - 1)


def partition_rows(batch: pa.RecordBatch, *, dataset: str, names: Sequence[str], fractions: Sequence[float],
                   split_seed: int) -> list[tuple[str, pa.RecordBatch]]:
    """Splits a batch of token rows (with `__key__`) into `(split name, rows)` parts, in split order."""
    if batch.num_rows == 0:
        return []
    keys = document_keys(batch.column(KEY_COLUMN).to_pylist())
    split = assign_splits(keys, fractions, dataset=dataset, split_seed=split_seed)
    parts = []
    for index, name in enumerate(names):
        rows = np.flatnonzero(split == index)
        if len(rows) == batch.num_rows:
            parts.append((name, batch))
        elif len(rows):
            parts.append((name, take_rows(batch, rows)))
    return parts
