"""Work units (`easydata.io.sources.work_units`) and reading one (`read_splits`): whole small files are read
together in batches that run across them, a split of a large file stays a unit of its own, and a resumed run
takes a checkpointed unit only for the same splits."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from easydata.config import DatasetConfig, PipelineConfig
from easydata.io.sources import (DEFAULT_SPLITS, MAX_UNIT_FILES, InputSplit, Reject, plan_splits, read_split, read_splits,
                                 work_units)
from easydata.run.checkpoint import write_unit
from easydata.run.counters import RunCounters
from easydata.run.run_plan import DatasetPlan, prepare_run, resumable_units
from easydata.run.staged_units import StagedUnits, iter_units, write_units
from tests.conftest import make_texts, write_jsonl


def _split(index: int, size: int, whole: bool) -> InputSplit:
    return InputSplit(dataset="d", path=f"f{index}", type="txt", start=0 if whole else 1,
                      end=None if whole else size + 1, index=index, size=size)


def _flat(units: list[list[InputSplit]]) -> list[int]:
    return [split.index for unit in units for split in unit]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3000), st.booleans()), max_size=120), st.integers(0, 40_000))
def test_units_keep_split_order_and_group_only_small_whole_files(specs: list[tuple[int, bool]],
                                                                 split_bytes: int) -> None:
    splits = [_split(i, size, whole) for i, (size, whole) in enumerate(specs)]
    units = work_units(DatasetConfig(name="d", data_files="x"), splits, split_bytes)
    assert _flat(units) == list(range(len(splits)))  # every split once, in order
    unit_bytes = min(split_bytes, sum(s.size for s in splits) // DEFAULT_SPLITS)  # at least ~16 units
    small = [s.start == 0 and s.end is None and s.size < unit_bytes for s in splits]
    for unit in units:
        if len(unit) > 1:  # only small whole files share a unit, within its bounds
            assert all(small[s.index] for s in unit)
            assert sum(s.size for s in unit) <= unit_bytes and len(unit) <= MAX_UNIT_FILES
    for first, second in zip(units, units[1:]):  # greedy: the next small file did not fit
        if all(small[s.index] for s in first) and small[second[0].index]:
            assert sum(s.size for s in first) + second[0].size > unit_bytes or len(first) == MAX_UNIT_FILES


def test_no_unit_bytes_or_a_row_limit_keep_the_old_units() -> None:
    splits = [_split(i, 10, True) for i in range(5)]
    assert work_units(DatasetConfig(name="d", data_files="x"), splits) == [[s] for s in splits]
    limited = DatasetConfig(name="d", data_files="x", num_rows=3)
    assert work_units(limited, splits, 1000) == [splits]
    assert work_units(limited, [], 1000) == []


def test_a_unit_holds_at_most_max_unit_files_and_a_sixteenth_of_the_bytes() -> None:
    dataset = DatasetConfig(name="d", data_files="x")
    splits = [_split(i, 1, True) for i in range(5000)]  # a sixteenth: 312 files
    assert [len(u) for u in work_units(dataset, splits, 10**9)] == [MAX_UNIT_FILES] * 19 + [136]
    splits = [_split(i, 10, True) for i in range(64)]  # a sixteenth: 4 files
    assert [len(u) for u in work_units(dataset, splits, 10**9)] == [4] * 16
    assert [len(u) for u in work_units(dataset, splits, 30)] == [3] * 21 + [1]


def test_planned_files_small_and_large(tmp_path: Path) -> None:
    """Small files together, a large file's byte ranges each alone, the small files after it together again."""
    for i in range(4):
        (tmp_path / f"a{i}.txt").write_text(f"line {i}\n" * 20)  # 140 bytes
    (tmp_path / "b.txt").write_text("a longer line of text\n" * 1000)  # 22,000 bytes: split by bytes
    for i in range(3):
        (tmp_path / f"c{i}.txt").write_text(f"line {i}\n" * 20)
    dataset = DatasetConfig(name="d", data_files=str(tmp_path / "*.txt"))
    splits = plan_splits(dataset, target_bytes=1000)
    units = work_units(dataset, splits, 1000)
    names = [[Path(s.path).name for s in unit] for unit in units]
    assert names[0] == ["a0.txt", "a1.txt", "a2.txt", "a3.txt"]
    assert all(unit == ["b.txt"] for unit in names[1:-1]) and len(names) == 2 + 22
    assert names[-1] == ["c0.txt", "c1.txt", "c2.txt"]


# ---- reading a unit --------------------------------------------------------------------------------------

def _read(splits: list[InputSplit], dataset: DatasetConfig, batch_size: int, *, together: bool,
          limit: Optional[int] = None) -> tuple[list[list[str]], list[tuple[str, str]], list[Reject]]:
    """Batches' keys, every `(key, text)`, rejects: all splits in one `read_splits`, or each on its own."""
    rejects: list[Reject] = []
    parts = [splits] if together else [[s] for s in splits]
    batches = [batch for part in parts for batch in read_splits(part, dataset, batch_size=batch_size, limit=limit,
                                                                  rejects=rejects)]
    return [b.keys for b in batches], [(k, t) for b in batches for k, t in zip(b.keys, b.texts)], rejects


