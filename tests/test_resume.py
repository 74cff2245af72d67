"""Killed runs and `--resume`, end to end: the installed CLI in a subprocess, SIGKILL, real files.

A run is killed (the whole process group, as an OOM killer or a preempted VM would) either while it
tokenizes or while it writes shards. The killed output has no manifest and `validate` refuses it;
`easydata run --resume` then loads the work units the killed run finished instead of tokenizing
them again, and writes shards byte-identical to an uninterrupted run's.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from easydata.run.checkpoint import completed_units
from tests.conftest import write_jsonl

pytestmark = pytest.mark.heavy


def _cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "easydata", *args], capture_output=True, text=True, timeout=600,
                          **kwargs)


def _digest(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("part-*"))}


@pytest.fixture(scope="module")
def job(tmp_path_factory, mistral_tokenizer_dir) -> tuple[Path, dict[str, str]]:
    """12 input files (one work unit each) of standard-library modules, and an uninterrupted run's shards."""
    root = tmp_path_factory.mktemp("resume")
    modules = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:240]
    for i in range(12):
        write_jsonl(root / "in" / f"part-{i:02d}.jsonl",
                    ({"text": p.read_text(encoding="utf-8", errors="replace")} for p in modules[i::12]))
    config = root / "job.json"
    config.write_text(json.dumps({
        "seed": 5, "default_tokenizer": str(mistral_tokenizer_dir),
        "datasets": [{"name": "code", "data_files": str(root / "in" / "*.jsonl")}],
        "tokenize": {"batch_size": 8},
        "pack": {"enabled": True, "seq_length": 512},
        "save": {"output_dir": str(root / "reference"), "num_shards": 3},
    }))
    run = _cli("run", str(config), "--quiet")
    assert run.returncode == 0, run.stderr
    return config, _digest(root / "reference")


