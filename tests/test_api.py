"""The Python API: the fluent `Pipeline` (EasyData's stage semantics), `Pipeline.run()` for a whole
config, and `tokenize_and_save` in both its forms."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest

from easydata import ConfigError, Pipeline, PipelineConfig, tokenize_and_save
from easydata.manifest import read_manifest
from tests.conftest import make_texts, write_jsonl


def test_fluent_builder_runs_the_pipeline(tmp_path, tokenizer_dir):
    write_jsonl(tmp_path / "a.jsonl", ({"text": t, "n": i} for i, t in enumerate(make_texts(30))))
    base = PipelineConfig(default_tokenizer=str(tokenizer_dir))
    builder = (Pipeline.from_config(base, beam_args=["--direct_num_workers=1"])
               .source({"name": "web", "data_files": str(tmp_path / "a.jsonl"), "additional_fields": ["n"]})
               .tokenize(batch_size=8)
               .save(output_dir=str(tmp_path / "out"), num_shards=2))  # save() writes now, as in EasyData
    assert base.datasets == []  # the config given is never changed
    assert builder.get_stages() == ["source", "tokenize", "save"]
    assert read_manifest(str(tmp_path / "out"))["totals"]["rows"] == 30
    result = builder.build()
    assert result.manifest["totals"]["rows"] == 30
    assert result.manifest["schema"]["columns"] == {"input_ids": "list<item: int32>",
                                                    "attention_mask": "list<item: int32>", "n": "int64"}
    assert read_manifest(str(tmp_path / "out"))["config"]["tokenize"]["batch_size"] == 8
    assert sorted(row["n"] for row in result) == list(range(30))  # the result is a source over the output


def test_only_the_stages_called_shape_the_job(tmp_path, tokenizer_dir):
    """EasyData's semantics: a config's `pack` section packs only when `.pack()` is called; `run()`
    runs the config as `easydata run` does."""
    write_jsonl(tmp_path / "a.jsonl", ({"text": t} for t in make_texts(40)))
    config = PipelineConfig.from_dict({
        "default_tokenizer": str(tokenizer_dir), "datasets": [{"name": "web", "data_files": str(tmp_path / "a.jsonl")}],
        "pack": {"enabled": True, "seq_length": 64}, "save": {"output_dir": str(tmp_path / "out"), "overwrite": True}})
    one = ["--direct_num_workers=1"]
    unpacked = Pipeline(config, beam_args=one).source().tokenize().save().build()
    assert unpacked.manifest["schema"]["packed"] is False
    packed = Pipeline(config, beam_args=one).source().tokenize().pack().save().build()
    assert packed.manifest["schema"]["packed"] is True
    assert Pipeline(config).run(["--direct_num_workers=1"]).manifest["schema"]["packed"] is True


def test_build_reports_every_problem(tokenizer_dir):
    with pytest.raises(ConfigError) as info:
        Pipeline.from_config(PipelineConfig()).source().tokenize(batch_size=0).save()
    assert "`datasets` is empty" in str(info.value) and "tokenize.batch_size must be in [1, 1,000,000], got 0" in str(info.value)


def test_stage_before_source_is_a_runtime_error():
    with pytest.raises(RuntimeError, match=r"^Call source\(\) before other pipeline stages$"):
        Pipeline(PipelineConfig()).tokenize()
    pipeline = Pipeline(PipelineConfig()).source()
    with pytest.raises(RuntimeError, match="already been called"):
        pipeline.source()


def test_tokenize_and_save(tmp_path, tokenizer_dir):
    write_jsonl(tmp_path / "in" / "a.jsonl", ({"body": t} for t in make_texts(20)))
    result = tokenize_and_save(str(tmp_path / "in" / "*.jsonl"), str(tokenizer_dir), output_dir=str(tmp_path / "out"),
                               content_field="body", format="arrow", num_shards=3,
                               beam_args=["--direct_num_workers=1"])
    assert [s["rows"] for s in result.manifest["datasets"]["data"]["shards"]] == [6, 7, 7]


def test_tokenize_and_save_output_path_is_flat_and_cut(tmp_path, tokenizer_dir, monkeypatch):
    """EasyData's form: shards directly in `output_path` (with a manifest), cut to `max_length`."""
    monkeypatch.setenv("EASYDATA_CACHE", str(tmp_path / "cache"))
    write_jsonl(tmp_path / "in" / "a.jsonl", ({"text": t} for t in make_texts(50, min_words=30, max_words=80)))
    tokenize_and_save(str(tmp_path / "in" / "*.jsonl"), str(tokenizer_dir), str(tmp_path / "tok"), "parquet", 16)
    files = sorted(os.listdir(tmp_path / "tok"))
    assert "manifest.json" in files and all(f == "manifest.json" or f.endswith(".parquet") for f in files)
    lengths = [len(ids) for f in files if f.endswith(".parquet")
               for ids in pq.read_table(tmp_path / "tok" / f).column("input_ids").to_pylist()]
    assert len(lengths) == 50 and max(lengths) == 16
    # running it again finds the same output in place
    tokenize_and_save(str(tmp_path / "in" / "*.jsonl"), str(tokenizer_dir), str(tmp_path / "tok"), "parquet", 16)
    with pytest.raises(ConfigError, match="output_path"):
        tokenize_and_save(str(tmp_path / "in" / "*.jsonl"), str(tokenizer_dir))