def test_batches_run_across_small_files_with_the_same_documents_and_dead_letters(tmp_path: Path) -> None:
    texts = make_texts(40, seed=5)
    for i, text in enumerate(texts):
        (tmp_path / f"doc{i:02d}.txt").write_text(text)
    # dead-lettered, saying which file (not starting with FF FE: a UTF-16 byte-order mark, which says so instead)
    (tmp_path / "doc10.txt").write_bytes(b"\xc3\x28 not UTF-8")
    (tmp_path / "doc20.txt").write_text("   \n")  # empty text
    dataset = DatasetConfig(name="d", data_files=str(tmp_path / "*.txt"), sample_by="document")
    splits = plan_splits(dataset)
    batches, documents, rejects = _read(splits, dataset, 8, together=True)
    one_by_one, alone_documents, alone_rejects = _read(splits, dataset, 8, together=False)
    assert documents == alone_documents and len(documents) == 38
    assert rejects == alone_rejects
    assert [(Path(r.source).name, r.reason.split(" at ")[0]) for r in rejects] == [
        ("doc10.txt", "invalid UTF-8"), ("doc20.txt", "empty text")]
    assert [len(b) for b in batches] == [8, 8, 8, 8, 6]  # full batches, where a file was a batch each
    assert len(one_by_one) == 38
    assert len({key.split("@")[0] for key in batches[0]}) == 8  # keys name each document's own file


def test_a_row_limit_and_a_corrupt_file_inside_a_unit(tmp_path: Path) -> None:
    for i in range(4):
        write_jsonl(tmp_path / f"p{i}.jsonl", [{"text": f"file {i} record {j}"} for j in range(3)])
    (tmp_path / "p1.parquet").write_bytes(b"not parquet at all")  # read between p1.jsonl and p2.jsonl
    dataset = DatasetConfig(name="d", data_files=str(tmp_path / "p*"))
    splits = plan_splits(dataset)
    _, documents, rejects = _read(splits, dataset, 5, together=True)
    assert [t for _, t in documents] == [f"file {i} record {j}" for i in range(4) for j in range(3)]
    assert len(rejects) == 1 and Path(rejects[0].source).name == "p1.parquet" and rejects[0].partial_input
    _, limited, limited_rejects = _read(splits, dataset, 5, together=True, limit=7)  # 6 documents, 1 reject
    assert [t for _, t in limited] == [f"file {i} record {j}" for i in range(2) for j in range(3)]
    assert len(limited_rejects) == 1


def test_read_split_is_read_splits_of_one(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", [{"text": t} for t in make_texts(30, seed=2)])
    dataset = DatasetConfig(name="d", data_files=str(path))
    (split,) = plan_splits(dataset)
    one = [(b.keys, b.texts) for b in read_split(split, dataset, batch_size=7)]
    assert one == [(b.keys, b.texts) for b in read_splits([split], dataset, batch_size=7)] and len(one) == 5


# ---- resuming --------------------------------------------------------------------------------------------

def _plan(dataset: DatasetConfig, splits: list[InputSplit], split_bytes: int) -> DatasetPlan:
    return DatasetPlan(name=dataset.name, splits=splits, tokenizer=None, tokenizer_info=None, input_bytes=0,
                       num_groups=1, pad_id=0, split_bytes=split_bytes)


def test_a_resumed_run_takes_a_unit_only_for_the_same_splits(tmp_path: Path) -> None:
    for i in range(48):  # 3 files are a sixteenth of the bytes: a unit
        (tmp_path / f"t{i:02d}.txt").write_text(f"text {i:02d}\n")
    dataset = DatasetConfig(name="d", data_files=str(tmp_path / "*.txt"))
    splits = plan_splits(dataset)
    staging = str(tmp_path / "staging")
    stats = RunCounters.of("d", documents_in=1).to_json()
    write_unit(staging, "d", 0, batches=0, stats=stats, rejected_file=None)  # one split, as units were
    write_unit(staging, "d", 1, batches=0, stats=stats, rejected_file=None, splits=[1])
    # A unit per split: both are taken.
    assert [c.unit for c in resumable_units(staging, _plan(dataset, splits, 0), dataset)] == [0, 1]
    assert [len(u) for u in work_units(dataset, splits, 2**20)] == [3] * 16
    # The three files in one unit (id 0): unit 0 of the old run read only split 0, so it is read again.
    assert resumable_units(staging, _plan(dataset, splits, 2**20), dataset) == ()
    write_unit(staging, "d", 0, batches=0, stats=stats, rejected_file=None, splits=[0, 1, 2])
    (taken,) = resumable_units(staging, _plan(dataset, splits, 2**20), dataset)
    assert (taken.unit, taken.splits) == (0, (0, 1, 2))


# ---- the pipeline --------------------------------------------------------------------------------------

def _digest(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("part-*"))}


