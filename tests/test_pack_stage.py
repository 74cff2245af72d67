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
