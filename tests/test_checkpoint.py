"""`easydata.run.checkpoint`: what a resumed run may trust, without Beam (local disk and `memory://`)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from easydata.run.counters import RunCounters
from easydata.run.checkpoint import unfinished_runs, batch_path, completed_units, read_batch, run_signature, \
    write_batch, write_run_info, write_unit
from easydata.run.output import staging_dir
from easydata.io.sources import InputSplit


def _splits(size: int = 100) -> dict[str, list[InputSplit]]:
    return {"web": [InputSplit("web", "/data/a.jsonl", "jsonl", 0, 50, 0, 50, "a.jsonl"),
                    InputSplit("web", "/data/a.jsonl", "jsonl", 50, None, 1, size - 50, "a.jsonl")]}


def test_signature_tracks_config_and_input_splits():
    base = run_signature("cfg1", _splits())
    assert base == run_signature("cfg1", _splits())
    assert base != run_signature("cfg2", _splits())
    assert base != run_signature("cfg1", _splits(size=120))  # an input file changed size


@pytest.fixture(params=["local", "memory"])
def staging(request, tmp_path, memory_fs):
    root = str(tmp_path / "out") if request.param == "local" else "memory://out"
    return root, staging_dir(root, "run1")


def test_batch_round_trip_keeps_rows_schema_metadata_and_info(staging):
    _, stage = staging
    rows = pa.RecordBatch.from_pydict({"input_ids": pa.array([[1, 2], [3]], pa.list_(pa.int32())),
                                       "id": pa.array([7, None], pa.int64())})
    rows = rows.replace_schema_metadata({"origin": "test"})
    path = batch_path(stage, "web", 3, 0)
    write_batch(path, rows, {"chat_rejected": 2, "chat_rejected_file": "rejected/web/chat-x.jsonl"})
    back, info = read_batch(path)
    assert back.equals(rows) and back.schema.metadata == {b"origin": b"test"}
    assert info == {"chat_rejected": 2, "chat_rejected_file": "rejected/web/chat-x.jsonl"}


def test_a_unit_is_done_only_with_its_record_and_every_batch(staging):
    _, stage = staging
    rows = pa.RecordBatch.from_pydict({"input_ids": pa.array([[1]], pa.list_(pa.int32()))})
    stats = RunCounters.of("web", documents_in=5, documents_rejected=1, input_bytes=99).to_json()
    write_batch(batch_path(stage, "web", 0, 0), rows, {})
    assert completed_units(stage, "web", [0, 1]) == {}                    # no unit record yet
    write_unit(stage, "web", 0, batches=2, stats=stats, rejected_file="rejected/web/split-00000.jsonl")
    assert completed_units(stage, "web", [0, 1]) == {}                    # batch 1 still missing
    write_batch(batch_path(stage, "web", 0, 1), rows, {})
    write_unit(stage, "web", 1, batches=0, stats=RunCounters().to_json(), rejected_file=None)
    # A unit an older version recorded (its counters a flat dict) is read again, not loaded with lost counters.
    write_unit(stage, "web", 2, batches=0, stats={"documents_in": 0, "documents_rejected": 0}, rejected_file=None)
    done = completed_units(stage, "web", [0, 1, 2])
    assert sorted(done) == [0, 1]
    assert done[0].stats == stats and done[0].rejected_file == "rejected/web/split-00000.jsonl"
    assert [b.num_rows for b, _ in done[0].batches()] == [1, 1]


def test_unfinished_runs_are_listed_with_their_signatures(staging):
    root, stage = staging
    assert unfinished_runs(root) == []                                      # no output directory yet
    write_run_info(stage, "sig", "run1")
    write_run_info(staging_dir(root, "run2"), "other", "run2")
    assert sorted((r["run_id"], r["signature"]) for r in unfinished_runs(root)) == [("run1", "sig"), ("run2", "other")]
