"""Deterministic global shuffle and even shard assignment, in bounded memory.

Every output row carries a 64-bit hash of `(seed, dataset, key)`. The global order of a dataset's
rows is the order of these hashes (ties broken by key), so it depends only on the data and the
seed, never on the runner, the worker count or bundle boundaries.

To sort without holding a dataset in one place, rows are routed to `num_groups` *groups*: equal
ranges of the 64-bit hash space (group `g` of `n` holds the hashes `h` with `floor(h * n / 2**64) == g`;
for a power of two these are the hash's top bits), their number chosen from the input size so each group
fits in a worker's memory and holds about the same bytes whatever the corpus size. Groups are hash
ranges, so sorting each group and concatenating groups in order gives the global order. Each group is staged sorted, in one file (`SortedGroup`). Per-group row counts give
each group's first global rank; shard `s` of `n` holds ranks `[s * total // n, (s + 1) * total // n)`,
so shards differ by at most one row. A sorted group is cut into *pieces* (row ranges of its file) at
shard boundaries (`cut_ranges`); a shard is its pieces in group order.

Rows made from a group's rows (packed rows) get hashes inside that group's range (`hashes_in_group`),
so they are staged sorted where they were made, without being routed again.

All functions here are pure (numpy / pyarrow), unit-tested without Beam.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Iterable, Optional

import numpy as np
import pyarrow as pa

from easydata.io.formats import common_schema, conform, take_rows
from easydata.rows import HASH_COLUMN, KEY_COLUMN

__all__ = [
    "DEFAULT_GROUP_BYTES",
    "HASH_COLUMN",
    "KEY_COLUMN",
    "row_hashes",
    "choose_num_groups",
    "group_of",
    "hashes_in_group",
    "group_ranges",
    "ShardPlan",
    "plan_shards",
    "group_order",
    "group_table",
    "sort_group",
    "cut_ranges",
    "data_bytes",
    "SortedGroup",
    "PieceInfo",
    "ShardInfo",
    "serialize_schema",
    "unify_schemas",
]

# Estimated bytes of token rows per hash group. A group is packed or sorted in one worker's memory
# (2-3x its size while packing); 48 MB keeps that small next to a worker's baseline, and gives a
# 40 MB corpus (~100 MB of rows) an even number of groups, packed in parallel by two workers. With the
# exact group count (`choose_num_groups`) it held a mix's peak memory from 150 to 400 MB within ~1.1x
# (docs/performance.md#mixing); 64 MB groups peaked ~80 MiB higher at 400 MB.
DEFAULT_GROUP_BYTES = 48 * 2**20


def row_hashes(seed: int, dataset: str, keys: Iterable[str]) -> np.ndarray:
    """Stable 64-bit hashes of document keys (blake2b, independent of Python's hash seed)."""
    prefix = f"{seed}\x00{dataset}\x00".encode()
    digests = b"".join(hashlib.blake2b(prefix + k.encode(), digest_size=8).digest() for k in keys)
    return np.frombuffer(digests, dtype=">u8").astype(np.uint64)


def choose_num_groups(estimated_bytes: int, group_bytes: int = DEFAULT_GROUP_BYTES) -> int:
    """How many groups so that each holds at most about `group_bytes`: the fewest that suffice, rounded up
    to an even number (at least one group).

    Not a power of two: rounding up to one made a group anywhere from half to all of `group_bytes`
    depending on the corpus size, and a worker's peak memory with it (a 150 MB mix had 8 groups of
    48 MB, a 400 MB one 16 of 66 MB: 1.18x the peak). Even, so two workers finish their groups together.
    """
    needed = max(1, math.ceil(estimated_bytes / group_bytes))
    return needed + (needed % 2) if needed > 1 else 1


def _mulhi(a: np.ndarray, b: int) -> np.ndarray:
    """The high 64 bits of each 128-bit product `a * b` (`a` uint64 values, `0 <= b < 2**64`), exactly,
    from 32-bit halves (numpy has no 128-bit integers)."""
    mask = np.uint64(0xFFFFFFFF)
    shift = np.uint64(32)
    a = np.asarray(a, dtype=np.uint64)
    a_hi, a_lo = a >> shift, a & mask
    b_hi, b_lo = np.uint64(b >> 32), np.uint64(b & 0xFFFFFFFF)
    lo_lo = a_lo * b_lo
    hi_lo = a_hi * b_lo
    lo_hi = a_lo * b_hi
    middle = (lo_lo >> shift) + (hi_lo & mask) + (lo_hi & mask)  # < 3 * 2**32: no overflow
    return a_hi * b_hi + (hi_lo >> shift) + (lo_hi >> shift) + (middle >> shift)


def _group_start(group: int, num_groups: int) -> int:
    """The smallest hash of `group`: `ceil(group * 2**64 / num_groups)` (2**64 for `group == num_groups`)."""
    return -((-group << 64) // num_groups)


def group_of(hashes: np.ndarray, num_groups: int) -> np.ndarray:
    """Group index of each hash: `floor(hash * num_groups / 2**64)` (for a power of two, its top bits)."""
    if num_groups == 1:
        return np.zeros(len(hashes), dtype=np.int64)
    return _mulhi(hashes, int(num_groups)).astype(np.int64)


def hashes_in_group(hashes: np.ndarray, group: int, num_groups: int) -> np.ndarray:
    """`hashes` moved into `group`'s hash range: the range's start plus each hash scaled to the range's
    width (for a power of two, the group's index as top bits and the hash's top bits below).

    Their order is kept, so rows sorted by these hashes are in the order of the original hashes.
    """
    hashes = np.asarray(hashes, dtype=np.uint64)
    if num_groups == 1:
        return hashes.copy()
    start = _group_start(group, num_groups)
    width = _group_start(group + 1, num_groups) - start
    return np.uint64(start) + _mulhi(hashes, width)


def group_ranges(batch: pa.RecordBatch, num_groups: int) -> tuple[pa.RecordBatch, list[int], list[int], list[int]]:
    """A batch (with a `__hash__` column) ordered by hash group: `(rows, groups, starts, stops)`, where
    `rows[starts[i]:stops[i]]` are the rows of group `groups[i]` in their original order (non-empty
    groups only, ascending)."""
    if num_groups == 1 or batch.num_rows == 0:
        return (batch, [0], [0], [batch.num_rows]) if batch.num_rows else (batch, [], [], [])
    groups = group_of(batch.column(HASH_COLUMN).to_numpy(), num_groups)
    order = np.argsort(groups, kind="stable")
    sorted_groups = groups[order]
    cuts = np.flatnonzero(np.diff(sorted_groups)) + 1
    starts = np.concatenate([[0], cuts])
    stops = np.concatenate([cuts, [len(order)]])
    return take_rows(batch, order), sorted_groups[starts].tolist(), starts.tolist(), stops.tolist()


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """Where each group's rows land.

    Attributes:
      num_shards: shards of this dataset (0 when it has no rows).
      total_rows: rows of the dataset.
      group_start: global rank of each group's first row (length `num_groups + 1`).
    """

    num_shards: int
    total_rows: int
    group_start: tuple[int, ...]

    def shard_bounds(self) -> np.ndarray:
        """Rank boundaries: shard `s` covers `[bounds[s], bounds[s + 1])`."""
        s = np.arange(self.num_shards + 1, dtype=np.int64)
        return (s * self.total_rows) // max(self.num_shards, 1)


def plan_shards(group_rows: dict[int, int], group_bytes: dict[int, int], num_groups: int, *,
                num_shards: Optional[int], max_shard_bytes: int) -> ShardPlan:
    """Chooses the shard count and each group's first rank from per-group counts.

    Args:
      group_rows, group_bytes: rows and uncompressed bytes per group (missing groups are empty).
      num_groups: total number of groups.
      num_shards: exact shard count requested, or None to derive it from `max_shard_bytes`.
      max_shard_bytes: bound on a shard's uncompressed size when `num_shards` is None.
    """
    rows = np.array([group_rows.get(g, 0) for g in range(num_groups)], dtype=np.int64)
    total_rows = int(rows.sum())
    total_bytes = sum(group_bytes.values())
    wanted = num_shards if num_shards is not None else max(1, math.ceil(total_bytes / max_shard_bytes))
    shards = min(wanted, total_rows)
    starts = np.concatenate([[0], np.cumsum(rows)])
    return ShardPlan(num_shards=int(shards), total_rows=total_rows, group_start=tuple(int(x) for x in starts))


def group_table(batches: Iterable[pa.RecordBatch]) -> pa.Table:
    """One group's sub-batches as one table (schemas unified, chunks not copied), in arrival order."""
    batches = [b for b in batches if b.num_rows]
    if not batches:
        return pa.table({})
    schema = common_schema([b.schema for b in batches])
    return pa.Table.from_batches([conform(b, schema) for b in batches], schema)


def group_order(table: pa.Table) -> np.ndarray:
    """The row order of a group sorted by (hash, key): a deterministic order, whatever the arrival order."""
    # Imported here: pyarrow.compute writes its functions' docstrings at import (slow), which a
    # command that only plans the job does not need (the local worker server imports it before forking).
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    keys = table.select([HASH_COLUMN, KEY_COLUMN])
    order = pc.sort_indices(keys, sort_keys=[(HASH_COLUMN, "ascending"), (KEY_COLUMN, "ascending")])
    return order.to_numpy()


def sort_group(batches: Iterable[pa.RecordBatch]) -> pa.Table:
    """Concatenates one group's sub-batches and sorts rows by (hash, key)."""
    table = group_table(batches)
    return table.take(group_order(table)) if table.num_rows else table  # chunked take: one copy, no concat first


def cut_ranges(group: int, num_rows: int, plan: ShardPlan) -> list[tuple[int, int, int]]:
    """Cuts a sorted group of `num_rows` rows at shard boundaries: `[(shard, start, stop), ...]` row ranges."""
    if num_rows == 0:
        return []
    first = plan.group_start[group]
    bounds = plan.shard_bounds()
    first_shard = int(np.searchsorted(bounds, first, side="right")) - 1
    last_shard = int(np.searchsorted(bounds, first + num_rows - 1, side="right")) - 1
    ranges = []
    for shard in range(first_shard, last_shard + 1):
        start = max(int(bounds[shard]), first) - first
        stop = min(int(bounds[shard + 1]), first + num_rows) - first
        if stop > start:
            ranges.append((shard, start, stop))
    return ranges


def data_bytes(columns: pa.Table | pa.RecordBatch, hidden: Iterable[str]) -> int:
    """Uncompressed bytes of the columns that will be written (`hidden` ones left out): sizes shards."""
    skip = set(hidden)
    return sum(columns.column(name).nbytes for name in columns.schema.names if name not in skip)


@dataclasses.dataclass(frozen=True)
class SortedGroup:
    """One hash group's rows in their final (hash, key) order, staged in one Arrow IPC file.

    Attributes:
      data_bytes: uncompressed bytes of the columns to be written, for the shard count.
      schema: serialized Arrow schema, to unify column types across a dataset's shards.
    """

    dataset: str
    group: int
    path: str
    rows: int
    data_bytes: int
    schema: bytes


@dataclasses.dataclass(frozen=True)
class PieceInfo:
    """The rows `[start, start + rows)` of a sorted group's file that belong to one shard."""

    dataset: str
    shard: int
    num_shards: int
    group: int
    path: str
    rows: int
    schema: bytes  # serialized Arrow schema, to unify column types across a dataset's shards
    start: int = 0


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """A finished shard under its temporary name, with what the manifest records."""

    dataset: str
    shard: int
    num_shards: int
    temp_path: str
    relative_path: str
    rows: int
    tokens: int
    bytes: int
    padding_tokens: int = 0
    trained_tokens: int = 0
    columns: tuple[tuple[str, str], ...] = ()  # (name, Arrow type) of the written schema
    documents: Optional[int] = None  # documents the rows stand for (None: one per row; see easydata.text.windows)
    cut_documents: int = 0  # documents truncated or cut into windows
    companions: tuple[tuple[str, str, str], ...] = ()  # (role, temp_path, relative_path) of files beside the shard


def serialize_schema(schema: pa.Schema) -> bytes:
    return schema.serialize().to_pybytes()


def unify_schemas(serialized: Iterable[bytes]) -> pa.Schema:
    """One schema for all pieces of a dataset (null-typed columns take the type seen elsewhere)."""
    return common_schema([pa.ipc.read_schema(pa.py_buffer(s)) for s in serialized])
