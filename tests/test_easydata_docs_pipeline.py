"""EasyData's pipeline.md, block by block, as written (only `easydel.data` -> `easydata`; bucket
URLs -> local directories; hub ids from a real offline Hugging Face cache): see tests/easydata_docs.py."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from easydata import (ConfigError, DatasetConfig, JsonShardedSource, ParquetShardedSource,
                      PipelineConfig, TokenizedShardedSource)
from easydata.compat.pipeline import BatchLoader, JobOutputSource
from easydata.core.protocols import ShardedDataSource
from tests.easydata_docs import DocsWorld, code_blocks

PAGE = "pipeline"


@pytest.fixture(scope="module")
def world(tmp_path_factory, mistral_tokenizer_dir) -> DocsWorld:
    return DocsWorld(tmp_path_factory.mktemp("pipeline"), mistral_tokenizer_dir)


def test_every_block_is_covered() -> None:
    assert len(code_blocks(PAGE)) == 17  # each has a test below


def test_overview_block_without_a_tokenizer_is_one_clear_error(world) -> None:
    """The page's first block names no tokenizer anywhere: tokenizing cannot start, and says why."""
    with pytest.raises(ConfigError, match="has no tokenizer and `default_tokenizer` is not set"):
        world.run(PAGE, 0)


def test_pipeline_config_with_every_stage(world) -> None:
    ns, _ = world.run(PAGE, 1)
    config = ns["config"]
    assert config.datasets[0].name == "dataset1" and config.load.batch_size == 8 and config.save.enabled
    # the page's own mix weights name datasets it does not have: validate() says so, all at once
    assert any("'ds1' is not a dataset" in p for p in config.validate())


def test_dataset_config_every_field(world) -> None:
    ns, _ = world.run(PAGE, 2, {"my_transform_fn": lambda example: example})
    ds = ns["config"]
    assert (ds.name, ds.type, ds.split, ds.num_rows, ds.save_path) == ("my_dataset", "parquet", "train", 10000,
                                                                       "./output/my_dataset")
    assert ds.tokenizer_kwargs == {"use_fast": True} and ds.format_fields == {"old_name": "new_name"}
    assert callable(ds.format_callback) and ds.additional_fields == ["metadata"]


@pytest.fixture(scope="module")
def staged(world) -> dict:
    """Blocks 1 and 3-8 in one namespace, as a reader follows the page's stage sections."""
    ns, _ = world.run(PAGE, 1)
    ns, _ = world.run(PAGE, 3, ns)
    return ns


def test_source_stage(world, staged) -> None:
    assert list(staged["sources"]) == ["dataset1"] and isinstance(staged["sources"]["dataset1"], ParquetShardedSource)


@pytest.mark.slow
def test_tokenize_pack_save_load_stages(world, staged) -> None:
    ns, _ = world.run(PAGE, 4, staged)
    tokenized = ns["pipeline"].get_data()["dataset1"]
    assert isinstance(tokenized, TokenizedShardedSource)
    with world.inside():
        first = next(iter(tokenized))
    assert "text" not in first and 0 < len(first["input_ids"]) <= 2048  # remove_columns, max_length
    ns, _ = world.run(PAGE, 5, ns)  # one dataset: nothing to mix
    assert ns["pipeline"].get_stages() == ["source", "tokenize", "mix"]
    ns, _ = world.run(PAGE, 6, ns)
    packed = ns["pipeline"].get_data()["dataset1"]
    assert isinstance(packed, JobOutputSource)
    with world.inside():
        rows = list(packed)
    assert rows and all(len(r["input_ids"]) == 2048 for r in rows)
    segments = np.array([r["segment_ids"] for r in rows])
    assert segments[:, 0].min() == 1
    ids = np.array([r["input_ids"] for r in rows])
    assert (ids[segments == 0] == 0).all()  # pad_token_id=0
    ns, _ = world.run(PAGE, 7, ns)
    out = os.path.join(world.work, "processed_data")
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    assert manifest["format"] == "parquet" and manifest["compression"] == "zstd"
    assert len(manifest["datasets"]["dataset1"]["shards"]) == 100 and manifest["schema"]["packed"]
    ns, _ = world.run(PAGE, 8, ns)
    loader = ns["pipeline"].get_data()["dataset1"]
    assert isinstance(loader, BatchLoader)
    with world.inside():
        batches = list(ns["pipeline"].build())
    assert len(batches) == manifest["totals"]["rows"] // 8  # drop_last
    assert all(b["input_ids"].shape == (8, 2048) for b in batches)


