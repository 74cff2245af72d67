"""EasyData's `ShardedDataSource` names over our outputs (`easydata.reader.compat`)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from easydata.reader import ArrowShardedSource, AsyncDataLoader, ParquetShardedSource
from tests.conftest import write_synthetic_output

TOKENS = pa.list_(pa.int32())
SCHEMA = pa.schema([("input_ids", TOKENS), ("attention_mask", TOKENS)])


def _rows(n: int, first: int) -> list[dict]:
    return [{"input_ids": [first + i, 2], "attention_mask": [1, 1]} for i in range(n)]


@pytest.mark.parametrize("fmt, source", [("parquet", ParquetShardedSource), ("arrow", ArrowShardedSource)])
def test_an_output_directory_is_read_through_its_manifest(tmp_path: Path, fmt: str, source) -> None:
    """`ParquetShardedSource("out_dir")` listed `manifest.json` as a shard and crashed."""
    out = tmp_path / "out"
    write_synthetic_output(str(out), {"web": [_rows(3, 0), _rows(2, 100)], "code": [_rows(4, 200)]}, SCHEMA, fmt=fmt)
    (out / "rejected").mkdir()
    (out / "rejected" / "web.jsonl").write_text('{"reason": "x"}\n')
    every = source(str(out))
    assert every.num_shards() == 3 and all(name.endswith(f".{fmt}") for name in every.shard_names)
    assert sorted(row["input_ids"][0] for row in every) == [0, 1, 2, 100, 101, 200, 201, 202, 203]
    web = source(str(out), name="web")
    assert web.num_shards() == 2
    assert [row["input_ids"][0] for row in web.open_shard_at_row(web.shard_names[0], 1)] == [1, 2]
    assert source(str(out / "web" / f"*.{fmt}")).shard_names == web.shard_names  # a glob: the same shards
    with pytest.raises(ValueError, match="has no dataset 'chat'"):
        source(str(out), name="chat")
    batches = list(AsyncDataLoader(web, batch_size=2))
    assert [len(b["input_ids"]) for b in batches] == [2, 2, 1]


def test_huggingface_sharded_source_reads_a_local_directory_as_datasets_does(tmp_path: Path) -> None:
    """Before: `HuggingFaceShardedSource("/local/dir")` was looked up as a Hub id and refused."""
    import datasets
    import pyarrow.parquet as pq

    from easydata import HuggingFaceShardedSource
    from easydata.errors import InputError

    root = tmp_path / "my_dataset"
    (root / "data").mkdir(parents=True)
    pq.write_table(pa.table({"text": [f"train {i}" for i in range(7)]}), root / "data" / "train-00000-of-00001.parquet")
    pq.write_table(pa.table({"text": [f"test {i}" for i in range(3)]}), root / "data" / "test-00000-of-00001.parquet")
    (root / ".cache").mkdir()
    (root / ".cache" / "junk.parquet").write_bytes(b"not data")  # hidden: left out, as datasets does
    for split, n in (("train", 7), ("test", 3)):
        source = HuggingFaceShardedSource(str(root), split=split)
        rows = [row["text"] for name in source.shard_names for row in source.open_shard(name)]
        expected = datasets.load_dataset(str(root), split=split)["text"]
        assert rows == expected and len(rows) == n
    with pytest.raises(InputError, match="has no data files for split 'validation'"):
        HuggingFaceShardedSource(str(root), split="validation").shard_names


@pytest.mark.parametrize("row", [-1, 2.5, "1", True])
def test_a_start_row_that_is_not_a_row_is_refused(tmp_path: Path, row) -> None:
    """`open_shard_at_row(name, -1)` read the shard from its first row, 2.5 from row 2, without a word."""
    import numpy as np

    from easydata import JsonShardedSource

    out = tmp_path / "out"
    write_synthetic_output(str(out), {"web": [_rows(4, 0)]}, SCHEMA)
    (tmp_path / "a.jsonl").write_text("".join(f'{{"text": "t{i}"}}\n' for i in range(4)))
    for source in (ParquetShardedSource(str(out)), JsonShardedSource(str(tmp_path / "a.jsonl"))):
        name = source.shard_names[0]
        with pytest.raises(ValueError, match="`row` must be a non-negative integer"):
            list(source.open_shard_at_row(name, row))
        assert len(list(source.open_shard_at_row(name, np.int64(3)))) == 1


@pytest.mark.parametrize("batch_size", [2.5, True, 0])
def test_a_loader_batch_that_is_not_a_count_is_refused(tmp_path: Path, batch_size) -> None:
    """`AsyncDataLoader(source, batch_size=2.5)` gave one batch of every row."""
    out = tmp_path / "out"
    write_synthetic_output(str(out), {"web": [_rows(4, 0)]}, SCHEMA)
    with pytest.raises(ValueError, match="`batch_size` must be a positive integer"):
        AsyncDataLoader(ParquetShardedSource(str(out)), batch_size=batch_size)


def test_json_sharded_source_reads_pretty_printed_values_as_the_pipeline_does(tmp_path: Path) -> None:
    """A `.json` file of pretty-printed objects (one, or several as `jq` prints them) raised "not a JSON line"."""
    import json

    from easydata import JsonShardedSource

    records = [{"text": f"doc {i}", "n": i} for i in range(3)]
    (tmp_path / "one.json").write_text(json.dumps(records[0], indent=2))
    (tmp_path / "jq.json").write_bytes(b"\xef\xbb\xbf" + "\n".join(json.dumps(r, indent=2) for r in records).encode())
    assert list(JsonShardedSource(str(tmp_path / "one.json")).open_shard(str(tmp_path / "one.json"))) == records[:1]
    assert list(JsonShardedSource(str(tmp_path / "jq.json")).open_shard(str(tmp_path / "jq.json"))) == records
    (tmp_path / "bad.json").write_text(json.dumps(records[0], indent=2) + "\n{\n oops\n}")
    with pytest.raises(ValueError, match=r"bad\.json: not JSON lines, a JSON array or JSON values"):
        list(JsonShardedSource(str(tmp_path / "bad.json")).open_shard(str(tmp_path / "bad.json")))
