"""Tests for `easydata.ops.sharding`: stable hashes, hash-range groups, even shard plans, and a sort whose
result does not depend on how rows were batched."""

from __future__ import annotations

import hashlib
import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from easydata.ops.sharding import (
    DEFAULT_GROUP_BYTES,
    HASH_COLUMN,
    KEY_COLUMN,
    ShardPlan,
    choose_num_groups,
    cut_ranges,
    group_of,
    hashes_in_group,
    plan_shards,
    row_hashes,
    serialize_schema,
    sort_group,
    unify_schemas,
)
from tests.conftest import split_by_group


def make_rows(n: int, seed: int = 42, dataset: str = "web") -> pa.RecordBatch:
    """Rows like the tokenize stage emits: tokens, a nullable text field, the key and its hash."""
    keys = [f"/data/part-{i % 3}.jsonl@{i * 37}" for i in range(n)]
    return pa.RecordBatch.from_pydict({
        "input_ids": pa.array([list(range(i % 5 + 1)) for i in range(n)], type=pa.list_(pa.int32())),
        "path": pa.array([None if i % 4 == 0 else f"p{i}" for i in range(n)], type=pa.string()),
        KEY_COLUMN: pa.array(keys, type=pa.string()),
        HASH_COLUMN: pa.array(row_hashes(seed, dataset, keys), type=pa.uint64()),
    })


