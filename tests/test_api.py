"""The Python API: the fluent `Pipeline` (EasyData's stage semantics), `Pipeline.run()` for a whole
config, and `tokenize_and_save` in both its forms."""

from __future__ import annotations

import json
import os

import pyarrow.parquet as pq
import pytest

from easydata import ConfigError, Pipeline, PipelineConfig, tokenize_and_save
from easydata.run.manifest import read_manifest
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


@pytest.mark.slow
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


def test_the_tokenize_stages_engine_reaches_its_sources(tmp_path, tokenizer_dir):
    write_jsonl(tmp_path / "a.jsonl", ({"text": t} for t in make_texts(5)))
    pipeline = Pipeline(PipelineConfig(default_tokenizer=str(tokenizer_dir))).source(
        {"name": "web", "data_files": str(tmp_path / "a.jsonl")})
    for engine in ("hf", "auto"):
        source = Pipeline(PipelineConfig(default_tokenizer=str(tokenizer_dir))).source(
            {"name": "web", "data_files": str(tmp_path / "a.jsonl")}).tokenize(engine=engine).get_data()["web"]
        assert source.engine == engine and len(list(source)) == 5 and source.engine_choice.requested == engine
    assert pipeline.tokenize().get_data()["web"].engine == "auto"  # the default


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


def _texts_file(path, n: int, seed: int = 0, **fields) -> str:
    write_jsonl(path, ({"text": t, **{k: f(i) for k, f in fields.items()}} for i, t in enumerate(make_texts(n, seed=seed))))
    return str(path)


def test_format_fields_and_format_callback(tmp_path, tokenizer_dir, monkeypatch):
    """Renames, then the callback, before anything reads the record; a record it refuses is a dead letter."""
    monkeypatch.setenv("EASYDATA_CACHE", str(tmp_path / "cache"))
    write_jsonl(tmp_path / "a.jsonl", ({"body": t, "n": i} for i, t in enumerate(make_texts(20))))

    def keep_even(record):
        if record["n"] % 2:
            raise ValueError("odd")
        return {"content": record["content"].upper(), "n": record["n"]}

    from easydata import DatasetConfig, SaveStageConfig

    config = PipelineConfig(default_tokenizer=str(tokenizer_dir), datasets=[DatasetConfig(
        name="web", data_files=str(tmp_path / "a.jsonl"), content_field="content", additional_fields=["n"],
        format_fields={"body": "content"}, format_callback=keep_even)])
    out = Pipeline(config, beam_args=["--direct_num_workers=1"]).source().tokenize().save(
        SaveStageConfig(output_dir=str(tmp_path / "out"))).build()
    assert sorted(r["n"] for r in out) == list(range(0, 20, 2))
    assert out.manifest["documents_rejected"] == 10
    rejected = [json.loads(line) for f in (tmp_path / "out" / "rejected").rglob("*.jsonl") for line in open(f)]
    assert {r["reason"] for r in rejected} == {"format_callback raised ValueError: odd"}


@pytest.mark.slow
def test_load_builds_batches_from_a_cache_that_follows_the_inputs(tmp_path, tokenizer_dir, monkeypatch):
    monkeypatch.setenv("EASYDATA_CACHE", str(tmp_path / "cache"))
    data = _texts_file(tmp_path / "a.jsonl", 200)
    from easydata import DatasetConfig, LoadStageConfig, PackStageConfig

    config = PipelineConfig(default_tokenizer=str(tokenizer_dir), datasets=[DatasetConfig(name="web", data_files=data)],
                            pack=PackStageConfig(enabled=True, seq_length=64, include_segment_ids=False),
                            load=LoadStageConfig(batch_size=4, shuffle_buffer_size=0))
    one = ["--direct_num_workers=1"]
    first = list(Pipeline(config, beam_args=one).source().tokenize().pack().load().build())
    assert first and all(set(b) == {"input_ids"} and b["input_ids"].shape == (4, 64) for b in first)
    again = list(Pipeline(config, beam_args=one).source().tokenize().pack().load().build())
    assert all((a["input_ids"] == b["input_ids"]).all() for a, b in zip(first, again))
    assert len(list((tmp_path / "cache" / "pipelines").iterdir())) == 2  # one prepared output (+ its inputs record)
    _texts_file(tmp_path / "a.jsonl", 300, seed=5)  # the input changed: prepared again
    changed = list(Pipeline(config, beam_args=one).source().tokenize().pack().load().build())
    assert len(changed) > len(first)


