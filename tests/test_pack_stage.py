"""`pack_group`, the pack stage's unit of work: packed rows come out in their final shuffle order, with
hashes inside their group's range, every token once, whatever order the documents are read in."""

from __future__ import annotations

import collections

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from easydata.config import PackStageConfig
from easydata.ops.pack_stage import pack_group
from easydata.ops.sharding import HASH_COLUMN, KEY_COLUMN, group_of, group_order, row_hashes

L = 16


def _documents(lengths: list[int], seed: int) -> pa.Table:
    keys = [f"doc@{i}" for i in range(len(lengths))]
    start = np.cumsum([0, *lengths])
    return pa.table({
        "input_ids": pa.array([list(range(start[i] + 1, start[i + 1] + 1)) for i in range(len(lengths))],
                              type=pa.list_(pa.int32())),
        KEY_COLUMN: pa.array(keys),
        HASH_COLUMN: pa.array(row_hashes(seed, "web", keys), type=pa.uint64()),
    })


@given(st.lists(st.integers(1, 3 * L), min_size=1, max_size=40), st.sampled_from(["greedy", "first_fit", "pool"]),
       st.sampled_from([1, 4, 32]), st.data())
@settings(max_examples=40, deadline=None)
def test_packed_rows_are_sorted_in_their_group_and_hold_every_token_once(lengths, strategy, num_groups, data):
    group = data.draw(st.integers(0, num_groups - 1))
    table = _documents(lengths, seed=len(lengths))
    config = PackStageConfig(enabled=True, seq_length=L, strategy=strategy)
    batches, stats = pack_group(table, config=config, pad_id=0, seed=5, dataset="web", group=group,
                                order=group_order(table), num_groups=num_groups)
    packed = pa.Table.from_batches(list(batches))
    hashes = packed.column(HASH_COLUMN).to_numpy()
    keys = packed.column(KEY_COLUMN).to_pylist()
    assert (group_of(hashes, num_groups) == group).all(), "rows stay in their group's hash range"
    assert list(zip(hashes.tolist(), keys)) == sorted(zip(hashes.tolist(), keys)), "sorted by (hash, key)"
    assert sorted(keys) == [f"{group:06d}:{i:09d}" for i in range(packed.num_rows)]
    ids = np.array(packed.column("input_ids").to_pylist())
    segments = np.array(packed.column("segment_ids").to_pylist())
    assert ids.shape == (stats.rows, L)
    tokens = collections.Counter(ids[segments > 0].tolist())
    assert tokens == collections.Counter(range(1, sum(lengths) + 1)) and max(tokens.values()) == 1


def test_packed_rows_do_not_depend_on_the_order_documents_arrive_in():
    table = _documents([5, 17, 3, 30, 9, 16, 1, 8], seed=1)
    config = PackStageConfig(enabled=True, seq_length=L, strategy="first_fit")
    runs = []
    for arrival in (table, table.take(pa.array([7, 6, 5, 4, 3, 2, 1, 0]))):
        batches, _ = pack_group(arrival, config=config, pad_id=0, seed=2, dataset="web", group=1,
                                order=group_order(arrival), num_groups=2)
        runs.append(pa.Table.from_batches(list(batches)))
    assert runs[0].equals(runs[1])



def _staged_and_plain(table: pa.Table, config: PackStageConfig) -> dict[bool, tuple]:
    """The group packed for a staged file and packed whole, each staged, read back and measured as the pack
    transform does: (rows read, schema, counters, shard-plan bytes, whether piece lengths stood in, the rows of
    a range read as a shard's piece reads them)."""
    import tempfile

    from easydata.io.formats import iter_staged_rows, write_staged_batches
    from easydata.io.staged_columns import SEGMENTS_COLUMN, derived_bytes
    from easydata.ops.pack_stage import uint16_columns
    from easydata.ops.sharding import data_bytes
    from easydata.rows import HIDDEN_COLUMNS

    runs = {}
    for staged in (False, True):
        batches, stats = pack_group(table, config=config, pad_id=0, seed=5, dataset="web", group=0,
                                    order=group_order(table), staged=staged)
        batches = list(batches)
        measured = sum(data_bytes(b, (*HIDDEN_COLUMNS, SEGMENTS_COLUMN)) + derived_bytes(b) for b in batches)
        with tempfile.TemporaryDirectory() as tmp:
            path = f"{tmp}/group.arrow"
            rows, schema = write_staged_batches(batches, path, narrow=uint16_columns(table, config=config, pad_id=0))
            read = pa.Table.from_batches(list(iter_staged_rows(path))) if rows else None
            part = pa.Table.from_batches(list(iter_staged_rows(path, rows // 3, 2 * rows // 3 + 1))) if rows else None
        runs[staged] = (read, schema, stats, measured, any(SEGMENTS_COLUMN in b.schema.names for b in batches), part)
    return runs


@given(st.lists(st.integers(0, 200), min_size=1, max_size=30),
       st.sampled_from(["greedy", "first_fit", "best_fit", "pool"]), st.sampled_from([None, 2]), st.booleans(),
       st.booleans())
@settings(max_examples=60, deadline=None)
def test_a_staged_group_reads_back_as_the_rows_packed_with_their_segments(lengths, strategy, cap, masked, fields):
    """`pack_group(staged=True)` leaves `segment_ids` and `positions` to the staged file's reader when its pieces
    are long (each row's piece lengths instead): read back, the rows, their schema, the counters and the bytes
    the shard plan measures are those of the rows packed with both columns."""
    table = _documents(lengths, seed=len(lengths))
    if masked:
        table = table.append_column("loss_mask", pa.array([[i % 2 for i in range(n)] for n in lengths],
                                                           pa.list_(pa.int32())))
    if fields:
        table = table.append_column("source", pa.array([f"s{i % 3}" for i in range(len(lengths))]))
    config = PackStageConfig(enabled=True, seq_length=64, strategy=strategy, max_segments_per_row=cap)
    runs = _staged_and_plain(table, config)
    (plain, plain_schema, plain_stats, plain_bytes, _, plain_part) = runs[False]
    (derived, schema, stats, measured, _, part) = runs[True]
    assert (schema, stats, measured) == (plain_schema, plain_stats, plain_bytes)
    assert (derived is None and plain is None) or (derived.equals(plain) and derived.schema == plain.schema)
    assert (part is None and plain_part is None) or part.equals(plain_part)  # a shard's row range of the group


def test_piece_lengths_stand_in_only_for_long_pieces():
    config = PackStageConfig(enabled=True, seq_length=64, strategy="first_fit")
    long, short = _staged_and_plain(_documents([150, 40, 90, 64], seed=3), config), \
        _staged_and_plain(_documents([5, 9, 3, 12, 7], seed=3), config)
    assert long[True][4] and not long[False][4] and not short[True][4]
    assert long[True][0].equals(long[False][0]) and max(map(max, long[True][0].column("segment_ids").to_pylist())) > 1