def as_null_typed_where_possible(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The same rows, with the `path` column typed `null` when all its values are null (as
    `pa.array([None, ...])` infers for a batch without any value)."""
    if batch.column("path").null_count == batch.num_rows:
        return batch.set_column(batch.schema.get_field_index("path"), "path", pa.nulls(batch.num_rows))
    return batch


def reference_order(batch: pa.RecordBatch) -> list[str]:
    rows = sorted(zip(batch.column(HASH_COLUMN).to_pylist(), batch.column(KEY_COLUMN).to_pylist()))
    return [key for _, key in rows]


# ---- hashes --------------------------------------------------------------------------------------


def test_row_hashes_golden_values() -> None:
    hashes = row_hashes(42, "web", ["a.jsonl@0", "a.jsonl@27", "b.parquet@3", ""])
    assert hashes.dtype == np.uint64
    assert hashes.tolist() == [8374835204879239628, 14532415638296361950, 15461229315378810467,
                               16278002359976277706]
    assert row_hashes(0, "code", ["gs://bucket/x.jsonl@1048576", "東京@1"]).tolist() == \
        [10928685497811302172, 7049011892546868807]


def test_row_hashes_match_their_definition() -> None:
    keys = ["a.jsonl@0", "東京.txt@5", "memory:///x.parquet@99"]
    expected = [int.from_bytes(hashlib.blake2b(f"7\x00ds\x00{k}".encode(), digest_size=8).digest(), "big")
                for k in keys]
    assert row_hashes(7, "ds", keys).tolist() == expected


def test_row_hashes_do_not_depend_on_batch_composition() -> None:
    keys = [f"f.jsonl@{i}" for i in range(100)]
    whole = row_hashes(3, "d", keys)
    for cut in (0, 1, 37, 99, 100):
        parts = np.concatenate([row_hashes(3, "d", keys[:cut]), row_hashes(3, "d", keys[cut:])])
        assert parts.tolist() == whole.tolist()
    assert row_hashes(3, "d", iter(keys)).tolist() == whole.tolist(), "any iterable of keys"
    assert row_hashes(3, "d", []).tolist() == []


def test_row_hashes_depend_on_seed_and_dataset() -> None:
    keys = [f"f.jsonl@{i}" for i in range(50)]
    base = row_hashes(1, "a", keys)
    assert len(set(base.tolist())) == 50
    assert not np.any(row_hashes(2, "a", keys) == base)
    assert not np.any(row_hashes(1, "b", keys) == base)


def test_row_hashes_spread_evenly_over_groups() -> None:
    hashes = row_hashes(42, "web", [f"f.jsonl@{i}" for i in range(8192)])
    counts = np.bincount(group_of(hashes, 8), minlength=8)
    assert counts.sum() == 8192
    assert counts.min() > 1024 * 0.85 and counts.max() < 1024 * 1.15, counts


# ---- groups --------------------------------------------------------------------------------------


@pytest.mark.parametrize("estimated_bytes, expected", [
    (0, 1), (1, 1), (100, 1), (DEFAULT_GROUP_BYTES // 2, 1), (DEFAULT_GROUP_BYTES, 1), (DEFAULT_GROUP_BYTES + 1, 2),
    (2 * DEFAULT_GROUP_BYTES, 2), (3 * DEFAULT_GROUP_BYTES, 4), (5 * DEFAULT_GROUP_BYTES, 6),
    (15 * DEFAULT_GROUP_BYTES + 1, 16), (21 * DEFAULT_GROUP_BYTES, 22), (1000 * DEFAULT_GROUP_BYTES, 1000),
])
def test_choose_num_groups(estimated_bytes: int, expected: int) -> None:
    assert choose_num_groups(estimated_bytes) == expected


@given(st.integers(0, 10**15), st.integers(1, 10**10))
def test_choose_num_groups_is_the_smallest_sufficient_even_count(estimated: int, group_bytes: int) -> None:
    groups = choose_num_groups(estimated, group_bytes)
    assert groups == 1 or groups % 2 == 0
    assert groups * group_bytes >= estimated
    assert groups == 1 or (groups - 2) * group_bytes < estimated


@given(st.integers(7 * 2**20 + 1, 10**12))
def test_groups_hold_about_the_target_whatever_the_corpus_size(estimated: int) -> None:
    """The memory a worker needs for one group does not depend on how the corpus size rounds: from eight
    groups on, a group holds between 3/4 of the target and the target (a power of two held anywhere from
    half of it)."""
    groups = choose_num_groups(estimated, 2**20)
    assert 0.75 * 2**20 < estimated / groups <= 2**20


def test_group_of_non_power_of_two_counts_splits_the_hash_space_evenly() -> None:
    hashes = np.array([0, 2**64 // 3 - 1, 2**64 // 3 + 1, 2 * (2**64 // 3) + 2, 2**64 - 1], dtype=np.uint64)
    assert group_of(hashes, 3).tolist() == [0, 0, 1, 2, 2]
    counts = np.bincount(group_of(row_hashes(42, "web", [f"f.jsonl@{i}" for i in range(6000)]), 6), minlength=6)
    assert counts.min() > 1000 * 0.85 and counts.max() < 1000 * 1.15, counts


def test_group_of_uses_the_top_bits() -> None:
    hashes = np.array([0, 2**62 - 1, 2**62, 2**63, 2**64 - 1], dtype=np.uint64)
    assert group_of(hashes, 1).tolist() == [0, 0, 0, 0, 0]
    assert group_of(hashes, 2).tolist() == [0, 0, 0, 1, 1]
    assert group_of(hashes, 4).tolist() == [0, 0, 1, 2, 3]
    assert group_of(hashes, 1024).tolist() == [0, 255, 256, 512, 1023]


@pytest.mark.parametrize("num_groups", [1, 2, 8, 64])
def test_split_by_group_preserves_every_row(num_groups: int) -> None:
    batch = make_rows(200)
    parts = split_by_group(batch, num_groups)
    groups = [g for g, _ in parts]
    assert groups == sorted(set(groups)), "one part per group, in group order"
    for group, part in parts:
        assert part.num_rows > 0
        assert set(group_of(part.column(HASH_COLUMN).to_numpy(), num_groups).tolist()) == {group}
    joined = pa.Table.from_batches([p for _, p in parts])
    assert sorted(joined.column(KEY_COLUMN).to_pylist()) == sorted(batch.column(KEY_COLUMN).to_pylist())
    # Whole rows move together, and rows keep their input order within a group.
    by_key = {r[KEY_COLUMN]: r for r in batch.to_pylist()}
    for _, part in parts:
        rows = part.to_pylist()
        assert all(by_key[r[KEY_COLUMN]] == r for r in rows)
        positions = [batch.column(KEY_COLUMN).to_pylist().index(r[KEY_COLUMN]) for r in rows]
        assert positions == sorted(positions)


def test_split_by_group_edge_sizes() -> None:
    empty = make_rows(0)
    assert split_by_group(empty, 1) == [] and split_by_group(empty, 8) == []
    one = make_rows(1)
    ((group, part),) = split_by_group(one, 16)
    assert part.equals(one) and group == int(group_of(one.column(HASH_COLUMN).to_numpy(), 16)[0])
    ((group, part),) = split_by_group(one, 1)
    assert group == 0 and part.equals(one)


# ---- shard plans ---------------------------------------------------------------------------------


@pytest.mark.parametrize("group_rows, num_groups, num_shards", [
    ({0: 10}, 1, 3),
    ({0: 7, 1: 0, 2: 13, 3: 1}, 4, 4),
    ({1: 100}, 2, 7),
    ({0: 5, 3: 5}, 4, 10),
    ({0: 1}, 1, 1),
    ({g: g * 3 + 1 for g in range(16)}, 16, 5),
])
def test_plan_shards_is_even_and_preserves_rows(group_rows: dict[int, int], num_groups: int,
                                                num_shards: int) -> None:
    plan = plan_shards(group_rows, {}, num_groups, num_shards=num_shards, max_shard_bytes=1)
    total = sum(group_rows.values())
    assert plan.total_rows == total
    assert plan.num_shards == min(num_shards, total)
    sizes = np.diff(plan.shard_bounds())
    assert sizes.sum() == total and len(sizes) == plan.num_shards
    assert sizes.max() - sizes.min() <= 1
    assert sizes.min() >= 1, "no empty shard"
    assert plan.group_start[0] == 0 and plan.group_start[-1] == total
    assert len(plan.group_start) == num_groups + 1


def test_plan_shards_literal_bounds_and_group_starts() -> None:
    plan = plan_shards({0: 3, 2: 5}, {0: 300, 2: 500}, 4, num_shards=3, max_shard_bytes=1)
    assert plan == ShardPlan(num_shards=3, total_rows=8, group_start=(0, 3, 3, 8, 8))
    assert plan.shard_bounds().tolist() == [0, 2, 5, 8]


def test_plan_shards_caps_shards_at_rows_and_handles_no_rows() -> None:
    assert plan_shards({0: 3}, {0: 10**9}, 1, num_shards=10, max_shard_bytes=1).num_shards == 3
    assert plan_shards({0: 3}, {0: 10**9}, 1, num_shards=None, max_shard_bytes=1).num_shards == 3
    empty = plan_shards({}, {}, 4, num_shards=8, max_shard_bytes=100)
    assert (empty.num_shards, empty.total_rows, empty.group_start) == (0, 0, (0, 0, 0, 0, 0))
    assert empty.shard_bounds().tolist() == [0]
    assert plan_shards({}, {}, 1, num_shards=None, max_shard_bytes=100).num_shards == 0


@pytest.mark.parametrize("total_bytes, max_shard_bytes, expected", [
    (1000, 300, 4), (900, 300, 3), (901, 300, 4), (1, 300, 1), (0, 300, 1), (10**9, 500 * 10**6, 2),
])
def test_plan_shards_derives_count_from_max_shard_bytes(total_bytes: int, max_shard_bytes: int,
                                                        expected: int) -> None:
    group_bytes = {0: total_bytes // 2, 1: total_bytes - total_bytes // 2}
    plan = plan_shards({0: 500, 1: 500}, group_bytes, 2, num_shards=None, max_shard_bytes=max_shard_bytes)
    assert plan.num_shards == expected


# ---- sorting -------------------------------------------------------------------------------------


def _random_batches(batch: pa.RecordBatch, rng: random.Random) -> list[pa.RecordBatch]:
    """The rows of `batch` shuffled and cut into a random number of batches (some empty)."""
    order = list(range(batch.num_rows))
    rng.shuffle(order)
    shuffled = batch.take(pa.array(order, type=pa.int64()))
    cuts = sorted(rng.randint(0, batch.num_rows) for _ in range(rng.randint(0, 6)))
    bounds = [0, *cuts, batch.num_rows]
    return [as_null_typed_where_possible(shuffled.slice(a, b - a)) for a, b in zip(bounds, bounds[1:])]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 60), seed=st.integers(0, 2**32 - 1))
def test_sort_group_is_independent_of_batching(n: int, seed: int) -> None:
    rows = make_rows(n)
    reference = sort_group([rows])
    batches = _random_batches(rows, random.Random(seed))
    result = sort_group(batches)
    assert result.num_rows == n
    if n == 0:
        return
    if any(b.schema.field("path").type == pa.string() for b in batches if b.num_rows):
        assert result.schema.field("path").type == pa.string()
        assert result.equals(reference)
    else:  # every row's `path` is null: nothing to unify with here (pieces are unified later)
        assert result.schema.field("path").type == pa.null()
        assert result.cast(reference.schema).equals(reference)
    assert result.column(KEY_COLUMN).to_pylist() == reference_order(rows)


def test_sort_group_unifies_null_typed_columns() -> None:
    rows = make_rows(12)
    all_null = as_null_typed_where_possible(rows.slice(0, 1))  # row 0 has path None
    assert all_null.schema.field("path").type == pa.null()
    result = sort_group([rows.slice(1), all_null])
    assert result.schema.field("path").type == pa.string()
    assert result.equals(sort_group([rows]))
    only_null = sort_group([all_null])
    assert only_null.num_rows == 1 and only_null.column("path").to_pylist() == [None]


def test_sort_group_breaks_hash_ties_by_key() -> None:
    batch = pa.RecordBatch.from_pydict({
        KEY_COLUMN: ["b", "a", "c", "a0"],
        HASH_COLUMN: pa.array([5, 5, 1, 5], type=pa.uint64()),
    })
    assert sort_group([batch]).column(KEY_COLUMN).to_pylist() == ["c", "a", "a0", "b"]
    assert sort_group([batch.slice(2), batch.slice(0, 2)]).column(KEY_COLUMN).to_pylist() == ["c", "a", "a0", "b"]


def test_sort_group_of_nothing_is_empty() -> None:
    assert sort_group([]).num_rows == 0
    assert sort_group([make_rows(0), make_rows(0)]).num_rows == 0


def test_sort_group_with_conflicting_field_types() -> None:
    """int64 in one batch, mixed values (text) in another: the column becomes text, in any order."""
    a = pa.RecordBatch.from_pydict({"id": pa.array([1, 2]), KEY_COLUMN: ["a", "b"],
                                    HASH_COLUMN: pa.array([1, 2], type=pa.uint64())})
    b = pa.RecordBatch.from_pydict({"id": pa.array(["3", "x"]), KEY_COLUMN: ["c", "d"],
                                    HASH_COLUMN: pa.array([3, 4], type=pa.uint64())})
    for batches in ([a, b], [b, a]):
        table = sort_group(batches)
        assert table.schema.field("id").type == pa.string()
        assert table.column("id").to_pylist() == ["1", "2", "3", "x"]


# ---- cutting groups into shard pieces ------------------------------------------------------------


@pytest.mark.parametrize("n, num_groups, num_shards", [
    (1, 1, 1), (10, 1, 3), (100, 4, 7), (100, 8, 100), (57, 16, 4), (200, 2, 1), (33, 4, 64),
])
def test_cut_ranges_cover_every_rank_exactly_once(n: int, num_groups: int, num_shards: int) -> None:
    rows = make_rows(n, seed=n)
    # Route rows to groups from several input batches, as the pipeline does.
    by_group: dict[int, list[pa.RecordBatch]] = {}
    for start in range(0, n, 13):
        for group, part in split_by_group(rows.slice(start, 13), num_groups):
            by_group.setdefault(group, []).append(part)
    sorted_groups = {g: sort_group(parts) for g, parts in by_group.items()}
    plan = plan_shards({g: t.num_rows for g, t in sorted_groups.items()}, {}, num_groups,
                       num_shards=num_shards, max_shard_bytes=1)
    bounds = plan.shard_bounds()

    shards: dict[int, list[tuple[int, pa.Table]]] = {}
    for group in sorted(sorted_groups):
        table = sorted_groups[group]
        pieces = [(shard, table.slice(start, stop - start)) for shard, start, stop in
                  cut_ranges(group, table.num_rows, plan)]
        assert sum(p.num_rows for _, p in pieces) == table.num_rows
        rank = plan.group_start[group]
        for shard, piece in pieces:
            assert bounds[shard] <= rank and rank + piece.num_rows <= bounds[shard + 1], "piece within its shard"
            shards.setdefault(shard, []).append((group, piece))
            rank += piece.num_rows
    assert sorted(shards) == list(range(plan.num_shards))
    global_order: list[str] = []
    for shard in range(plan.num_shards):
        keys = [k for _, piece in shards[shard] for k in piece.column(KEY_COLUMN).to_pylist()]
        assert len(keys) == bounds[shard + 1] - bounds[shard]
        global_order.extend(keys)
    assert global_order == reference_order(rows), "shards in order = the global (hash, key) order"
    assert len(set(global_order)) == n


def test_cut_ranges_of_an_empty_group() -> None:
    plan = plan_shards({0: 4}, {}, 2, num_shards=2, max_shard_bytes=1)
    assert cut_ranges(1, pa.table({}).num_rows, plan) == []


# ---- schemas -------------------------------------------------------------------------------------


def test_unify_serialized_schemas() -> None:
    a = pa.schema([("input_ids", pa.list_(pa.int32())), ("path", pa.null()), ("score", pa.int64())])
    b = pa.schema([("input_ids", pa.list_(pa.int32())), ("path", pa.string()), ("score", pa.float64())])
    unified = unify_schemas([serialize_schema(a), serialize_schema(b)])
    assert unified == pa.schema([("input_ids", pa.list_(pa.int32())), ("path", pa.string()),
                                 ("score", pa.float64())])
    assert unify_schemas([serialize_schema(a)]) == a


@given(st.lists(st.integers(0, 2**64 - 1), max_size=50), st.sampled_from([1, 2, 3, 6, 8, 22, 64, 1000]), st.data())
@settings(max_examples=80, deadline=None)
def test_hashes_in_group_land_in_the_group_and_keep_their_order(values: list[int], num_groups: int, data) -> None:
    group = data.draw(st.sampled_from(sorted({0, num_groups - 1, data.draw(st.integers(0, num_groups - 1))})))
    hashes = np.array(sorted(values), dtype=np.uint64)
    moved = hashes_in_group(hashes, group, num_groups)
    assert (group_of(moved, num_groups) == group).all()
    assert (np.diff(moved.astype(object)) >= 0).all(), "sorted hashes stay sorted"
    if num_groups & (num_groups - 1) == 0:  # a power of two: the group's index as top bits (the old layout)
        bits = num_groups.bit_length() - 1
        expected = hashes if bits == 0 else (np.uint64(group) << np.uint64(64 - bits)) | (hashes >> np.uint64(bits))
        assert np.array_equal(moved, expected)


@given(st.lists(st.integers(0, 40), min_size=1, max_size=8), st.integers(1, 30))
@settings(max_examples=80, deadline=None)
def test_cut_ranges_give_each_rank_to_exactly_one_shard(group_rows: list[int], num_shards: int) -> None:
    counts = dict(enumerate(group_rows))
    plan = plan_shards(counts, {}, len(group_rows), num_shards=num_shards, max_shard_bytes=1)
    bounds = plan.shard_bounds()
    owner = []
    for group, rows in counts.items():
        expected_start = 0
        for shard, start, stop in cut_ranges(group, rows, plan):
            assert start == expected_start and stop > start, "contiguous, non-empty ranges in row order"
            first = plan.group_start[group] + start
            assert bounds[shard] <= first and first + (stop - start) <= bounds[shard + 1]
            owner.extend([shard] * (stop - start))
            expected_start = stop
        assert expected_start == rows
    assert owner == sorted(owner) and len(owner) == sum(group_rows)
