"""The Python API: `Pipeline.from_config(...)` fluent builder and `tokenize_and_save`."""

from __future__ import annotations

import pytest

from easydata import ConfigError, Pipeline, PipelineConfig, tokenize_and_save
from easydata.manifest import read_manifest
from tests.conftest import make_texts, write_jsonl


def test_fluent_builder_runs_the_pipeline(tmp_path, tokenizer_dir):
    write_jsonl(tmp_path / "a.jsonl", ({"text": t, "n": i} for i, t in enumerate(make_texts(30))))
    base = PipelineConfig(default_tokenizer=str(tokenizer_dir))
    builder = (Pipeline.from_config(base)
               .source({"name": "web", "data_files": str(tmp_path / "a.jsonl"), "additional_fields": ["n"]})
               .tokenize(batch_size=8)
               .save(output_dir=str(tmp_path / "out"), num_shards=2))
    assert base.datasets == []  # each step returns a new builder over a new config
    result = builder.build(["--direct_num_workers=1"])
    assert result.manifest["totals"]["rows"] == 30
    assert result.manifest["schema"]["columns"] == {"input_ids": "list<item: int32>",
                                                    "attention_mask": "list<item: int32>", "n": "int64"}
    assert read_manifest(str(tmp_path / "out"))["config"]["tokenize"]["batch_size"] == 8


def test_build_reports_every_problem(tokenizer_dir):
    builder = Pipeline.from_config(PipelineConfig()).tokenize(batch_size=0)
    with pytest.raises(ConfigError) as info:
        builder.build()
    assert "`datasets` is empty" in str(info.value) and "tokenize.batch_size must be in [1, 1,000,000], got 0" in str(info.value)


def test_tokenize_and_save(tmp_path, tokenizer_dir):
    write_jsonl(tmp_path / "in" / "a.jsonl", ({"body": t} for t in make_texts(20)))
    result = tokenize_and_save(str(tmp_path / "in" / "*.jsonl"), str(tokenizer_dir), str(tmp_path / "out"),
                               content_field="body", format="arrow", num_shards=3,
                               beam_args=["--direct_num_workers=1"])
    assert [s["rows"] for s in result.manifest["datasets"]["data"]["shards"]] == [6, 7, 7]
