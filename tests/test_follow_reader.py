"""`FollowReader`: a growing streaming output is read in commit order, each row once, new windows are
picked up while reading, and resume continues exactly."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from easydata.reader import FollowReader
from easydata.run.streaming import commit_window

L = 4
BASE = {"config": {}, "fingerprint": "f", "tokenizer": {"vocab_size": 100_000, "eos_token_id": 0},
        "output_format": "parquet", "compression": "none",
        "schema": {"columns": {c: "list<item: int32>" for c in ("input_ids", "segment_ids", "positions")},
                   "packed": True, "seq_length": L}}


def _commit(out: Path, window: int, rows: int) -> None:
    """Commits a window of `rows` packed rows whose first token is `window * 1000 + row`."""
    ids = [[window * 1000 + r] + [1] * (L - 1) for r in range(rows)]
    table = pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32())),
                      "segment_ids": pa.array([[1] * L] * rows, pa.list_(pa.int32())),
                      "positions": pa.array([list(range(L))] * rows, pa.list_(pa.int32()))})
    staged = out.parent / f"staged-{window}.parquet"
    pq.write_table(table, staged, row_group_size=3)
    rel = f"live/w{window:04d}-p000-part-00000-of-00001.parquet"
    commit_window(str(out), window=f"live/w{window}", start=window * 60.0, end=window * 60.0 + 60,
                  outputs={"live": {"shards": [{"path": rel, "rows": rows, "tokens": rows * L, "padding_tokens": 0}],
                                    "documents_in": rows, "documents_written": rows, "documents_rejected": 0}},
                  moves=[(str(staged), rel)], rejected_files=[], base=BASE)


def _firsts(batches) -> list[int]:
    return [int(x) for b in batches for x in b["input_ids"][:, 0]]


@pytest.mark.slow
def test_reads_every_committed_row_once_and_follows_new_windows(tmp_path):
    out = tmp_path / "out"
    _commit(out, 1, 7)
    _commit(out, 2, 5)
    reader = FollowReader(str(out), batch_size=4, seed=3, poll_seconds=0.05, timeout=1.0)
    later = threading.Timer(0.3, _commit, args=(out, 3, 8))
    later.start()
    got = _firsts(reader)
    later.join()
    expected = [1000 + r for r in range(7)] + [2000 + r for r in range(5)] + [3000 + r for r in range(8)]
    assert len(got) == 20 and sorted(got) == expected  # 20 rows = 5 full batches of 4
    assert sorted(got[:7]) == expected[:7]              # windows in commit order, shuffled within
    assert got[:7] != expected[:7] or got[7:12] != expected[7:12]


def test_two_processes_split_each_global_batch(tmp_path):
    out = tmp_path / "out"
    _commit(out, 1, 12)
    whole = [b["input_ids"] for b in FollowReader(str(out), batch_size=4, poll_seconds=0.01, timeout=0.05)]
    parts = [[b["input_ids"] for b in FollowReader(str(out), batch_size=4, process_index=p, process_count=2,
                                                   poll_seconds=0.01, timeout=0.05)] for p in range(2)]
    for step, batch in enumerate(whole):
        np.testing.assert_array_equal(np.concatenate([parts[0][step], parts[1][step]]), batch)


def test_resume_continues_exactly_after_the_output_grew(tmp_path):
    out = tmp_path / "out"
    _commit(out, 1, 10)
    first = FollowReader(str(out), batch_size=4, seed=1, poll_seconds=0.01, timeout=0.05)
    iterator = iter(first)
    head = [next(iterator)]
    state = json.loads(json.dumps(first.state_dict()))
    _commit(out, 2, 6)
    uninterrupted = _firsts(FollowReader(str(out), batch_size=4, seed=1, poll_seconds=0.01, timeout=0.05))
    resumed = FollowReader(str(out), batch_size=4, seed=1, poll_seconds=0.01, timeout=0.05)
    resumed.load_state_dict(state)
    assert _firsts(head) + _firsts(resumed) == uninterrupted
    other = FollowReader(str(out), batch_size=8, seed=1)
    with pytest.raises(ValueError, match="global_batch_size"):
        other.load_state_dict(state)


def test_timeout_ends_iteration_when_nothing_new_arrives(tmp_path):
    out = tmp_path / "out"
    _commit(out, 1, 3)  # fewer rows than a batch: nothing to yield, then the timeout
    started = time.monotonic()
    assert list(FollowReader(str(out), batch_size=4, poll_seconds=0.02, timeout=0.2)) == []
    assert time.monotonic() - started < 5


def test_as_jax_and_as_pmap_shapes(tmp_path):
    jax = pytest.importorskip("jax")
    from jax.sharding import Mesh, PartitionSpec

    out = tmp_path / "out"
    _commit(out, 1, 16)
    mesh = Mesh(np.array(jax.devices()), ("data",))
    arrays = [b["input_ids"] for b in FollowReader(str(out), batch_size=8, poll_seconds=0.01, timeout=0.05)
              .as_jax(mesh, PartitionSpec("data"))]
    assert [a.shape for a in arrays] == [(8, L), (8, L)]
    assert arrays[0].sharding.spec == PartitionSpec("data")
    pmapped = [b["input_ids"].shape for b in FollowReader(str(out), batch_size=8, poll_seconds=0.01, timeout=0.05)
               .as_pmap()]
    assert pmapped == [(len(jax.local_devices()), 8 // len(jax.local_devices()), L)] * 2


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(windows=st.lists(st.integers(1, 9), min_size=1, max_size=6), batch_size=st.sampled_from([1, 2, 3, 4, 6, 12]),
       seed=st.integers(0, 3), data=st.data())
def test_batches_cut_across_windows_split_over_processes_and_resume(tmp_path_factory, windows, batch_size, seed,
                                                                     data):
    """Global batches take rows across window boundaries in commit order, each row once; the processes'
    local batches put together are the global batch; a resume at any step continues exactly."""
    out = tmp_path_factory.mktemp("follow") / "out"
    for w, rows in enumerate(windows, start=1):
        _commit(out, w, rows)
    read = lambda **kw: FollowReader(str(out), batch_size=batch_size, seed=seed, poll_seconds=0.01, timeout=0.0, **kw)
    whole = [b["input_ids"] for b in read()]
    expected = [1000 * w + r for w, rows in enumerate(windows, start=1) for r in range(rows)]
    assert len(whole) == len(expected) // batch_size
    got = [int(x) for b in whole for x in b[:, 0]]
    assert len(set(got)) == len(got) and set(got) <= set(expected)
    assert got == sorted(got, key=lambda x: x // 1000)  # windows in commit order
    count = data.draw(st.sampled_from([c for c in (1, 2, 3) if batch_size % c == 0]))
    parts = [[b["input_ids"] for b in read(process_index=p, process_count=count)] for p in range(count)]
    for step, batch in enumerate(whole):
        np.testing.assert_array_equal(np.concatenate([part[step] for part in parts]), batch)
    at = data.draw(st.integers(0, len(whole)))
    first = read()
    iterator = iter(first)
    head = [next(iterator) for _ in range(at)]
    resumed = read()
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert _firsts(head) + _firsts(resumed) == got


@pytest.mark.parametrize("options, message", [
    (dict(process_index=2, process_count=2), r"`process_index` must be in \[0, 2\)"),
    (dict(process_index=-1, process_count=2), r"`process_index` must be in \[0, 2\)"),
    (dict(process_index=0, process_count=0), r"`process_count` positive"),
    (dict(batch_size=6, process_index=0, process_count=4), "does not divide over 4 processes"),
    (dict(poll_seconds=-1), "must be non-negative"),
    (dict(timeout=-0.5), "must be non-negative"),
])
def test_bad_processes_and_polling_are_refused(tmp_path, options, message):
    """A process index outside the processes gave short or empty batches, and a process count of 0 a
    ZeroDivisionError; a negative poll interval failed only when the reader first waited."""
    out = tmp_path / "out"
    _commit(out, 1, 12)
    with pytest.raises(ValueError, match=message):
        FollowReader(str(out), **{"batch_size": 4, **options})


@pytest.mark.parametrize("state, message", [
    (None, "state version None is not 1"),
    ([], r"state version \[\] is not 1"),
    ({"version": 1}, "state lacks"),
    ("position", "state version 'position' is not 1"),
    ({"position": -4}, "position=-4, not a non-negative integer"),
    ({"position": 2.0}, "position=2.0, not a non-negative integer"),
    ({"position": 6}, "position=6, not a multiple of the global batch 4"),
])
def test_a_state_it_cannot_continue_from_is_refused(tmp_path, state, message):
    """`None` or a list raised AttributeError, a negative position a numpy error deep in the reading."""
    out = tmp_path / "out"
    _commit(out, 1, 12)
    reader = FollowReader(str(out), batch_size=4)
    if isinstance(state, dict) and "position" in state:
        state = {**reader.state_dict(), **state}
    with pytest.raises(ValueError, match=message):
        reader.load_state_dict(state)
    assert reader.state_dict()["position"] == 0


def test_new_windows_are_indexed_without_reading_the_old_shards_again(tmp_path):
    """Every poll re-read every shard's footer (a growing stream's 10,000th window cost 10,000 reads);
    now only the new windows' shards are opened: a shard already read may even be gone."""
    out = tmp_path / "out"
    _commit(out, 1, 4)
    reader = FollowReader(str(out), batch_size=4, poll_seconds=0.02, timeout=2.0)
    iterator = iter(reader)
    assert sorted(_firsts([next(iterator)])) == [1000, 1001, 1002, 1003]
    (out / "live" / "w0001-p000-part-00000-of-00001.parquet").unlink()  # e.g. retention removed it
    _commit(out, 2, 4)
    assert sorted(_firsts([next(iterator)])) == [2000, 2001, 2002, 2003]
