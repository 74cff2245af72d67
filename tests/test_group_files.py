"""Grouping through files: `GroupFileWriter` / `read_group_files` keep every element of every group, and
`GroupViaFiles` groups like `beam.GroupByKey`; a whole packed job writes the same bytes either way."""

from __future__ import annotations

import collections
import hashlib
import time
from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that

from beam_pipelines.batch import build_batch_pipeline
from beam_pipelines.runners import OfflineDirectRunner
from easydata.config import PipelineConfig
from easydata.io.compact_rows import decode_rows, encode_rows
from easydata.io.group_files import GroupFileWriter, read_group_files
from easydata.run.run_plan import prepare_run
from tests.conftest import make_texts, write_jsonl


def _batch(values: list[int], extra: object = None) -> pa.RecordBatch:
    columns = {"x": pa.array(values, type=pa.int64())}
    if extra is not None:  # an additional field whose type differs between batches
        columns["extra"] = pa.array([extra] * len(values))
    return pa.RecordBatch.from_pydict(columns)


def test_writer_keeps_every_element_of_every_group_across_schema_changes(tmp_path: Path) -> None:
    writer = GroupFileWriter(str(tmp_path / "groups"))
    writer.write(0, encode_rows(_batch([1, 2])))
    writer.write(1, encode_rows(_batch([3])))
    writer.write(0, encode_rows(_batch([4], extra="a")))  # another schema: each element says its own
    writer.write(0, b"")  # an empty element is an element too
    writer.write(0, encode_rows(_batch([5, 6], extra="b")))
    writer.write(1, encode_rows(_batch([7], extra=8)))
    files = writer.close()
    assert writer.close() == []  # nothing written since
    by_group = collections.defaultdict(list)
    for group, path in files:
        by_group[group].append(path)
        assert Path(path).is_file()
    writer.write(1, encode_rows(_batch([9])))  # after a close: a new file
    for group, path in writer.close():
        by_group[group].append(path)
    assert sorted((g, len(p)) for g, p in by_group.items()) == [(0, 1), (1, 2)]
    elements = {g: list(read_group_files(paths)) for g, paths in by_group.items()}
    assert b"" in [bytes(e) for e in elements[0]]
    rows = {g: sorted(v for e in found if len(e) for v in decode_rows(e).column("x").to_pylist())
            for g, found in elements.items()}
    assert rows == {0: [1, 2, 4, 5, 6], 1: [3, 7, 9]}


def _grouped_rows(element: tuple[int, list[bytes]]) -> tuple[int, list[int]]:
    group, encoded = element
    return group, sorted(v for e in encoded for v in decode_rows(e).column("x").to_pylist())


def test_transform_groups_like_group_by_key(tmp_path: Path) -> None:
    from transforms.group_files import GroupViaFiles

    batches = [(i % 3, _batch(list(range(10 * i, 10 * i + i + 1)))) for i in range(12)]
    pairs = [(group, encode_rows(batch)) for group, batch in batches]
    expected = collections.defaultdict(list)
    for group, batch in batches:
        expected[group].extend(batch.column("x").to_pylist())
    expected = sorted((g, sorted(v)) for g, v in expected.items())

    def check(actual: list[tuple[int, list[int]]]) -> None:
        assert sorted(actual) == expected

    with beam.Pipeline(runner=OfflineDirectRunner()) as pipeline:
        grouped = (pipeline | beam.Create(pairs) | GroupViaFiles(str(tmp_path / "groups"))
                   | beam.Map(_grouped_rows))
        assert_that(grouped, check)
    assert list((tmp_path / "groups").glob("*.rows"))  # the rows went through files


def _digest(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file() and p.name != "manifest.json"}


@pytest.mark.slow
@pytest.mark.parametrize("group_bytes", [4096, 64], ids=["groups", "many-groups-with-dictionary"])
def test_packed_job_writes_the_same_bytes_through_files_or_group_by_key(tokenizer_dir, tmp_path: Path,
                                                                        group_bytes: int) -> None:
    """Also with thousands of groups, where the shuffle compresses with a dictionary
    (`easydata.ops.shuffle_dictionary`): Beam's GroupByKey decodes with it as group files do."""
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
        plan = prepare_run(config, group_bytes=group_bytes, split_bytes=8192)  # several groups and splits
        assert plan.datasets[0].num_groups > 1
        assert (plan.shuffle_dictionary is not None) == (plan.datasets[0].num_groups >= 1024) == (group_bytes == 64)
        with beam.Pipeline(runner=OfflineDirectRunner()) as pipeline:
            build_batch_pipeline(pipeline, config, plan, time.time(), group_via_files=via_files)
        outputs[via_files] = _digest(out)
        assert not list(out.glob(".easydata-*"))  # staging, group files included, removed at commit
    assert len(outputs[True]) == 3 and outputs[True] == outputs[False]