PREPARE_AND_READ = """
import hashlib, json, sys
from easydata import DatasetConfig, LoadStageConfig, PackStageConfig, Pipeline, PipelineConfig
config = PipelineConfig(default_tokenizer=sys.argv[1], datasets=[DatasetConfig(name="web", data_files=sys.argv[2])],
                        pack=PackStageConfig(enabled=True, seq_length=64), load=LoadStageConfig(batch_size=4))
pipeline = Pipeline(config, beam_args=["--direct_num_workers=1"]).source().tokenize().pack().load()
loader, = pipeline.get_data().values()
digest = hashlib.sha256(b"".join(b["input_ids"].tobytes() for b in pipeline.build())).hexdigest()
print(json.dumps({"run": loader.job.result["run"]["run_id"], "digest": digest}))
"""


@pytest.mark.slow
def test_processes_building_the_same_pipeline_prepare_it_once(tmp_path, tokenizer_dir, monkeypatch):
    """The processes of a multi-process training script each build the same pipeline: all but the first
    failed with "output ... is in use by run ..."; now they wait for the one preparing it and read what it
    made (here the test holds the entry while both start, so both wait; then one runs the job)."""
    import subprocess
    import sys
    import time

    from easydata import DatasetConfig, LoadStageConfig, PackStageConfig
    from easydata.run.lock import OutputLock

    monkeypatch.setenv("EASYDATA_CACHE", str(tmp_path / "cache"))
    data = _texts_file(tmp_path / "a.jsonl", 300)
    config = PipelineConfig(default_tokenizer=str(tokenizer_dir), datasets=[DatasetConfig(name="web", data_files=data)],
                            pack=PackStageConfig(enabled=True, seq_length=64), load=LoadStageConfig(batch_size=4))
    loader, = Pipeline(config).source().tokenize().pack().load().get_data().values()  # nothing runs yet
    entry = loader.job.output_dir
    logs, children = [tmp_path / "child0.err", tmp_path / "child1.err"], []
    waiting = "another process is preparing this pipeline's data (run testholder01"
    with OutputLock(entry + ".preparing", "testholder01"):
        for log in logs:
            children.append(subprocess.Popen([sys.executable, "-c", PREPARE_AND_READ, str(tokenizer_dir), data],
                                             stdout=subprocess.PIPE, stderr=open(log, "w"), text=True))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(log.exists() and waiting in log.read_text() for log in logs):
            assert all(child.poll() is None for child in children), [log.read_text()[-2000:] for log in logs]
            time.sleep(0.2)
        assert all(waiting in log.read_text() for log in logs)
    results = [json.loads(child.communicate(timeout=600)[0].strip().splitlines()[-1]) for child in children]
    assert [child.returncode for child in children] == [0, 0], [log.read_text()[-2000:] for log in logs]
    assert results[0] == results[1]  # one run made the data (its run id), both read the same batches
    assert not list((tmp_path / "cache" / "pipelines").glob("*.preparing"))  # no lock left behind