def _kill_when(config: Path, out: Path, ready) -> None:
    """Starts the run and SIGKILLs its process group as soon as `ready(staging)` holds."""
    proc = subprocess.Popen([sys.executable, "-m", "easydata", "run", str(config), "--quiet", "--output", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            staging = next(out.glob(".easydata-tmp-*"), None) if out.exists() else None
            if staging is not None and ready(staging):
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return
            if proc.poll() is not None:
                pytest.fail(f"the run ended (exit {proc.returncode}) before it could be killed: {proc.stderr.read()}")
            time.sleep(0.02)
        pytest.fail("the run never reached the point to kill it")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _units_done(staging: Path) -> int:
    """Work units whose every tokenized batch is checkpointed (`unit.json` can come first: the
    tokenizer runs a batch behind the reader, in each worker)."""
    return len(completed_units(str(staging), "code", range(12)))


@pytest.mark.parametrize("moment", ["tokenizing", "writing"])
def test_killed_run_is_refused_then_resumed_to_the_same_bytes(job, tmp_path, moment):
    config, reference = job
    out = tmp_path / "out"
    if moment == "tokenizing":
        _kill_when(config, out, lambda staging: _units_done(staging) >= 3)
    else:  # the shuffle has started staging shard pieces: every unit is tokenized
        _kill_when(config, out, lambda staging: any((staging / "sorted").rglob("*.arrow")))
    assert not (out / "manifest.json").exists()
    refused = _cli("validate", str(out))
    assert refused.returncode == 2
    assert refused.stderr.strip() == (f"easydata: error: '{out}' has no manifest.json: not an easydata output,"
                                      " or a run that did not finish")

    resumed = _cli("run", str(config), "--output", str(out), "--resume")
    assert resumed.returncode == 0, resumed.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    reused = manifest["run"]["resumed_units"]
    assert manifest["run"]["units"] == 12
    assert (reused >= 3 if moment == "tokenizing" else reused == 12), reused
    assert "of 12 input units already tokenized" in resumed.stderr
    assert _digest(out) == reference != {}
    assert not list(out.glob(".easydata-tmp-*"))  # checkpoints go with the staging directory
    assert _cli("validate", str(out)).returncode == 0


def test_resume_without_an_unfinished_run_starts_afresh(job, tmp_path):
    config, reference = job
    out = tmp_path / "out"
    run = _cli("run", str(config), "--output", str(out), "--resume")
    assert run.returncode == 0, run.stderr
    assert "no unfinished run of this job to resume: starting a new run" in run.stderr
    assert _digest(out) == reference


@pytest.mark.parametrize("operation", [1, 3, 6, 10])
def test_a_run_dying_inside_its_commit_is_finished_by_resume_to_the_same_bytes(job, tmp_path, monkeypatch,
                                                                               operation):
    """The run dies after the `operation`-th filesystem change of its commit (its journal written, some
    shards moved, the old manifest gone...). `easydata run --resume` finishes that commit from the
    journal (no job is run again): the shards are the uninterrupted run's, byte for byte."""
    from beam_pipelines.batch import run_batch
    from easydata.config import PipelineConfig
    from tests.test_output import _faulty

    config, reference = job
    out = tmp_path / "out"
    cfg = PipelineConfig.from_yaml(config, [f"save.output_dir={out}"])
    with monkeypatch.context() as patch:
        _faulty(patch, operation + 4)  # + the journal's own write and rename, and its copy's in staging
        with pytest.raises(Exception, match="injected fault"):
            run_batch(cfg, ["--direct_num_workers=1"], show_progress=False)
    assert (out / ".easydata-committing").exists()  # the commit's journal: the commit is not finished
    resumed = _cli("run", str(config), "--output", str(out), "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "easydata: finished the interrupted commit of run " in resumed.stderr
    assert _digest(out) == reference != {}
    assert not list(out.glob(".easydata-*"))  # no journal, no staging left
    assert _cli("validate", str(out)).returncode == 0


def test_resume_discards_the_killed_attempts_group_files(job, tmp_path):
    """Group files have names of their own per attempt: the killed attempt's used to stay beside the resumed
    run's until the commit (disk filled by attempts that never finish). Planning the resume removes them;
    the tokenized checkpoints stay."""
    from easydata.config import PipelineConfig
    from easydata.run.run_plan import prepare_run

    config, _ = job
    out = tmp_path / "out"
    _kill_when(config, out, lambda staging: any((staging / "groups").rglob("*.rows")))
    staging = next(out.glob(".easydata-tmp-*"))
    units_before = _units_done(staging)
    assert any((staging / "groups").rglob("*.rows"))
    plan = prepare_run(PipelineConfig.from_yaml(config, [f"save.output_dir={out}"]), resume=True)
    assert plan.resumed and plan.staging == str(staging)
    assert not (staging / "groups").exists() and _units_done(staging) == units_before


@pytest.fixture(scope="module")
def mixed_job(tmp_path_factory, mistral_tokenizer_dir) -> tuple[Path, dict[str, str]]:
    """The same 12 files as two datasets mixed 0.8 / 0.2 with upsampling, and an uninterrupted run's shards."""
    root = tmp_path_factory.mktemp("resume-mix")
    modules = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:240]
    for i in range(12):
        write_jsonl(root / ("a" if i < 8 else "b") / f"part-{i:02d}.jsonl",
                    ({"text": p.read_text(encoding="utf-8", errors="replace")} for p in modules[i::12]))
    config = root / "job.json"
    config.write_text(json.dumps({
        "seed": 5, "default_tokenizer": str(mistral_tokenizer_dir),
        "datasets": [{"name": "a", "data_files": str(root / "a" / "*.jsonl")},
                     {"name": "b", "data_files": str(root / "b" / "*.jsonl")}],
        "tokenize": {"batch_size": 8},
        "mix": {"weights": {"a": 0.5, "b": 0.5}, "stop_strategy": "all_exhausted"},
        "pack": {"enabled": True, "seq_length": 512},
        "save": {"output_dir": str(root / "reference"), "num_shards": 3},
    }))
    run = _cli("run", str(config), "--quiet")
    assert run.returncode == 0, run.stderr
    return config, _digest(root / "reference")


def test_a_killed_mix_resumes_to_the_same_bytes(mixed_job, tmp_path):
    """A mix selects from the work units' checkpoints: the resumed run's loaded units and its newly
    tokenized ones are measured and selected alike."""
    config, reference = mixed_job
    out = tmp_path / "out"
    _kill_when(config, out, lambda staging: len(completed_units(str(staging), "a", range(8))) >= 3)
    resumed = _cli("run", str(config), "--output", str(out), "--resume")
    assert resumed.returncode == 0, resumed.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["run"]["resumed_units"] >= 3
    assert manifest["mix"]["sources"]["b"]["document_copies"] > manifest["mix"]["sources"]["b"]["documents_mixed"]
    assert _digest(out) == reference != {}


@pytest.fixture(scope="module")
def large_job(tmp_path_factory, qwen3_tokenizer_dir) -> tuple[Path, int, dict[str, str]]:
    """160 MB of generated text in 16 files (a work unit or more each; tens of MB of token rows per worker's bundle),
    and an uninterrupted run's shards."""
    import numpy as np

    root = tmp_path_factory.mktemp("resume-large")
    rng = np.random.default_rng(7)
    words = np.array(["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), int(n))) for n in rng.integers(2, 11, 5000)])
    documents = 0
    for i in range(16):
        lines = []
        while sum(map(len, lines)) < 10_000_000:
            text = " ".join(words[rng.integers(0, len(words), 2500)])
            lines.append(json.dumps({"text": text}) + "\n")
        (root / "in").mkdir(exist_ok=True)
        (root / "in" / f"part-{i:02d}.jsonl").write_text("".join(lines))
        documents += len(lines)
    config = root / "job.json"
    config.write_text(json.dumps({
        "seed": 5, "default_tokenizer": str(qwen3_tokenizer_dir),
        "datasets": [{"name": "code", "data_files": str(root / "in" / "*.jsonl")}],
        "pack": {"enabled": True, "seq_length": 2048},
        "save": {"output_dir": str(root / "reference"), "num_shards": 2},
    }))
    run = _cli("run", str(config), "--quiet")
    assert run.returncode == 0, run.stderr
    return config, documents, _digest(root / "reference")


def test_a_resume_that_loads_every_unit_writes_every_row(large_job, tmp_path):
    """Every unit tokenized, killed while writing: the resumed run loads all of them. Its loaded rows went to
    the shuffle through a Flatten with the (empty) reading step's, and Beam's local runner with two workers lost
    part of such a Flatten's large elements: the commit guard refused (`documents_in=24562 but written=19562`),
    on every `--resume`."""
    config, documents, reference = large_job
    out = tmp_path / "out"
    _kill_when(config, out, lambda staging: any((staging / "sorted").rglob("*.arrow")))
    resumed = _cli("run", str(config), "--output", str(out), "--resume", "--quiet")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["run"]["resumed_units"] == manifest["run"]["units"] >= 16
    assert manifest["documents_in"] == manifest["documents_written"] == documents
    assert _digest(out) == reference != {}
