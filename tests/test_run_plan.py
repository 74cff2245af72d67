"""`prepare_run`: what is decided before a job starts (chat template, pad id, groups) and its errors."""

from __future__ import annotations

import gc
import json
import os
import shutil
from pathlib import Path

import pytest

from easydata.config import PipelineConfig
from easydata.errors import ConfigError, InputError
from easydata.run.run_plan import load_chat_template, prepare_run
from easydata.io.sources import plan_splits
from easydata.run.machine import splits_per_dataset
from tests.conftest import write_jsonl

CHATML = (Path(__file__).parent / "chat_templates" / "chatml.jinja").read_text()


def test_chat_template_from_file_or_text(tmp_path):
    path = tmp_path / "t.jinja"
    path.write_text(CHATML)
    assert load_chat_template(str(path)) == CHATML
    assert load_chat_template(CHATML) == CHATML
    assert load_chat_template(None) is None


@pytest.mark.parametrize("value, message", [
    ("/nonexistent/template.jinja", "chat.template '/nonexistent/template.jinja' is neither a shipped template (chatml, gemma, llama3, mistral, phi3), a readable file"),
    ("{% for m in messages %}", "chat.template: chat template does not parse"),
])
def test_bad_chat_template_is_a_config_error(value, message):
    with pytest.raises(ConfigError) as info:
        load_chat_template(value)
    assert message in str(info.value)


def _config(tmp_path: Path, tokenizer: Path, **sections) -> PipelineConfig:
    write_jsonl(tmp_path / "d.jsonl", [{"text": "hello"}])
    return PipelineConfig.from_dict({"default_tokenizer": str(tokenizer),
                                     "datasets": [{"name": "d", "data_files": str(tmp_path / "d.jsonl")}],
                                     "save": {"output_dir": str(tmp_path / "out")}, **sections})


def test_tokenizer_chat_template_is_the_default(tmp_path, tokenizer_dir):
    own = tmp_path / "tok"
    shutil.copytree(tokenizer_dir, own)
    meta = json.loads((own / "tokenizer_config.json").read_text())
    (own / "tokenizer_config.json").write_text(json.dumps({**meta, "chat_template": CHATML}))
    plan = prepare_run(_config(tmp_path, own))
    assert plan.datasets[0].chat_template == CHATML
    plan = prepare_run(_config(tmp_path, own, chat={"template": "{{ messages[0].content }}"}, save={
        "output_dir": str(tmp_path / "out2")}))
    assert plan.datasets[0].chat_template == "{{ messages[0].content }}"


@pytest.mark.parametrize("pack, expected", [({}, 2), ({"pad_token_id": 7}, 7)])
def test_pad_id_configured_else_tokenizer(tmp_path, tokenizer_dir, pack, expected):
    plan = prepare_run(_config(tmp_path, tokenizer_dir, pack=pack))
    assert plan.datasets[0].pad_id == expected  # the trained tokenizer declares <pad> = 2
    assert plan.datasets[0].num_groups == 1 and len(plan.datasets[0].splits) == 1


@pytest.mark.slow
def test_resume_replans_with_the_interrupted_runs_split_size(tmp_path, tokenizer_dir, monkeypatch):
    """The default split size follows the machine's cores; a run resumed with other cores (or another
    `split_bytes`) takes the interrupted run's splits, as long as the job and its files are the same."""
    data = tmp_path / "big.jsonl"
    with open(data, "wb") as f:  # sparse: planning reads sizes only
        f.truncate(256 * 2**20)
    config = PipelineConfig.from_dict({"default_tokenizer": str(tokenizer_dir),
                                       "datasets": [{"name": "d", "data_files": str(data)}],
                                       "save": {"output_dir": str(tmp_path / "out")}})
    monkeypatch.setattr("easydata.run.machine.usable_cores", lambda: 8)
    interrupted = prepare_run(config)
    assert len(interrupted.datasets[0].splits) == 32
    monkeypatch.setattr("easydata.run.machine.usable_cores", lambda: 2)
    assert len(plan_splits(config.datasets[0], splits_wanted=splits_per_dataset())) == 16  # a new run: this machine's
    resumed = prepare_run(config, resume=True)
    assert resumed.resumed and resumed.run_id == interrupted.run_id
    assert resumed.datasets[0].splits == interrupted.datasets[0].splits
    assert resumed.unit_count == 32
    tuned = prepare_run(config, resume=True, split_bytes=2 * 2**20)  # an explicit size: re-planned the same way
    assert tuned.run_id == interrupted.run_id and len(tuned.datasets[0].splits) == 32
    with open(data, "ab") as f:  # the input changed: its tokens would not be the file's: refused
        f.write(b"\n")
    with pytest.raises(InputError, match=f"cannot resume run {interrupted.run_id}: input '{data}' changed since it"
                                         " started \\(size=268435456,modified=.* -> size=268435457,modified="):
        prepare_run(config, resume=True)
    fresh = prepare_run(config)  # without --resume: a new run
    assert not fresh.resumed and fresh.run_id != interrupted.run_id


def test_resume_refuses_an_input_edited_in_place(tmp_path, tokenizer_dir):
    """Same size, new content: a resume used to reuse the old tokens silently."""
    import os

    data = tmp_path / "a.jsonl"
    data.write_text('{"text": "first version"}\n')
    config = PipelineConfig.from_dict({"default_tokenizer": str(tokenizer_dir),
                                       "datasets": [{"name": "d", "data_files": str(data)}],
                                       "save": {"output_dir": str(tmp_path / "out")}})
    interrupted = prepare_run(config)
    assert prepare_run(config, resume=True).run_id == interrupted.run_id  # unchanged: resumed
    stat = data.stat()
    data.write_text('{"text": "other version"}\n')  # the same size
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    with pytest.raises(InputError, match=f"cannot resume run {interrupted.run_id}: input '{data}' changed"):
        prepare_run(config, resume=True)


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.slow
def test_planning_and_building_a_job_write_nothing_and_opening_the_output_is_one_repeatable_step(tmp_path,
                                                                                                 tokenizer_dir):
    """`plan_run` and `build_batch_job` read only (before: planning created the output and its staging and
    wrote run.json, and `build_batch_job` with it); `open_output` is the step that writes, safe to repeat."""
    from beam_pipelines.batch import build_batch_job
    from easydata.run.run_plan import open_output, plan_run

    config = _config(tmp_path, tokenizer_dir)
    before = _tree(tmp_path)
    plan = plan_run(config)
    pipeline, built = build_batch_job(config, [])
    assert _tree(tmp_path) == before and not (tmp_path / "out").exists()
    assert pipeline is not None and built.run_id != plan.run_id  # each plan is a new run until opened
    scratch = pipeline.local_tempdir  # Beam's scratch directory: removed with the unrun pipeline
    assert os.path.isdir(scratch)
    del pipeline
    gc.collect()
    assert not os.path.exists(scratch)
    open_output(config, plan)
    opened = _tree(tmp_path)
    assert (Path(plan.staging) / "run.json").is_file()
    open_output(config, plan)  # again (a retried launch): the same output
    assert _tree(tmp_path) == opened
    (tmp_path / "out" / "manifest.json").write_text("{}")
    with pytest.raises(Exception, match="already exists"):  # planning refuses an output in the way, reading it
        plan_run(config)
