"""One output, one committed run: concurrent launches through the Flex Template entry, on local files and S3.

The entry (`beam_pipelines.flex_template`, what Dataflow's launcher runs) used to take no lock, and the
commit did not look at the output again: two launches into one output both exited 0, the second silently
replacing the first's committed output without `overwrite`. Now a launch takes the output's lock (a
detached one when the job runs elsewhere: released by the job's commit, not by the launcher that exits),
and the commit refuses an output another run committed meanwhile.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from apache_beam.runners.runner import PipelineRunner

from easydata.errors import OutputError
from easydata.run.lock import LOCK_NAME, OutputLock, read_lock, release_lock
from easydata.run.output import check_not_replaced
from tests.conftest import make_texts, write_jsonl


def _job(tmp_path: Path, tokenizer_dir: Path, output: str, documents: int = 3000) -> Path:
    write_jsonl(tmp_path / "data" / "web.jsonl", [{"text": t} for t in make_texts(documents, seed=5)])
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({
        "seed": 3, "default_tokenizer": str(tokenizer_dir),
        "datasets": [{"name": "web", "data_files": str(tmp_path / "data" / "web.jsonl")}],
        "pack": {"enabled": True, "seq_length": 128}, "save": {"output_dir": output, "num_shards": 2}}))
    return path


def _launch_two(job: Path, env: dict[str, str]) -> list[subprocess.CompletedProcess]:
    """Two Flex Template launches of one job started at once (each a fresh process, as two launchers are)."""
    procs = [subprocess.Popen([sys.executable, "-m", "beam_pipelines.flex_template", f"--config={job}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    return [subprocess.CompletedProcess(p.args, p.wait(timeout=600), p.stdout.read(), p.stderr.read()) for p in procs]


def _exactly_one_commits(runs: list[subprocess.CompletedProcess]) -> str:
    codes = sorted(r.returncode for r in runs)
    assert codes == [0, 2], [(r.returncode, r.stderr[-2000:]) for r in runs]
    loser = next(r for r in runs if r.returncode == 2)
    line = loser.stderr.strip().splitlines()[-1]
    assert line.startswith("easydata: error: output ") and (" is in use by run " in line or "already exists" in line), \
        loser.stderr[-2000:]
    assert "Traceback" not in loser.stderr
    return line


@pytest.mark.slow
def test_two_concurrent_launches_into_one_local_output_commit_once(tmp_path, tokenizer_dir):
    out = tmp_path / "out"
    runs = _launch_two(_job(tmp_path, tokenizer_dir, str(out)), dict(os.environ))
    _exactly_one_commits(runs)
    check = subprocess.run([sys.executable, "-m", "easydata", "validate", str(out)], capture_output=True, text=True,
                           timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    assert not (out / LOCK_NAME).exists()


@pytest.mark.slow
def test_two_concurrent_launches_into_one_s3_output_commit_once(tmp_path, tokenizer_dir):
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    from tests.test_s3 import moto_server

    with moto_server(tmp_path) as env:
        import fsspec

        os.environ.update(env)
        try:
            fsspec.filesystem("s3", skip_instance_cache=True).mkdir("easydata-out")
            runs = _launch_two(_job(tmp_path, tokenizer_dir, "s3://easydata-out/run"), {**os.environ, **env})
            _exactly_one_commits(runs)
            fs = fsspec.filesystem("s3", skip_instance_cache=True)
            manifest = json.loads(fs.cat("easydata-out/run/manifest.json"))
            assert manifest["totals"]["rows"] > 0 and not fs.exists(f"easydata-out/run/{LOCK_NAME}")
        finally:
            for key in env:
                os.environ.pop(key, None)


# A remote runner stand-in: accepts the job and returns, as DataflowRunner does; the job never commits here.
class SubmitOnlyRunner(PipelineRunner):
    def run_pipeline(self, pipeline: Any, options: Any) -> Any:
        from apache_beam.runners.runner import PipelineResult, PipelineState

        return PipelineResult(PipelineState.RUNNING)


@pytest.mark.slow
def test_a_submitted_job_holds_the_output_until_its_commit(tmp_path, tokenizer_dir, capsys, monkeypatch):
    """The launcher exits once the job is accepted; its detached lock keeps a second launch out (its pid is
    gone, which would make a launcher's own lock stale) until the job's commit releases it."""
    import beam_pipelines.batch
    from beam_pipelines.flex_template import main

    # The stand-in runs nothing, so its workers' reach (local paths here) does not matter.
    monkeypatch.setattr(beam_pipelines.batch, "check_reachable_by_workers", lambda config, runner: None)

    out = tmp_path / "out"
    job = _job(tmp_path, tokenizer_dir, str(out), documents=20)
    runner = f"--runner={__name__}.SubmitOnlyRunner"
    assert main([f"--config={job}", runner]) == 0
    holder = read_lock(str(out))
    assert holder is not None and holder.get("detached") is True
    assert main([f"--config={job}", runner]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"easydata: error: output '{out}' is held by job {holder['run_id']}, launched from host")
    assert line.endswith(f"remove '{out}/{LOCK_NAME}' and launch again")
    release_lock(str(out), holder["run_id"], detached_only=True)  # what the job's commit does
    assert read_lock(str(out)) is None
    assert main([f"--config={job}", "--num_shards=1"]) == 0  # a local launch now runs and commits
    assert json.loads((out / "manifest.json").read_text())["totals"]["rows"] > 0


@pytest.mark.slow
def test_a_detached_lock_outlives_its_launcher_process(tmp_path):
    out = tmp_path / "out"
    script = ("import sys; from easydata.run.lock import OutputLock; "
              f"OutputLock({str(out)!r}, 'job1', detached=True).acquire()")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)  # the launcher ends; the lock stays
    with pytest.raises(OutputError, match=r"is held by job job1, launched from host"):
        OutputLock(str(out), "job2", heartbeat_seconds=0).acquire()
    release_lock(str(out), "job2", detached_only=True)  # not its holder: nothing happens
    assert read_lock(str(out))["run_id"] == "job1"
    release_lock(str(out), "job1", detached_only=True)  # the job's commit
    with OutputLock(str(out), "local", heartbeat_seconds=0) as lock:
        release_lock(str(out), "local", detached_only=True)  # a local run's lock is its launcher's to release
        assert read_lock(str(out))["run_id"] == lock.run_id


def test_the_commit_refuses_an_output_another_run_committed_meanwhile(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    check_not_replaced(str(out), "mine", overwrite=False)  # nothing committed: fine
    (out / "manifest.json").write_text(json.dumps({"format_version": 1, "run": {"run_id": "other"}}))
    with pytest.raises(OutputError, match=r"^output '.*' was committed by run other while this run was running;"
                                          r" nothing was committed \(pass --overwrite to replace it\)$"):
        check_not_replaced(str(out), "mine", overwrite=False)
    check_not_replaced(str(out), "mine", overwrite=True)
    (out / "manifest.json").write_text(json.dumps({"format_version": 1, "run": {"run_id": "mine"}}))
    check_not_replaced(str(out), "mine", overwrite=False)  # a retried commit of this run
