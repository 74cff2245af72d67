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
