"""Grouping through files: `GroupFileWriter` / `read_group_files` keep every row of every group, and
`GroupBatchesViaFiles` groups like `beam.GroupByKey`; a whole packed job writes the same bytes either way."""

from __future__ import annotations

import collections
import hashlib
import time
from pathlib import Path

import apache_beam as beam
import pyarrow as pa
from apache_beam.testing.util import assert_that

from beam_pipelines.batch import build_batch_pipeline
from beam_pipelines.runners import OfflineDirectRunner
from easydata.config import PipelineConfig
from easydata.io.group_files import GroupFileWriter, read_group_files
from easydata.run.run_plan import prepare_run
from tests.conftest import make_texts, write_jsonl


def _batch(values: list[int], extra: object = None) -> pa.RecordBatch:
    columns = {"x": pa.array(values, type=pa.int64())}
    if extra is not None:  # an additional field whose type differs between batches
        columns["extra"] = pa.array([extra] * len(values))
    return pa.RecordBatch.from_pydict(columns)


def test_writer_keeps_every_row_of_every_group_across_schema_changes(tmp_path: Path) -> None:
    writer = GroupFileWriter(str(tmp_path / "groups"))
    writer.write(0, _batch([1, 2]))
    writer.write(1, _batch([3]))
    writer.write(0, _batch([4], extra="a"))  # new schema: a second file for group 0
    writer.write(0, _batch([5, 6], extra="b"))
    writer.write(1, _batch([7], extra=8))
    files = writer.close()
    assert writer.close() == []  # nothing written since
    by_group = collections.defaultdict(list)
    for group, path in files:
        by_group[group].append(path)
        assert Path(path).is_file()
    assert sorted((g, len(p)) for g, p in by_group.items()) == [(0, 2), (1, 2)]
    rows = {g: sorted(v for b in read_group_files(paths) for v in b.column("x").to_pylist())
            for g, paths in by_group.items()}
    assert rows == {0: [1, 2, 4, 5, 6], 1: [3, 7]}


def _grouped_rows(element: tuple[int, list[pa.RecordBatch]]) -> tuple[int, list[int]]:
    group, batches = element
    return group, sorted(v for b in batches for v in b.column("x").to_pylist())


def test_transform_groups_like_group_by_key(tmp_path: Path) -> None:
    from transforms.group_files import GroupBatchesViaFiles

    pairs = [(i % 3, _batch(list(range(10 * i, 10 * i + i + 1)))) for i in range(12)]
    expected = collections.defaultdict(list)
    for group, batch in pairs:
        expected[group].extend(batch.column("x").to_pylist())
    expected = sorted((g, sorted(v)) for g, v in expected.items())

    def check(actual: list[tuple[int, list[int]]]) -> None:
        assert sorted(actual) == expected

    with beam.Pipeline(runner=OfflineDirectRunner()) as pipeline:
        grouped = (pipeline | beam.Create(pairs) | GroupBatchesViaFiles(str(tmp_path / "groups"))
                   | beam.Map(_grouped_rows))
        assert_that(grouped, check)
    assert list((tmp_path / "groups").glob("*.arrow"))  # the rows went through files


def _digest(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file() and p.name != "manifest.json"}


def test_packed_job_writes_the_same_bytes_through_files_or_group_by_key(tokenizer_dir, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "a.jsonl", ({"text": t} for t in make_texts(300, seed=5, max_words=80)))
    outputs = {}
    for via_files in (True, False):
        out = tmp_path / f"files-{via_files}"
        config = PipelineConfig.from_dict({
            "default_tokenizer": str(tokenizer_dir),
            "datasets": [{"name": "web", "data_files": str(data)}],
            "pack": {"enabled": True, "seq_length": 48, "strategy": "first_fit"},
            "save": {"output_dir": str(out), "num_shards": 3, "row_group_size": 16},
        })
        plan = prepare_run(config, group_bytes=4096, split_bytes=8192)  # several groups and splits
        assert plan.datasets[0].num_groups > 1
        with beam.Pipeline(runner=OfflineDirectRunner()) as pipeline:
            build_batch_pipeline(pipeline, config, plan, time.time(), group_via_files=via_files)
        outputs[via_files] = _digest(out)
        assert not list(out.glob(".easydata-*"))  # staging, group files included, removed at commit
    assert len(outputs[True]) == 3 and outputs[True] == outputs[False]