@pytest.mark.slow
def test_sft_pipeline_applies_the_chat_template(world) -> None:
    ns, _ = world.run(PAGE, 9)
    batches = ns["batches"]
    assert batches and all(b["input_ids"].shape == (8, 2048) for b in batches)
    assert all("loss_mask" in b for b in batches)  # assistant-only loss from the chat template
    from easydata.text.tokenizer import load_tokenizer

    text = load_tokenizer(str(world.tokenizer_dir)).decode(batches[0]["input_ids"][0])
    assert "[INST] <<SYS>>\nYou are helpful.\n<</SYS>>" in text  # Llama 2's chat template was applied


@pytest.mark.slow
def test_multi_dataset_pretraining_mix(world) -> None:
    ns, _ = world.run(PAGE, 10)
    batches = ns["batches"]
    assert batches and all(b["input_ids"].shape == (32, 4096) for b in batches)
    output = ns["pipeline"]._ensure_job().output_dir
    manifest = json.load(open(os.path.join(output, "manifest.json")))
    for name, target in {"code": 0.4, "text": 0.5, "math": 0.1}.items():
        assert abs(manifest["realized_token_share"][name] - target) < 0.01  # shares of tokens, a tiny one too


@pytest.mark.slow
def test_pretokenization_pipeline_and_state(world) -> None:
    ns, _ = world.run(PAGE, 11)
    files = sorted(glob.glob(os.path.join(world.work, "tokenized_data", "*.parquet")))
    assert files and max(len(ids) for f in files for ids in pq.read_table(f).column("input_ids").to_pylist()) <= 2048
    ns, _ = world.run(PAGE, 12, ns)
    assert ns["stages"] == ["source", "tokenize"] and isinstance(ns["data"]["raw_data"], TokenizedShardedSource)
    assert ns["context"].seed == 42 and ns["context"].config is ns["pipeline"].config


def test_error_handling(world) -> None:
    ns, printed = world.run(PAGE, 13)
    assert "Config error: datasets[0] must be a DatasetConfig" in printed
    assert printed.strip().endswith("Call source() before other pipeline stages")


def test_custom_stage_plugs_in(world) -> None:
    class MyTransformedSource(ShardedDataSource):
        def __init__(self, source, config):
            self.source, self.config = source, config

        @property
        def shard_names(self):
            return self.source.shard_names

        def open_shard(self, shard_name):
            for row in self.source.open_shard(shard_name):
                yield {**row, "tag": self.config["tag"]}

    ns, _ = world.run(PAGE, 14, {"MyTransformedSource": MyTransformedSource})
    pipeline = ns["Pipeline"](PipelineConfig(datasets=[DatasetConfig(data_files="more_data/*.jsonl")],
                                             default_tokenizer="meta-llama/Llama-2-7b"))
    with world.inside():
        pipeline.source().apply(ns["MyCustomStage"]({"tag": "x"}))
        rows = list(pipeline.get_data()["more_data"])
    assert pipeline.get_stages() == ["source", "my_stage"] and len(rows) == 100 and rows[0]["tag"] == "x"
    assert isinstance(pipeline.build(), MyTransformedSource)


def test_create_pipeline(world) -> None:
    ns, _ = world.run(PAGE, 15)
    config = ns["pipeline"].config
    assert [d.name for d in config.datasets] == ["data", "more_data"]  # names derived from the files
    assert config.default_tokenizer == "meta-llama/Llama-2-7b" and config.validate() == []
    with world.inside():
        assert isinstance(ns["pipeline"].source().get_data()["more_data"], JsonShardedSource)


@pytest.mark.slow
def test_tokenize_and_save(world) -> None:
    world.run(PAGE, 16)
    files = sorted(glob.glob(os.path.join(world.work, "tokenized", "*.parquet")))
    rows = [ids for f in files for ids in pq.read_table(f).column("input_ids").to_pylist()]
    assert len(rows) == 602 and max(map(len, rows)) == 2048  # data/*.jsonl, its two long documents cut
