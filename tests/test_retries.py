"""Every side-effecting step gives the same result when the runner runs it twice.

Dataflow retries a failed bundle (up to 4 times in batch) and Dask reruns the tasks of a lost worker,
so each DoFn that writes files is driven here the way a retry runs it: the same input processed
again after a complete first attempt, after a first attempt that failed part way, and by two
attempts at once. The files must be those of one clean attempt: no second copy of a record, no half
file, no temporary file left behind. (The batch commit has its own fault-injection tests in
`tests/test_output.py`.)
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from easydata.config import DatasetConfig, SaveStageConfig
from easydata.ops.sharding import PieceInfo, serialize_schema
from easydata.io.sources import plan_splits
from easydata.run.streaming import commit_window
from tests.conftest import make_texts, write_jsonl


def _files(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _drain(iterator: Any) -> list[Any]:
    return list(iterator or ())


def _plain(output: Any) -> Any:
    """A DoFn output as comparable data (a tagged output as its tag and value)."""
    return (output.tag, output.value) if hasattr(output, "tag") else repr(output)


def _read_fn(tmp_path: Path):
    from easydata.run.staged_units import write_units
    from transforms.read import _ReadSettings, _ReadSplitsFn

    write_jsonl(tmp_path / "in" / "a.jsonl", [{"text": t} for t in make_texts(30)])
    with open(tmp_path / "in" / "a.jsonl", "ab") as f:
        f.write(b'{"text": \n{"body": "no text"}\n')  # two dead letters
    dataset = DatasetConfig(name="web", data_files=str(tmp_path / "in" / "a.jsonl"))
    unit = [plan_splits(dataset)[0]]
    write_units(str(tmp_path / "staging"), "web", [unit])  # where the reading step looks its units up
    fn = _ReadSplitsFn(_ReadSettings(dataset=dataset, batch_size=8, max_document_bytes=None,
                                     staging=str(tmp_path / "staging"), progress_dir=None, messages_field="messages",
                                     checkpoint=True))
    fn.setup()
    return fn, unit[0].index


def test_reading_a_work_unit_twice_writes_the_same_dead_letters_and_checkpoint(tmp_path):
    fn, unit = _read_fn(tmp_path)
    first = _drain(fn.process(unit))
    after_one = _files(tmp_path / "staging")
    assert any(name.startswith("rejected/web/") for name in after_one)
    second = _drain(fn.process(unit))  # the retry
    assert _files(tmp_path / "staging") == after_one
    assert [_plain(x) for x in second] == [_plain(x) for x in first]  # same batches, counters, file names


def test_two_attempts_of_one_step_at_once_leave_one_whole_file(tmp_path):
    """Two attempts writing the same dead letters concurrently (a duplicate task): each writes its own
    temporary file and renames it, so the result is one complete file, never an interleaving."""
    from easydata.io.dead_letters import write_dead_letters
    from easydata.io.sources import Reject

    rejects = [Reject("web", "in.jsonl", i, "malformed JSON", "x" * 150) for i in range(5000)]
    threads = [threading.Thread(target=write_dead_letters, args=(str(tmp_path), "rejected/web/split-00000.jsonl",
                                                                 rejects)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = (tmp_path / "rejected" / "web" / "split-00000.jsonl").read_text().splitlines()
    assert len(lines) == 5000 and sorted(_files(tmp_path)) == ["rejected/web/split-00000.jsonl"]


def test_sorting_and_assembling_twice_give_the_same_files(tmp_path):
    from easydata.ops.sharding import HASH_COLUMN, KEY_COLUMN
    from transforms.write import _AssembleShardFn, _SortGroupFn

    rows = pa.record_batch({"input_ids": pa.array([[1, 2], [3], [4, 5, 6]], pa.list_(pa.int32())),
                            HASH_COLUMN: pa.array([3, 1, 2], pa.uint64()), KEY_COLUMN: ["c", "a", "b"]})
    staging = tmp_path / "staging"
    sort = _SortGroupFn("web", str(staging))
    (group,) = _drain(sort.process((0, [rows])))
    once = _files(staging)
    assert _drain(sort.process((0, [rows]))) == [group] and _files(staging) == once
    piece = PieceInfo(dataset="web", shard=0, num_shards=1, group=0, path=group.path, rows=3,
                      schema=serialize_schema(rows.schema))
    assemble = _AssembleShardFn("web", SaveStageConfig(num_shards=1), str(staging), None)
    schema = pa.schema([rows.schema.field("input_ids")])
    (shard,) = _drain(assemble.process((0, [piece]), schema))
    once = _files(staging)
    (again,) = _drain(assemble.process((0, [piece]), schema))
    assert again == shard and _files(staging) == once


def test_group_files_of_a_retried_bundle_are_not_read_twice(tmp_path):
    """A bundle that failed after writing some group files is retried: the files of the failed attempt
    are never handed on (a runner drops a failed attempt's outputs), so no row is grouped twice."""
    from easydata.io.compact_rows import decode_rows, encode_rows
    from transforms.group_files import _WriteGroupFilesFn, _read_group

    rows = encode_rows(pa.record_batch({"x": pa.array(list(range(10)))}))
    fn = _WriteGroupFilesFn(str(tmp_path / "groups"))
    fn.start_bundle()
    _drain(fn.process((7, rows)))
    # The attempt dies here (no finish_bundle): its file exists but was never emitted.
    fn.start_bundle()
    _drain(fn.process((7, rows)))
    emitted = [value.value for value in fn.finish_bundle()]
    assert len(emitted) == 1
    group, batches = _read_group((7, [path for _, path in emitted]), decode_rows)
    assert group == 7 and sum(b.num_rows for b in batches) == 10


def test_a_streaming_window_commit_retried_after_any_step_completes_it(tmp_path):
    """The window's files are moved, then the manifest rewritten: a retry after the moves (before the
    manifest) used to fail on the already-moved files; after the manifest, it is a no-op."""
    out = tmp_path / "out"
    staging = out / ".easydata-tmp-stream"
    base = {"config": {}, "fingerprint": "f", "tokenizer": {}, "schema": {"columns": {}}, "output_format": "parquet",
            "compression": "zstd"}

    def stage(window: str) -> list[tuple[str, str]]:
        (staging / "live").mkdir(parents=True, exist_ok=True)
        (staging / "live" / f"{window}.parquet").write_bytes(window.encode())
        return [(str(staging / "live" / f"{window}.parquet"), f"live/{window}.parquet")]

    def commit(window: str, moves: list[tuple[str, str]]) -> dict[str, Any]:
        shard = {"path": f"live/{window}.parquet", "rows": 1, "tokens": 2, "padding_tokens": 0, "bytes": 3}
        return commit_window(str(out), window=f"live/{window}", start=0, end=60, moves=moves, rejected_files=[],
                             base=base, outputs={"live": {"shards": [shard], "documents_in": 1,
                                                          "documents_written": 1, "documents_rejected": 0}})

    commit("w1", stage("w1"))
    moves = stage("w2")
    from easydata.run.output import move_into_place

    move_into_place(str(out), moves)  # the first attempt died after its moves, before the manifest
    manifest = commit("w2", moves)     # the retry
    assert [w["id"] for w in manifest["windows"]] == ["live/w1", "live/w2"]
    assert commit("w2", moves) == manifest  # and again, after the manifest: nothing changes
    assert sorted(_files(out)) == ["live/w1.parquet", "live/w2.parquet", "manifest.json"]


@pytest.mark.parametrize("fail_after", [1, 2])
def test_checkpoint_batches_written_twice_are_one_file(tmp_path, fail_after):
    from easydata.run.checkpoint import batch_path, read_batch, write_batch

    rows = pa.record_batch({"input_ids": pa.array([[1, 2, 3]] * 4, pa.list_(pa.int32()))})
    path = batch_path(str(tmp_path), "web", 0, 0)
    for _ in range(fail_after):
        write_batch(path, rows, {"documents": 4})
    read, info = read_batch(path)
    assert read.equals(rows) and info == {"documents": 4}
    assert [p.name for p in Path(path).parent.iterdir()] == ["b00000.arrow"]