@pytest.mark.slow
def test_weight_schedule_mixes_at_read_time(tmp_path, tokenizer_dir, monkeypatch):
    monkeypatch.setenv("EASYDATA_CACHE", str(tmp_path / "cache"))
    from easydata import DatasetConfig, LoadStageConfig, MixStageConfig, PackStageConfig, WeightSchedulePoint

    config = PipelineConfig(
        default_tokenizer=str(tokenizer_dir),
        datasets=[DatasetConfig(name="a", data_files=_texts_file(tmp_path / "a.jsonl", 300)),
                  DatasetConfig(name="b", data_files=_texts_file(tmp_path / "b.jsonl", 300, seed=1))],
        mix=MixStageConfig(weight_schedule=[WeightSchedulePoint(step=0, weights={"a": 1.0, "b": 0.0}),
                                            WeightSchedulePoint(step=3, weights={"a": 0.0, "b": 1.0})]),
        pack=PackStageConfig(enabled=True, seq_length=32), load=LoadStageConfig(batch_size=4))
    mixed = Pipeline(config, beam_args=["--direct_num_workers=1"]).source().tokenize().mix()
    # EasyData's page: after mix(), get_data() is {"mixed": MixedSource} (was: one source per dataset)
    from easydata import MixedShardedSource

    (name, source), = mixed.get_data().items()
    assert name == "mixed" and isinstance(source, MixedShardedSource)
    first = [row for _, row in zip(range(6), source.open_shard(source.shard_names[0]))]
    assert len(first) == 6 and all(set(row) >= {"input_ids"} for row in first)
    pipeline = Pipeline(config, beam_args=["--direct_num_workers=1"]).source().tokenize().mix().pack().load()
    assert list(pipeline.get_data()) == ["mixed"]
    batches = [b for _, b in zip(range(6), pipeline.build())]
    assert len(batches) == 6 and all(b["input_ids"].shape == (4, 32) for b in batches)


@pytest.mark.slow
def test_tokenizer_config_per_dataset_and_pack_eos(tmp_path, tokenizer_dir, monkeypatch):
    """`TokenizerConfig(max_length=...)` cuts that dataset only; `pack.eos_token_id` ends documents."""
    monkeypatch.setenv("EASYDATA_CACHE", str(tmp_path / "cache"))
    from easydata import DatasetConfig, TokenizerConfig

    long = dict(min_words=40, max_words=60)
    write_jsonl(tmp_path / "a.jsonl", ({"text": t} for t in make_texts(20, **long)))
    write_jsonl(tmp_path / "b.jsonl", ({"text": t} for t in make_texts(20, seed=1, **long)))
    config = PipelineConfig(default_tokenizer=str(tokenizer_dir), datasets=[
        DatasetConfig(name="cut", data_files=str(tmp_path / "a.jsonl"),
                      tokenizer=TokenizerConfig(name_or_path=str(tokenizer_dir), max_length=10)),
        DatasetConfig(name="whole", data_files=str(tmp_path / "b.jsonl"))])
    pipeline = Pipeline(config, beam_args=["--direct_num_workers=1"]).source().tokenize().save(
        output_dir=str(tmp_path / "out"))
    cut, whole = (list(pipeline.get_data()[name]) for name in ("cut", "whole"))
    assert max(len(r["input_ids"]) for r in cut) == 10 and min(len(r["input_ids"]) for r in whole) > 10
    packed = Pipeline(config.replace(datasets=config.datasets[1:]), beam_args=["--direct_num_workers=1"]).source()
    rows = list(packed.tokenize().pack(enabled=True, seq_length=128, eos_token_id=3).build())
    ids = [i for r in rows for i, s in zip(r["input_ids"], r["segment_ids"]) if s]
    assert ids.count(3) == 20  # every document ends with the given id


@pytest.mark.slow
def test_prefetch_to_device_gives_jax_arrays(tmp_path, tokenizer_dir, monkeypatch):
    import jax

    monkeypatch.setenv("EASYDATA_CACHE", str(tmp_path / "cache"))
    from easydata import DatasetConfig, LoadStageConfig, PackStageConfig

    config = PipelineConfig(default_tokenizer=str(tokenizer_dir),
                            datasets=[DatasetConfig(name="web", data_files=_texts_file(tmp_path / "a.jsonl", 100))],
                            pack=PackStageConfig(enabled=True, seq_length=32),
                            load=LoadStageConfig(batch_size=4, prefetch_to_device=True))
    batch = next(Pipeline(config, beam_args=["--direct_num_workers=1"]).source().tokenize().pack().load().build())
    assert isinstance(batch["input_ids"], jax.Array) and batch["input_ids"].shape == (4, 32)


