"""EasyData's pretokenization.md, block by block, as written (only `easydel.data` -> `easydata`;
bucket URLs -> local directories; hub ids from a real offline Hugging Face cache): see
tests/easydata_docs.py."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.easydata_docs import DocsWorld, code_blocks

PAGE = "pretokenization"
#: The block that needs EasyDeL itself (its trainer).
NEEDS_EASYDEL = {12}


@pytest.fixture(scope="module")
def world(tmp_path_factory, mistral_tokenizer_dir) -> DocsWorld:
    return DocsWorld(tmp_path_factory.mktemp("pretokenization"), mistral_tokenizer_dir)


@pytest.fixture(scope="module")
def tokenized(world) -> str:
    """`./tokenized/*.parquet`, which the loading blocks read: made as pipeline.md's
    `tokenize_and_save(output_path="./tokenized")` makes it."""
    world.run("pipeline", 16)
    return os.path.join(world.work, "tokenized")


def _parquet_rows(pattern: str) -> list[list[int]]:
    return [ids for f in sorted(glob.glob(pattern)) for ids in pq.read_table(f).column("input_ids").to_pylist()]


def test_every_block_is_covered() -> None:
    assert len(code_blocks(PAGE)) == 20
    assert all("import easydel as ed" in code_blocks(PAGE)[i] for i in NEEDS_EASYDEL)


@pytest.mark.slow
def test_quick_start(world) -> None:
    ns, _ = world.run(PAGE, 0)
    with world.inside():
        shards = ns["source"].shard_names
        rows = [row for shard in shards for row in ns["source"].open_shard(shard)]
    assert shards and all(s.endswith(".parquet") for s in shards)  # never manifest.json
    assert len(rows) == 602 and max(len(r["input_ids"]) for r in rows) == 2048


@pytest.mark.slow
def test_pipeline_api_writes_each_save_path(world) -> None:
    world.run(PAGE, 1)
    first = _parquet_rows(os.path.join(world.work, "tokenized", "dataset1", "*.parquet"))
    second = _parquet_rows(os.path.join(world.work, "tokenized", "dataset2", "*.parquet"))
    assert len(first) == 602 and len(second) == 600 and max(map(len, first + second)) <= 2048
    for name in ("dataset1", "dataset2"):
        manifest = json.load(open(os.path.join(world.work, "tokenized", name, "manifest.json")))
        assert manifest["compression"] == "zstd" and len(manifest["datasets"]) == 1


def test_per_dataset_tokenizers_and_options(world) -> None:
    ns, _ = world.run(PAGE, 2)
    config = ns["config"]
    assert [config.tokenizer_for(d).name_or_path for d in config.datasets] == ["bigcode/starcoder",
                                                                               "meta-llama/Llama-2-7b"]
    assert [d.content_field for d in config.datasets] == ["code", "text"]
    ns, _ = world.run(PAGE, 3)
    ds, pipeline = ns["config"], ns["PipelineConfig"](datasets=[ns["config"]])
    assert pipeline.tokenize_for(ds).truncation_mode == "truncate" and pipeline.tokenize_for(ds).max_length == 2048


@pytest.mark.parametrize("index, fmt, codec, shards", [(4, "parquet", "zstd", 100), (5, "arrow", "zstd", 50),
                                                       (6, "jsonl", "gzip", None)])
def test_output_format_settings(world, index, fmt, codec, shards) -> None:
    ns, _ = world.run(PAGE, index, replace={"SaveStageConfig(": "settings = SaveStageConfig("})
    settings = ns["settings"]
    assert (settings.format, settings.codec, settings.num_shards) == (fmt, codec, shards)


def test_chat_data_and_chat_template_transform(world) -> None:
    ns, _ = world.run(PAGE, 7)
    with world.inside():
        first = next(iter(ns["transformed"]))
    expected = ns["tokenizer"].apply_chat_template(first["messages"], tokenize=False)
    assert first["text"] == expected and first["text"].startswith("<s>[INST] <<SYS>>")


def test_parallel_ray_and_cloud_configs(world) -> None:
    from easydata.compat.pipeline import _worker_args

    world.run(PAGE, 8)
    ns, _ = world.run(PAGE, 9)
    assert _worker_args(ns["config"], []) == ["--direct_num_workers=8"]  # Ray's workers, as local processes
    ns, _ = world.run(PAGE, 10)
    config = ns["config"]
    assert config.validate() == [] and config.datasets[0].save_path.endswith("output-bucket/tokenized")


@pytest.mark.slow
def test_token_packing(world) -> None:
    world.run(PAGE, 11)
    out = os.path.join(world.work, "packed_data")
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    assert manifest["schema"]["packed"] and manifest["schema"]["seq_length"] == 2048
    files = sorted(glob.glob(os.path.join(out, "*", "*.parquet")))
    table = pq.read_table(files)
    ids, segments = np.array(table.column("input_ids").to_pylist()), np.array(table.column("segment_ids").to_pylist())
    assert ids.shape[1] == 2048 and segments[:, 0].min() == 1 and (ids[segments == 0] == 0).all()
    assert manifest["totals"]["tokens"] == int((segments > 0).sum())  # no token lost


@pytest.mark.slow
def test_loading_and_verifying(world, tokenized) -> None:
    _, printed = world.run(PAGE, 13, {"print": lambda *a: None})
    ns, _ = world.run(PAGE, 14)
    batches = ns["batches"]
    assert batches and batches[0]["input_ids"].shape[0] == 8 and batches[0]["input_ids"].ndim == 2
    first = sorted(glob.glob(os.path.join(tokenized, "*.parquet")))[0]
    ns, printed = world.run(PAGE, 15, replace={"./tokenized/shard_0.parquet": first})
    schema = ns["pf"].schema_arrow
    assert str(schema.field("input_ids").type.value_type) == str(schema.field("attention_mask").type.value_type) == "int32"
    assert "input_ids" in printed and "attention_mask" in printed
    ns, printed = world.run(PAGE, 16)
    assert printed.count("Example") == 3
    ns, _ = world.run(PAGE, 17)
    assert json.load(open(os.path.join(tokenized, "metadata.json")))["max_length"] == 2048
    ns, _ = world.run(PAGE, 18, replace={"SaveStageConfig(\n    max": "a = SaveStageConfig(\n    max",
                                         "SaveStageConfig(\n    num": "b = SaveStageConfig(\n    num"})
    assert ns["a"].max_shard_bytes == 500 * 10**6 and ns["b"].num_shards == 100
    ns, printed = world.run(PAGE, 19)
    assert printed.strip().endswith("OK (10+ examples)")
