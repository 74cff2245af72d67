"""Output shards load with the tools users already have: pyarrow, pandas, DuckDB, HF `datasets`."""

from __future__ import annotations

from pathlib import Path

import pytest

from beam_pipelines.batch import run_batch
from easydata.config import PipelineConfig
from tests.conftest import make_texts, write_jsonl


@pytest.fixture(scope="module")
def parquet_output(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("compat")
    write_jsonl(root / "a.jsonl", ({"text": t, "source": f"s{i % 3}"} for i, t in enumerate(make_texts(40))))
    config = PipelineConfig.from_dict({
        "default_tokenizer": str(tokenizer_dir),
        "datasets": [{"name": "web", "data_files": str(root / "a.jsonl"), "additional_fields": ["source"]}],
        "save": {"output_dir": str(root / "out"), "num_shards": 2},
    })
    run_batch(config, ["--direct_num_workers=1"], show_progress=False)
    return root / "out"


def test_pandas_reads_shards(parquet_output):
    pd = pytest.importorskip("pandas")
    frame = pd.concat(pd.read_parquet(p) for p in sorted((parquet_output / "web").glob("*.parquet")))
    assert len(frame) == 40
    assert list(frame.columns) == ["input_ids", "attention_mask", "source"]
    assert all(len(ids) == len(mask) for ids, mask in zip(frame["input_ids"], frame["attention_mask"]))


def test_duckdb_queries_shards(parquet_output):
    duckdb = pytest.importorskip("duckdb")
    rows, tokens = duckdb.sql(
        f"SELECT count(*), sum(len(input_ids)) FROM read_parquet('{parquet_output}/web/*.parquet')").fetchall()[0]
    import json

    manifest = json.loads((parquet_output / "manifest.json").read_text())
    assert (rows, tokens) == (manifest["totals"]["rows"], manifest["totals"]["tokens"])


def test_hf_datasets_loads_shards(parquet_output, monkeypatch, tmp_path):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    ds = datasets.load_dataset("parquet", data_files=str(parquet_output / "web" / "*.parquet"), split="train",
                               cache_dir=str(tmp_path / "hf-cache"))
    assert ds.num_rows == 40
    assert ds.features["input_ids"].feature.dtype == "int32"
