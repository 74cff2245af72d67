"""Tests for `easydata.config`: loading, complete problem reports, overrides, sizes, fingerprints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from easydata.config import (
    DatasetConfig,
    MixStageConfig,
    PipelineConfig,
    SaveStageConfig,
    TokenizerConfig,
    WeightSchedulePoint,
    apply_overrides,
    load_mapping,
    parse_size,
)
from easydata.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[1]


def _valid() -> dict[str, Any]:
    """A small config that passes validation (packing and mixing are off)."""
    return {
        "seed": 7,
        "default_tokenizer": "tok/dir",
        "datasets": [
            {"name": "code", "data_files": ["data/code/*.jsonl"], "type": "jsonl", "content_field": "text",
             "additional_fields": ["path"]},
            {"name": "web", "data_files": "data/web.txt", "sample_by": "paragraph",
             "tokenizer": {"name_or_path": "other/tok", "eos_token": "</s>"}, "num_rows": 10},
        ],
        "tokenize": {"max_length": 512, "truncation": "truncate", "add_bos": True, "batch_size": 64},
        "save": {"output_dir": "out", "format": "arrow", "compression": "lz4", "max_shard_size": "1GiB",
                 "row_group_size": 100},
    }


def _problems(data: Any) -> list[str]:
    with pytest.raises(ConfigError) as info:
        PipelineConfig.from_dict(data)
    return info.value.problems


# ---- loading -------------------------------------------------------------------------------------


def test_from_yaml_builds_typed_stage_configs(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_valid()))
    cfg = PipelineConfig.from_yaml(path)
    assert cfg.seed == 7
    assert cfg.default_tokenizer == "tok/dir"
    assert [d.name for d in cfg.datasets] == ["code", "web"]
    code, web = cfg.datasets
    assert isinstance(code, DatasetConfig) and code.data_file_list == ["data/code/*.jsonl"]
    assert code.additional_fields == ["path"]
    assert web.data_file_list == ["data/web.txt"]
    assert web.sample_by == "paragraph" and web.num_rows == 10
    assert web.tokenizer == TokenizerConfig(name_or_path="other/tok", eos_token="</s>")
    assert cfg.tokenizer_for(web) == TokenizerConfig(name_or_path="other/tok", eos_token="</s>")
    assert cfg.tokenizer_for(code) == TokenizerConfig(name_or_path="tok/dir")
    assert cfg.tokenize.max_length == 512 and cfg.tokenize.add_bos is True and cfg.tokenize.add_eos is True
    assert cfg.save == SaveStageConfig(output_dir="out", format="arrow", compression="lz4",
                                       max_shard_size="1GiB", row_group_size=100)
    assert cfg.save.max_shard_bytes == 2**30
    assert cfg.mix is None and cfg.pack.enabled is False


def test_from_json_equals_from_yaml(tmp_path: Path) -> None:
    (tmp_path / "job.json").write_text(json.dumps(_valid()))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(_valid()))
    from_json = PipelineConfig.from_json(tmp_path / "job.json")
    assert from_json == PipelineConfig.from_yaml(tmp_path / "job.yaml")
    assert from_json == PipelineConfig.from_dict(_valid())


def test_from_yaml_applies_overrides(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(_valid()))
    cfg = PipelineConfig.from_yaml(path, ["seed=11", "datasets.1.name=prose", "save.overwrite=true"])
    assert cfg.seed == 11
    assert [d.name for d in cfg.datasets] == ["code", "prose"]
    assert cfg.save.overwrite is True


def test_ints_are_accepted_where_floats_are_expected() -> None:
    cfg = PipelineConfig.from_dict({**_valid(), "max_rejected_fraction": 1})
    assert cfg.max_rejected_fraction == 1.0 and isinstance(cfg.max_rejected_fraction, float)


@pytest.mark.parametrize("name, text, message", [
    ("bad.yaml", "seed: [1,\n", "is not valid YAML"),
    ("bad.json", "{\"seed\": 1,}", "is not valid JSON"),
    ("list.yaml", "- 1\n- 2\n", "must hold a mapping at the top level, got list"),
])
def test_unreadable_config_files_raise_one_line_config_error(tmp_path: Path, name: str, text: str,
                                                             message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        PipelineConfig.from_yaml(path)
    assert "\n" not in str(info.value)
    assert str(path) in str(info.value)


def test_missing_config_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist") as info:
        PipelineConfig.from_yaml(tmp_path / "nope.yaml")
    assert info.value.problems == [f"config file '{tmp_path / 'nope.yaml'}' does not exist"]


def test_empty_file_is_an_empty_mapping(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_mapping(path) == {}
    with pytest.raises(ConfigError, match="`datasets` is empty"):
        PipelineConfig.from_yaml(path)


# ---- every problem at once -----------------------------------------------------------------------


def test_conversion_problems_are_all_reported_together() -> None:
    data = {
        "sed": 1,
        "zzz": 2,
        "seed": True,
        "save": {"fromat": "parquet", "format": "parket"},
        "tokenize": {"batch_size": "big", "add_eos": "yes", "truncation": "xyz"},
        "datasets": [{"data_files": "a"},
                     {"name": "b", "contnet_field": "t", "type": "jsnl", "data_files": 5}],
        "mix": {"weights": {"a": "x"}},
        "pack": {"strategy": "firstfit"},
    }
    assert _problems(data) == [
        "unknown key 'sed' (did you mean 'seed'?)",
        "unknown key 'zzz'",
        "seed: expected int, got True",
        "unknown key 'save.fromat' (did you mean 'format'?)",
        "save.format: must be one of parquet, arrow, jsonl, bin, npz, megatron, tfrecord, arrayrecord; got 'parket' (did you mean 'parquet'?)",
        "tokenize.batch_size: expected int, got 'big'",
        "tokenize.add_eos: expected bool, got 'yes'",
        "tokenize.truncation: must be one of none, truncate, window; got 'xyz'",
        "unknown key 'datasets[1].contnet_field' (did you mean 'content_field'?)",
        "datasets[1].type: must be one of jsonl, json, parquet, arrow, csv, txt, huggingface; got 'jsnl' (did you mean"
        " 'jsonl'?)",
        "datasets[1].data_files: expected str or list of str, got 5",
        "mix.weights.a: expected float, got 'x'",
        "pack.strategy: must be one of greedy, first_fit, best_fit, pool; got 'firstfit' (did you mean 'first_fit'?)",
    ]


def test_semantic_problems_are_all_reported_together() -> None:
    data = {
        "datasets": [{"name": "web", "data_files": "x"}, {"name": "web", "data_files": "y"}, {"name": "mixed"},
                     {"name": "bad name", "data_files": "z", "tokenizer": "t", "num_rows": -1,
                      "additional_fields": ["text", "input_ids"]}],
        "tokenize": {"batch_size": 0, "truncation": "truncate"},
        "save": {"format": "jsonl", "compression": "lz4", "max_shard_size": "lots", "num_shards": 0,
                 "row_group_size": 0},
        "max_rejected_fraction": 2.0,
        "pack": {"seq_length": 0},
    }
    expected = [
        "dataset name 'web' is used more than once",
        "datasets[0] ('web'): no tokenizer: set `default_tokenizer` or the dataset's `tokenizer`",
        "datasets[1] ('web'): no tokenizer: set `default_tokenizer` or the dataset's `tokenizer`",
        "datasets[2] ('mixed'): `name` 'mixed' must be letters, digits, '_', '-', '.', start with a letter or digit, and not be 'rejected', 'mixed', 'manifest.json' in any case (it names a directory of the output: at most 100 characters)",
        "datasets[2] ('mixed'): set `data_files` (or `pubsub_subscription` for streaming)",
        "datasets[2] ('mixed'): no tokenizer: set `default_tokenizer` or the dataset's `tokenizer`",
        "datasets[3] ('bad name'): `name` 'bad name' must be letters, digits, '_', '-', '.', start with a letter or digit, and not be 'rejected', 'mixed', 'manifest.json' in any case (it names a directory of the output: at most 100 characters)",
        "datasets[3] ('bad name'): `num_rows` must be >= 1 (null: every record), got -1",
        "datasets[3] ('bad name'): `additional_fields` must not repeat `content_field` 'text'",
        "datasets[3] ('bad name'): additional field 'input_ids' collides with an output column",
        "tokenize.batch_size must be in [1, 1,000,000], got 0",
        "tokenize.truncation 'truncate' needs tokenize.max_length",
        "max_rejected_fraction must be within [0, 1], got 2.0",
        "pack.seq_length must be in [1, 2,097,152], got 0",
        "save.compression 'lz4' is not supported by format 'jsonl' (choose from none, gzip, zstd)",
        "save.num_shards must be in [1, 100,000], got 0",
        "save.max_shard_size: expected a size such as '500MB' or '1GiB', got 'lots'",
        "save.row_group_size must be in [1, 10,000,000], got 0",
    ]
    assert _problems(data) == expected
    # `validate()` on an already built config reports the same list, without raising.
    built = PipelineConfig(datasets=[DatasetConfig(name="web", data_files="x")] * 2)
    assert built.validate()[0] == "dataset name 'web' is used more than once"


@pytest.mark.parametrize("mix, problems", [
    ({"weights": {"code": 0.7, "wbe": 0.3}},
     ["mix.weights: 'wbe' is not a dataset (did you mean 'web'?)",
      "mix.weights: dataset 'web' has no weight (give it one, or 0 to leave it out)"]),
    ({"weights": {"code": 1, "web": 1, "math": 1}}, ["mix.weights: 'math' is not a dataset (datasets: code, web)"]),
    ({"weights": {"code": -0.5, "web": 1}}, ["mix.weights must be finite and >= 0, got code=-0.5"]),
    ({"weights": {"code": 0, "web": 0}}, ["mix.weights are all zero: give at least one dataset a positive weight"]),
    ({"weights": {"code": 1, "web": 1}, "total_tokens": 0}, ["mix.total_tokens must be in [1, 1e+14], got 0"]),
    ({}, ["mix.weights is empty: give each dataset a weight (or remove the `mix` section)"]),
])
def test_mix_problems_name_the_dataset(mix: dict[str, Any], problems: list[str]) -> None:
    assert _problems({**_valid(), "mix": mix}) == problems


@pytest.mark.parametrize("key", ["schedule", "mix.weight_schedule"])
@pytest.mark.parametrize("points, problem", [
    ([{"step": 0, "weights": {"code": 1, "math": 1}}], "schedule step 0 names 'math', which is not a source"),
    ([{"step": -5, "weights": {"code": 1}}], "a schedule point's `step` must be an int >= 0, got -5"),
    ([{"step": 0, "weights": {"code": 0, "web": 0}}], "schedule step 0: the weights are all 0"),
    ([{"step": 0, "weights": {"code": 1, "web": -1}}], "schedule step 0: weight of 'web' must be finite and >= 0"),
    ([{"step": 3, "weights": {"code": 1}}, {"step": 3, "weights": {"web": 1}}], "schedule steps must be unique"),
])
def test_a_schedule_the_reader_refuses_is_refused_by_the_config(key: str, points: list, problem: str) -> None:
    """The top-level `schedule` was not checked at all (an unknown dataset, a negative step, an all-zero point
    ran the whole job, then `Pipeline(...).load()` failed); `mix.weight_schedule` checked names and order only."""
    data = {**_valid(), "schedule": points} if key == "schedule" else {**_valid(), "mix": {"weight_schedule": points}}
    found = _problems(data)
    assert len(found) == 1 and found[0].startswith(f"{key}: {problem}"), found


def test_schedule_points_may_come_in_any_order() -> None:
    points = [{"step": 10, "weights": {"web": 1}}, {"step": 0, "weights": {"code": 1, "web": 1}}]
    assert PipelineConfig.from_dict({**_valid(), "schedule": points}).schedule[0].step == 10


def test_mix_weights_need_not_sum_to_one() -> None:
    cfg = PipelineConfig.from_dict({**_valid(), "mix": {"weights": {"code": 7, "web": 3}, "stop_strategy": "restart"}})
    assert cfg.mix.weights == {"code": 7.0, "web": 3.0}


def test_config_error_message_lists_every_problem() -> None:
    error = ConfigError(["first problem", "second problem"])
    assert str(error) == "invalid config (2 problems): first problem; second problem"
    assert str(ConfigError("only one")) == "invalid config: only one"
    assert isinstance(error, ValueError)


def test_valid_config_has_no_problems() -> None:
    assert PipelineConfig.from_dict(_valid()).validate() == []


@pytest.mark.parametrize("data, problem", [
    ({"datasets": {}}, "datasets: expected a list, got dict"),
    ({"save": 3}, "save: expected a mapping, got int"),
    ({"seed": "42"}, "seed: expected int, got '42'"),
    ({"seed": 4.5}, "seed: expected int, got 4.5"),  # 4.0 is 4: a whole number written as a float
    ({"tokenize": {"add_eos": 1}}, "tokenize.add_eos: expected bool, got 1"),
    ({"tokenize": {"max_length": "10"}}, "tokenize.max_length: expected int, got '10'"),
    ({"save": {"max_shard_size": True}}, "save.max_shard_size: expected int or str, got True"),
    ({"default_tokenizer": 5}, "default_tokenizer: expected str or mapping, got 5"),
    ({"datasets": [{"name": "a", "additional_fields": "path"}]},
     "datasets[0].additional_fields: expected a list, got str"),
    ({"datasets": [{"name": "a", "data_files": ["x", 3]}]},
     "datasets[0].data_files: expected str or list of str, got ['x', 3]"),
    ({"schedule": [{"step": 0}]}, "missing required key 'schedule[0].weights'"),
])
def test_wrong_types_are_reported_with_the_value_received(data: dict[str, Any], problem: str) -> None:
    assert _problems(data) == [problem]


@pytest.mark.parametrize("override, problem", [
    ("save.format=parket", "save.format: must be one of parquet, arrow, jsonl, bin, npz, megatron, tfrecord, arrayrecord; got 'parket' (did you mean 'parquet'?)"),
    ("save.compression=zstandard",
     "save.compression: must be one of none, zstd, snappy, gzip, lz4; got 'zstandard' (did you mean 'zstd'?)"),
    ("tokenize.truncation=window_", "tokenize.truncation: must be one of none, truncate, window; got 'window_'"
                                    " (did you mean 'window'?)"),
    ("mix.stop_strategy=first", "mix.stop_strategy: must be one of first_exhausted, all_exhausted, restart;"
                                " got 'first'"),
    ("datasets.0.sample_by=lines", "datasets[0].sample_by: must be one of line, paragraph, document; got 'lines'"
                                   " (did you mean 'line'?)"),
    ("load.layout=max", "load.layout: must be one of raw, maxtext, hf; got 'max' (did you mean 'maxtext'?)"),
])
def test_literal_choices_list_the_allowed_values(override: str, problem: str) -> None:
    assert _problems(apply_overrides(_valid(), [override])) == [problem]


@pytest.mark.parametrize("override, problem", [
    ("sead=1", "unknown key 'sead' (did you mean 'seed'?)"),
    ("save.fromat=parquet", "unknown key 'save.fromat' (did you mean 'format'?)"),
    ("tokenize.add_eso=true", "unknown key 'tokenize.add_eso' (did you mean 'add_eos'?)"),
    ("datasets.0.contnet_field=body", "unknown key 'datasets[0].contnet_field' (did you mean 'content_field'?)"),
    ("default_tokenizr=x", "unknown key 'default_tokenizr' (did you mean 'default_tokenizer'?)"),
    ("qqqq=1", "unknown key 'qqqq'"),
])
def test_unknown_keys_are_rejected_with_a_suggestion(override: str, problem: str) -> None:
    assert _problems(apply_overrides(_valid(), [override])) == [problem]


def test_unknown_key_in_a_file_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({**_valid(), "save": {"output_dir": "o", "fromat": "arrow"}}))
    with pytest.raises(ConfigError) as info:
        PipelineConfig.from_yaml(path)
    assert info.value.problems == ["unknown key 'save.fromat' (did you mean 'format'?)"]
    assert str(info.value) == "invalid config: unknown key 'save.fromat' (did you mean 'format'?)"


def test_tokenizer_for_without_any_tokenizer_raises() -> None:
    cfg = PipelineConfig(datasets=[DatasetConfig(name="a", data_files="x")])
    with pytest.raises(ConfigError, match="dataset 'a' has no tokenizer"):
        cfg.tokenizer_for(cfg.datasets[0])


def test_data_file_list_normalises_str_list_and_none() -> None:
    assert DatasetConfig(name="a", data_files="x.jsonl").data_file_list == ["x.jsonl"]
    assert DatasetConfig(name="a", data_files=["x", "y"]).data_file_list == ["x", "y"]
    assert DatasetConfig(name="a").data_file_list == []


# ---- sizes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [
    ("500MB", 500_000_000),
    ("1.5GiB", 1_610_612_736),
    ("1048576", 1_048_576),
    (1_048_576, 1_048_576),
    ("10 kb", 10_000),
    ("2KiB", 2_048),
    ("1B", 1),
    ("0.5KB", 500),
    ("3TB", 3_000_000_000_000),
    (" 7mib ", 7 * 2**20),
])
def test_parse_size(value: Any, expected: int) -> None:
    assert parse_size(value) == expected


@pytest.mark.parametrize("value", [0, "0MB", "-1MB", "lots", "5XB", "", True, "0.1B", "1.2.3MB"])
def test_parse_size_rejects_non_positive_or_malformed(value: Any) -> None:
    with pytest.raises(ValueError, match=repr(value).replace("(", r"\(").replace(".", r"\.")):
        parse_size(value)


# ---- overrides -----------------------------------------------------------------------------------


@pytest.mark.parametrize("text, value", [("1e-3", 0.001), ("5E5", 500000.0), ("-2.5e+2", -250.0), ("1_0e1", 100.0),
                                         ("1.5", 1.5), ("12", 12), ("'1e-3'", "1e-3"), ("e5", "e5"), ("1e", "1e")])
def test_numbers_with_an_exponent_are_numbers(tmp_path: Path, text: str, value: Any) -> None:
    """PyYAML (YAML 1.1) read `1e-3` as a string: "mix.weights.a: expected float, got '1e-3'"."""
    config = tmp_path / "c.yaml"
    config.write_text(f"weight: {text}\n")
    assert load_mapping(config) == {"weight": value}
    assert apply_overrides({}, [f"weight={text}"]) == {"weight": value}


def test_apply_overrides_parses_values_as_yaml_and_creates_nested_keys() -> None:
    data = {"seed": 1, "datasets": [{"name": "a"}, {"name": "b"}]}
    out = apply_overrides(data, [
        "seed=3",
        "save.overwrite=true",
        "save.max_shard_size=1GB",
        "tokenize.max_length=null",
        "datasets.1.name=x",
        "datasets.0.data_files=[a.jsonl, b.jsonl]",
        "mix.weights.code=0.25",
        "datasets.2={name: c}",
        "datasets[2].num_rows=5",  # as validate() names it: "unknown key 'datasets[2]'" before
        "note=a=b",
        "empty=",
    ])
    assert out == {
        "seed": 3,
        "save": {"overwrite": True, "max_shard_size": "1GB"},
        "tokenize": {"max_length": None},
        "datasets": [{"name": "a", "data_files": ["a.jsonl", "b.jsonl"]}, {"name": "x"}, {"name": "c", "num_rows": 5}],
        "mix": {"weights": {"code": 0.25}},
        "note": "a=b",
        "empty": None,
    }
    assert data == {"seed": 1, "datasets": [{"name": "a"}, {"name": "b"}]}, "input must not be mutated"


def test_apply_overrides_replaces_null_sections() -> None:
    assert apply_overrides({"mix": None}, ["mix.total_tokens=100"]) == {"mix": {"total_tokens": 100}}


@pytest.mark.parametrize("override, message", [
    ("seed", "--set expects key.path=value, got 'seed'"),
    ("=3", "--set expects key.path=value, got '=3'"),
    ("datasets.5.name=x", "--set datasets.5.name: no list item '5'"),
    ("datasets.x.name=x", "--set datasets.x.name: no list item 'x'"),
    ("datasets.3=x", "--set datasets.3: no list item '3'"),
    ("seed.x=1", "--set seed.x: 'seed' is not a mapping"),
    ("seed.x.y=1", "--set seed.x.y: 'seed' is not a mapping"),
    ("datasets.0.name.first=x", "--set datasets.0.name.first: 'datasets.0.name' is not a mapping"),
])
def test_apply_overrides_errors_are_config_errors(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        apply_overrides({"seed": 1, "datasets": [{"name": "a"}]}, [override])
    assert info.value.problems == [message]


# ---- fingerprint and round trip ------------------------------------------------------------------


def test_fingerprint_is_stable_and_tracks_what_shapes_the_output() -> None:
    base = PipelineConfig.from_dict(_valid())
    fingerprint = base.fingerprint()
    assert len(fingerprint) == 16 and int(fingerprint, 16) >= 0
    assert PipelineConfig.from_dict(_valid()).fingerprint() == fingerprint
    assert PipelineConfig.from_dict(json.loads(json.dumps(_valid()))).fingerprint() == fingerprint

    def variant(*overrides: str) -> str:
        return PipelineConfig.from_dict(apply_overrides(_valid(), list(overrides))).fingerprint()

    # Not shaping the output: overwrite and the reader defaults.
    assert variant("save.overwrite=true") == fingerprint
    assert variant("load.batch_size=64", "load.shuffle=false") == fingerprint
    # Nor what only readers or the run's checks use (editing them must not block `--resume`).
    assert variant("schedule=[{step: 0, weights: {code: 1}}]") == fingerprint
    assert variant("max_rejected_fraction=0.5", "allow_empty_datasets=true") == fingerprint
    # Shaping the output.
    changed = {variant("seed=8"), variant("seed=9"), variant("tokenize.add_eos=false"),
               variant("save.row_group_size=10"), variant("datasets.0.content_field=body")}
    assert fingerprint not in changed and len(changed) == 5


def test_fingerprint_does_not_mutate_the_config() -> None:
    cfg = PipelineConfig.from_dict(apply_overrides(_valid(), ["save.overwrite=true"]))
    cfg.fingerprint()
    assert cfg.save.overwrite is True and cfg.to_dict()["save"]["overwrite"] is True


def test_to_dict_round_trips_through_from_dict() -> None:
    cfg = PipelineConfig.from_dict({
        **_valid(),
        "default_tokenizer": {"name_or_path": "tok", "pad_token": "<pad>"},
        "mix": {"weights": {"code": 1, "web": 0.5}, "stop_strategy": "all_exhausted", "total_tokens": 1000},
        "schedule": [{"step": 0, "weights": {"code": 1}}, {"step": 100, "weights": {"code": 0.5, "web": 0.5}}],
        "max_rejected_fraction": 0.1,
    })
    data = cfg.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert {k: v for k, v in data["datasets"][1]["tokenizer"].items() if v is not None} == {
        "name_or_path": "other/tok", "eos_token": "</s>", "padding": False, "add_special_tokens": True,
        "return_attention_mask": True, "trust_remote_code": False}
    again = PipelineConfig.from_dict(data)
    assert again == cfg
    assert again.to_dict() == data
    assert again.fingerprint() == cfg.fingerprint()
    assert again.mix == MixStageConfig(weights={"code": 1.0, "web": 0.5}, stop_strategy="all_exhausted",
                                       total_tokens=1000)
    assert again.schedule[1] == WeightSchedulePoint(step=100, weights={"code": 0.5, "web": 0.5})


def test_default_config_round_trips() -> None:
    data = PipelineConfig().to_dict()
    assert data["seed"] == 42 and data["save"]["format"] == "parquet" and data["mix"] is None
    with pytest.raises(ConfigError) as info:  # defaults alone have no dataset
        PipelineConfig.from_dict(data)
    assert info.value.problems == ["`datasets` is empty: add at least one dataset"]


# ---- shipped templates ---------------------------------------------------------------------------

_TEMPLATES = sorted(p for pattern in ("**/*.yaml", "**/*.yml", "**/*.json")
                    for p in (REPO_ROOT / "templates").glob(pattern))


@pytest.mark.parametrize("path", _TEMPLATES or [pytest.param(None, marks=pytest.mark.skip(
    reason="no YAML/JSON files under templates/ yet"))], ids=lambda p: p.name if p else "none")
def test_every_template_file_parses(path: Path) -> None:
    data = load_mapping(path)
    assert isinstance(data, dict) and data, f"{path} is empty"
    if "datasets" in data:  # a pipeline config (the others are Flex Template metadata)
        cfg = PipelineConfig.from_dict(data)
        assert cfg.datasets


@pytest.mark.parametrize("name", ["..", ".", ".easydata-committing", ".easydata-lock", "manifest.json", "rejected",
                                  "mixed", "a/b", "../outside", "a\\b", "", "-x", "web data", "ü",
                                  # the output's own directories on a file system that ignores case (macOS, Windows)
                                  "Rejected", "MIXED", "Manifest.json"])
def test_dataset_names_that_would_be_paths_are_refused(name) -> None:
    problems = _problems({"default_tokenizer": "t", "datasets": [{"name": name, "data_files": "x"}]})
    assert any(f"`name` {name!r} must be letters" in p for p in problems), problems


def test_dataset_names_differing_only_in_case_are_refused() -> None:
    """`Web` and `web` were written to OUT/Web and OUT/web: one directory on macOS and Windows, where one
    dataset's `part-00000-of-00001.parquet` replaced the other's."""
    problems = _problems({"default_tokenizer": "t", "datasets": [{"name": "Web", "data_files": "x"},
                                                                 {"name": "web", "data_files": "y"}]})
    assert problems == ["dataset names 'Web' and 'web' differ only in case: on macOS and Windows file systems their"
                        " output directories are one, and one dataset's shards would replace the other's; rename one"]


def test_derived_dataset_names_differ_in_more_than_case() -> None:
    config = PipelineConfig.from_dict({"default_tokenizer": "t", "datasets": [{"data_files": "Web/x.jsonl"},
                                                                              {"data_files": "web/x.jsonl"}]})
    assert [d.name for d in config.datasets] == ["Web", "web_2"] and not config.validate()


@pytest.mark.parametrize("name", ["web", "code.v2", "Web_1-a", "0"])
def test_plain_dataset_names_are_accepted(name) -> None:
    config = PipelineConfig.from_dict({"default_tokenizer": "t", "datasets": [{"name": name, "data_files": "x"}]})
    assert config.datasets[0].name == name


@pytest.mark.parametrize("section, key, value, message", [
    ("pack", "seq_length", 10**12, "pack.seq_length must be in [1, 2,097,152], got 1000000000000"),
    ("mix", "total_tokens", 10**15, "mix.total_tokens must be in [1, 1e+14], got 1000000000000000"),
    ("save", "num_shards", 10**9, "save.num_shards must be in [1, 100,000], got 1000000000"),
    ("tokenize", "batch_size", 10**9, "tokenize.batch_size must be in [1, 1,000,000], got 1000000000"),
    ("save", "row_group_size", 10**10, "save.row_group_size must be in [1, 10,000,000], got 10000000000"),
    ("pack", "pool_size", 10**6, "pack.pool_size must be in [1, 4096], got 1000000"),
])
def test_absurd_sizes_are_refused_before_any_work(section, key, value, message) -> None:
    data = {"default_tokenizer": "t", "datasets": [{"name": "web", "data_files": "x"}], section: {key: value}}
    if section == "mix":
        data["mix"]["weights"] = {"web": 1.0}
    assert message in _problems(data)


def test_max_document_bytes_has_a_safe_default_and_takes_sizes() -> None:
    base = {"default_tokenizer": "t", "datasets": [{"name": "web", "data_files": "x"}]}
    assert PipelineConfig.from_dict(base).tokenize.max_document_byte_limit == 32 * 2**20
    for value, limit in (("10MB", 10**7), ("1GiB", 2**30), (4096, 4096), (None, None)):
        config = PipelineConfig.from_dict({**base, "tokenize": {"max_document_bytes": value}})
        assert config.tokenize.max_document_byte_limit == limit
    assert any(p.startswith("tokenize.max_document_bytes: expected a size")
               for p in _problems({**base, "tokenize": {"max_document_bytes": "huge"}}))


@pytest.mark.parametrize("suffix, text, key", [
    (".yaml", "seed: 1\ndatasets:\n  - name: a\n    data_files: x\n    data_files: y\n", "data_files"),
    (".yaml", "seed: 1\nseed: 2\n", "seed"),
    (".json", '{"seed": 1, "save": {"format": "arrow", "format": "jsonl"}}', "format"),
])
def test_a_key_repeated_in_a_config_file_is_an_error(tmp_path, suffix, text, key) -> None:
    path = tmp_path / f"job{suffix}"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"duplicate key '{key}'"):
        PipelineConfig.from_yaml(path)


@pytest.mark.parametrize("fmt, codec", [("parquet", "zstd"), ("arrow", "zstd"), ("jsonl", "none"), ("bin", "none"),
                                        ("npz", "none")])
def test_one_compression_default_rule(tmp_path, fmt, codec) -> None:
    """`easydata tokenize` gave JSONL no compression while `easydata run` gave it zstd: one rule now."""
    from easydata.api import Pipeline

    base = {"default_tokenizer": "t", "datasets": [{"name": "web", "data_files": "x"}]}
    assert PipelineConfig.from_dict({**base, "save": {"format": fmt}}).save.codec == codec
    saving = Pipeline.from_config(PipelineConfig.from_dict(base)).source().save(format=fmt, enabled=False)
    assert saving.config.save.codec == codec  # (enabled=False: the settings only, nothing is written)
    assert PipelineConfig.from_dict({**base, "save": {"format": fmt, "compression": "none"}}).save.codec == "none"


def _alias_bomb(levels: int = 9) -> str:
    """YAML anchors, each a list of nine aliases of the previous: `9 ** levels` values once expanded."""
    names = [f"l{i}" for i in range(levels)]
    lines = [f"&{names[0]} [x, x, x, x, x, x, x, x, x]"]
    lines += [f"&{names[i]} [" + ", ".join([f"*{names[i - 1]}"] * 9) + "]" for i in range(1, levels)]
    return "[" + ", ".join(lines) + "]"


@pytest.mark.parametrize("where", ["additional_fields", "data_files", "set"])
def test_a_yaml_alias_bomb_is_refused_in_one_line_before_it_expands(tmp_path, where) -> None:
    """Before: anchors expanding 9^9 inside `additional_fields` or `data_files` reached 4.3 GB and grew."""
    import subprocess

    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    fields = _alias_bomb() if where == "additional_fields" else "[]"
    files = _alias_bomb() if where == "data_files" else str(tmp_path / "a.jsonl")
    (tmp_path / "job.yaml").write_text(f"datasets:\n  - name: web\n    data_files: {files}\n"
                                       f"    additional_fields: {fields}\nsave:\n  output_dir: {tmp_path / 'out'}\n")
    extra = ["--set", f"datasets.0.additional_fields={_alias_bomb()}"] if where == "set" else []

    from tests.conftest import easydata_with_limits

    # (under a 3 GB address-space limit: a regression fails the test instead of filling the machine)
    done = subprocess.run(easydata_with_limits("run", str(tmp_path / "job.yaml"), *extra, address_space=3 * 2**30),
                          capture_output=True, text=True, timeout=120)
    err = done.stderr.strip()
    assert done.returncode == 2 and len(err.splitlines()) == 1, err
    assert "aliases expand to more than the 1,000,000 values a config may hold" in err


def test_an_oversized_or_self_referencing_config_is_refused(tmp_path) -> None:
    from easydata.config import MAX_CONFIG_BYTES, load_mapping

    (tmp_path / "loop.yaml").write_text("a: &a [1, *a]\n")
    with pytest.raises(ConfigError, match="aliases expand to more than"):
        load_mapping(tmp_path / "loop.yaml")
    with open(tmp_path / "big.yaml", "w") as f:
        f.write("seed: 1\n" + "#" * (MAX_CONFIG_BYTES + 1))
    with pytest.raises(ConfigError, match="more than the 16 MiB a config may be"):
        load_mapping(tmp_path / "big.yaml")
    (tmp_path / "ok.yaml").write_text("a: &a [1, 2]\nb: *a\nc: *a\n")  # ordinary anchors still work
    assert load_mapping(tmp_path / "ok.yaml") == {"a": [1, 2], "b": [1, 2], "c": [1, 2]}


@pytest.mark.parametrize("pack, warned", [
    ({"seq_length": 4096}, "pack.seq_length"), ({"strategy": "best_fit"}, "pack.strategy"),
    ({"seq_length": 4096, "enabled": False}, None), ({"seq_length": 4096, "enabled": True}, None), ({}, None)])
def test_pack_settings_without_enabled_are_warned_about(capsys, pack, warned) -> None:
    """`pack: {seq_length: 4096}` wrote one row per document without a word (`enabled` defaults to false, as in
    EasyData); now a warning says so. An explicit `enabled`, either way, is taken as meant."""
    config = PipelineConfig.from_dict({**_valid(), "pack": pack})
    assert config.pack.enabled is bool(pack.get("enabled"))
    err = capsys.readouterr().err
    if warned is None:
        assert err == ""
    else:
        assert err == (f"easydata: warning: {warned} is set but pack.enabled is not (it defaults to false): each row"
                       " is one document; set pack.enabled: true to pack\n")


@pytest.mark.parametrize("value, expected", [(2e10, 20_000_000_000), ("2e10", 20_000_000_000), (2.5e9, 2_500_000_000),
                                             ("1.5E+6", 1_500_000), (30000, 30000)])
def test_a_whole_number_written_as_a_float_is_an_int(value, expected) -> None:
    """`total_tokens: 2e10` (the way budgets are written; PyYAML reads it as text) and `2.0e10` were refused with
    "expected int"."""
    config = PipelineConfig.from_dict({"default_tokenizer": "t", "datasets": [{"name": "a", "data_files": "x"}],
                                       "mix": {"weights": {"a": 1}, "total_tokens": value}})
    assert config.mix.total_tokens == expected and type(config.mix.total_tokens) is int


@pytest.mark.parametrize("value", [1.5, "2.5e0", 1e30, float("inf"), "20B", True])
def test_a_number_that_is_not_a_whole_int_is_still_refused(value) -> None:
    problems = _problems({"default_tokenizer": "t", "datasets": [{"name": "a", "data_files": "x"}], "seed": value})
    assert problems == [f"seed: expected int, got {value!r}"]