def test_many_small_files_give_the_output_of_a_unit_per_file(tmp_path: Path, tokenizer_dir: Path) -> None:
    """The same shards whether each small file is a unit (split size 1 byte: no file is small) or they are
    read together, with fewer checkpointed units and the same counts."""
    from beam_pipelines.batch import run_batch

    for i, text in enumerate(make_texts(60, seed=9)):
        (tmp_path / "in" / f"{i // 20}").mkdir(parents=True, exist_ok=True)
        (tmp_path / "in" / f"{i // 20}" / f"doc{i:02d}.txt").write_text(text)
    (tmp_path / "in" / "1" / "empty.txt").write_text("\n")

    def config(out: str) -> PipelineConfig:
        return PipelineConfig.from_dict({
            "seed": 3, "default_tokenizer": str(tokenizer_dir),
            "datasets": [{"name": "docs", "data_files": str(tmp_path / "in" / "*" / "*.txt"), "sample_by": "document"}],
            "tokenize": {"batch_size": 16},
            "pack": {"enabled": True, "seq_length": 64},
            "save": {"output_dir": str(tmp_path / out), "num_shards": 2}})

    assert prepare_run(config("plan-apart"), split_bytes=1).unit_count == 61
    assert prepare_run(config("plan-together")).unit_count <= 30  # ~16-21: a sixteenth of the bytes at most
    apart = run_batch(config("apart"), ["--direct_num_workers=1"], show_progress=False, split_bytes=1).manifest
    together = run_batch(config("together"), ["--direct_num_workers=1"], show_progress=False).manifest
    assert _digest(tmp_path / "together") == _digest(tmp_path / "apart") and len(_digest(tmp_path / "apart")) == 2
    for key in ("documents_in", "documents_written", "documents_rejected", "totals"):
        assert together[key] == apart[key], key
    assert together["documents_in"] == 61 and together["documents_rejected"] == 1
    rejected = [json.loads(line) for rel in together["rejected_files"]
                for line in (tmp_path / "together" / rel).read_text().splitlines()]
    assert [(Path(r["source"]).name, r["reason"]) for r in rejected] == [("empty.txt", "empty text")]


def test_the_job_graph_does_not_grow_with_the_input_files(tmp_path: Path, tokenizer_dir: Path) -> None:
    """Work units go to the graph as ids, the splits to the staging directory: 100,000 files made a 4 MB
    graph (Dataflow refuses 10 MB), every split in it three times (the read's `Create` twice, the commit's
    plan once), and each worker re-pickled it to build the reading step."""
    from beam_pipelines.batch import build_batch_job

    sizes = {}
    for count in (40, 1000):
        for i in range(count):
            (tmp_path / f"in{count}").mkdir(exist_ok=True)
            (tmp_path / f"in{count}" / f"document-{i:05d}.txt").write_text(f"document {i}: some text to read\n")
        config = PipelineConfig.from_dict({
            "seed": 3, "default_tokenizer": str(tokenizer_dir),
            "datasets": [{"name": "docs", "data_files": str(tmp_path / f"in{count}" / "*.txt"),
                          "sample_by": "document"}],
            "save": {"output_dir": str(tmp_path / f"out{count}")}})
        pipeline, plan = build_batch_job(config, [])
        assert len(plan.datasets[0].splits) == count
        sizes[count] = len(pipeline.to_runner_api().SerializeToString())
    assert sizes[1000] - sizes[40] < 10_000, sizes  # 960 more files: ~40 bytes each per copy before


@pytest.mark.parametrize("where", ["local", "memory"])
def test_staged_units_round_trip_one_unit_at_a_time(tmp_path: Path, where: str) -> None:
    """What the launcher records is what a worker reads back, each unit on its own (a ranged read), on a
    local disk and on an fsspec filesystem; written twice, the same bytes."""
    import fsspec

    staging = str(tmp_path / "staging") if where == "local" else f"memory://staging-{tmp_path.name}"
    splits = [InputSplit(dataset="d", path=f"gs://bucket/dir/file-{i:03d}.txt", type="txt", index=i, size=i * 10,
                         key_name=f"file-{i:03d}.txt", version=f"generation={i}") for i in range(50)]
    splits.append(InputSplit(dataset="d", path="/data/big.jsonl", type="jsonl", start=100, end=200, index=50,
                             size=100, key_name="big.jsonl", version="size=300,modified=1.5"))
    units = work_units(DatasetConfig(name="d", data_files="x"), splits, 100)
    assert 1 < len(units) < len(splits)
    write_units(staging, "d", units)
    fs, root = fsspec.core.url_to_fs(staging)
    first = {p: fs.cat_file(p) for p in fs.find(root)}
    staged = StagedUnits(staging, "d")
    assert len(staged) == len(units)
    for unit in reversed(units):  # any order: each by its id
        assert staged[unit[0].index] == unit
    assert list(iter_units(staging, "d")) == units
    write_units(staging, "d", units)
    assert {p: fs.cat_file(p) for p in fs.find(root)} == first