def test_pipeline_schedule_is_the_read_time_mix(tmp_path, tokenizer_dir, monkeypatch):
    """`PipelineConfig.schedule` (our spelling) works like EasyData's `mix.weight_schedule`."""
    monkeypatch.setenv("EASYDATA_CACHE", str(tmp_path / "cache"))
    from easydata import DatasetConfig, WeightSchedulePoint

    config = PipelineConfig(default_tokenizer=str(tokenizer_dir), schedule=[
        WeightSchedulePoint(step=0, weights={"a": 1.0, "b": 1.0})],
        datasets=[DatasetConfig(name="a", data_files=_texts_file(tmp_path / "a.jsonl", 100)),
                  DatasetConfig(name="b", data_files=_texts_file(tmp_path / "b.jsonl", 100, seed=1))])
    pipeline = Pipeline(config).source().tokenize().mix()
    assert not pipeline.config.mix.static and pipeline.config.mix.weight_schedule == config.schedule


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["arrow", "jsonl", "bin"])
def test_the_build_result_reads_any_output_format(tmp_path, tokenizer_dir, fmt):
    """The source `build()` returns reads the output with its format's own reader (it used to take
    every non-Parquet, non-Arrow output for Parquet)."""
    from easydata import DatasetConfig

    config = PipelineConfig(default_tokenizer=str(tokenizer_dir),
                            datasets=[DatasetConfig(name="web", data_files=_texts_file(tmp_path / "a.jsonl", 30))])
    result = Pipeline(config, beam_args=["--direct_num_workers=1"]).source().tokenize().save(
        output_dir=str(tmp_path / "out"), format=fmt).build()
    rows = list(result)
    assert len(rows) == 30 and all(len(r["input_ids"]) > 0 for r in rows)


@pytest.mark.slow
def test_a_user_error_inside_the_job_is_raised_as_its_own_class_without_beams_noise(tmp_path, tokenizer_dir) -> None:
    """Before: about 50 lines with 4 Beam worker tracebacks (`KeyError: 'bundle_64'`, `ERROR:apache_beam...`),
    then a RuntimeError wrapping the message."""
    import subprocess
    import sys

    from tests.conftest import write_jsonl

    write_jsonl(tmp_path / "a" / "a.jsonl", ({"text": ""} for _ in range(30)))  # refused in the job's commit step
    script = ("import sys\nfrom easydata import tokenize_and_save\nfrom easydata.errors import EasyDataError\n"
              f"try:\n    tokenize_and_save(data_files={str(tmp_path / 'a' / 'a.jsonl')!r}, tokenizer={str(tokenizer_dir)!r},"
              f" output_path={str(tmp_path / 'out')!r})\n"
              "except EasyDataError as e:\n"
              "    assert type(e) is EasyDataError and e.__cause__ is None and e.__suppress_context__, repr(e)\n"
              "    print('caught:', e)\n    raise\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("caught: dataset 'a' wrote no documents: all 30 records were rejected")
    assert done.stdout.strip().endswith("set allow_empty_datasets: true to accept)")  # not Beam's step note
    err = done.stderr
    assert err.count("Traceback") == 1 and "apache_beam" not in err and "RuntimeError" not in err, err
    assert err.strip().splitlines()[-1].startswith("easydata.errors.EasyDataError: dataset 'a' wrote no documents")


@pytest.mark.slow
def test_load_builds_training_batches_of_the_train_split_when_splits_are_set(tmp_path, tokenizer_dir, monkeypatch):
    """`.load().build()` with `save.splits` failed: "has no dataset 'web'; it has ['web/train', 'web/validation']"."""
    monkeypatch.setenv("EASYDATA_CACHE", str(tmp_path / "cache"))
    config = PipelineConfig.from_dict({
        "default_tokenizer": str(tokenizer_dir), "datasets": [{"name": "web", "data_files": _texts_file(tmp_path / "a.jsonl", 300)}],
        "pack": {"enabled": True, "seq_length": 64}, "load": {"batch_size": 4, "shuffle_buffer_size": 0, "drop_remainder": False},
        "save": {"splits": {"train": 0.8, "validation": 0.2}}})
    batches = list(Pipeline(config, beam_args=["--direct_num_workers=1"]).source().tokenize().pack().load().build())
    manifest_dir = next((tmp_path / "cache" / "pipelines").glob("*/manifest.json")).parent
    manifest = __import__("json").loads((manifest_dir / "manifest.json").read_text())
    rows = sum(len(b["input_ids"]) for b in batches)
    assert rows == manifest["datasets"]["web/train"]["rows"] and rows > manifest["datasets"]["web/validation"]["rows"]
