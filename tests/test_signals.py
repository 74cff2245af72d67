"""Signals and environment failures end a run in two lines, with no worker left behind.

The installed CLI runs in a subprocess of its own session (as in a terminal) on real files with the
real Mistral tokenizer and the default multi-process runner. Ctrl-C (SIGINT to the whole process
group, as a terminal sends it) printed about 50 lines of worker tracebacks, SIGTERM about 100 lines of
grpc errors, a full disk 650 lines. Now: what happened and where the finished work is, then the exact
command that continues it; exit 130 / 143 / 2.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from easydata.run.checkpoint import completed_units
from tests.conftest import REPO_ROOT, write_jsonl

pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """8 files of standard-library sources (one work unit each): several seconds of tokenizing."""
    root = tmp_path_factory.mktemp("signals")
    modules = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:400]
    for i in range(8):
        write_jsonl(root / f"part-{i}.jsonl",
                    ({"text": p.read_text(encoding="utf-8", errors="replace")} for p in modules[i::8]))
    return root


def _command(corpus: Path, tokenizer: Path, out: Path) -> list[str]:
    return ["tokenize", "--data-files", str(corpus / "*.jsonl"), "--tokenizer", str(tokenizer), "--output", str(out),
            "--num-shards", "2"]


def _alive_in_group(group: int, wait: float = 5.0) -> list[int]:
    """Processes of the group still running (ended ones wait briefly as zombies for their reaper)."""
    deadline = time.monotonic() + wait
    while True:
        listed = subprocess.run(["ps", "-o", "pid=,stat=", "-g", str(group)], capture_output=True, text=True).stdout
        alive = [int(pid) for pid, stat in (line.split()[:2] for line in listed.splitlines() if line.strip())
                 if not stat.startswith("Z")]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def _start_and_signal(args: list[str], out: Path, sig: int, whole_group: bool,
                      repeat: int = 1) -> tuple[int, str, float, list[int]]:
    """Starts `easydata ARGS` in a session of its own, sends `sig` once a work unit is checkpointed (`repeat`
    times, 2 ms apart, as long as the group lives); returns (exit code, stderr, seconds from the signal to the
    exit, pids of the group left)."""
    proc = subprocess.Popen([sys.executable, "-m", "easydata", *args], cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            staging = next(out.glob(".easydata-tmp-*"), None) if out.exists() else None
            if staging is not None and completed_units(str(staging), "data", range(8)):
                break
            if proc.poll() is not None:
                pytest.fail(f"the run ended (exit {proc.returncode}) before the signal: {proc.stderr.read()}")
            time.sleep(0.02)
        sent = time.monotonic()
        for _ in range(repeat):
            try:
                os.killpg(proc.pid, sig) if whole_group else os.kill(proc.pid, sig)
            except ProcessLookupError:  # it has ended
                break
            time.sleep(0.002)
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
        return proc.returncode, err, took, _alive_in_group(proc.pid)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.parametrize("sig, whole_group, repeat, name, code, extra", [
    (signal.SIGINT, True, 1, "SIGINT", 130, []),    # Ctrl-C in a terminal: every process of the group
    (signal.SIGTERM, False, 1, "SIGTERM", 143, []),  # `kill PID`, a scheduler's stop: the command only
    # GNU `timeout`, Slurm, systemd: the command, then its group, so a second signal arrives while the first
    # stops the workers (the handler ran again inside that wait and the run hung for ever)
    (signal.SIGTERM, True, 200, "SIGTERM", 143, []),
    (signal.SIGINT, True, 200, "SIGINT", 130, []),
    # the terminal closed (an ssh session dropped without nohup): the launcher died at once and its workers
    # printed ~100 lines of grpc tracebacks, with no word of the kept work
    (signal.SIGHUP, False, 1, "SIGHUP", 129, []),
    # one worker, in the launching process (what the docs advise after an out-of-memory kill): 146 lines before
    (signal.SIGINT, True, 1, "SIGINT", 130, ["--direct_num_workers=1"]),
    (signal.SIGTERM, False, 1, "SIGTERM", 143, ["--direct_num_workers=1"]),
], ids=["SIGINT", "SIGTERM", "SIGTERM-repeated", "SIGINT-repeated", "SIGHUP", "SIGINT-one-worker",
        "SIGTERM-one-worker"])
def test_a_signal_ends_the_run_in_two_lines_and_resume_finishes_it(corpus, mistral_tokenizer_dir, tmp_path, sig,
                                                                   whole_group, repeat, name, code, extra):
    out = tmp_path / "out"
    args = [*_command(corpus, mistral_tokenizer_dir, out), *extra]
    returncode, err, took, left = _start_and_signal(args, out, sig, whole_group, repeat)
    lines = err.strip().splitlines()
    assert returncode == code, err
    assert len(lines) == 2 and "Traceback" not in err, err
    staging = next(out.glob(".easydata-tmp-*"))
    assert lines[0] == f"easydata: interrupted by {name}: the run stopped; its finished work is kept in {staging}"
    assert lines[1] == f"easydata: continue with: {shlex.join(['easydata', *args, '--resume'])}"
    assert took < 10 and left == [], (took, left)  # workers stopped with it, none left behind
    assert not (out / ".easydata-lock").exists()
    resumed = subprocess.run([sys.executable, "-m", "easydata", *args, "--resume", "--quiet"], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    documents = sum(len(path.read_text().splitlines()) for path in corpus.glob("*.jsonl"))
    assert manifest["run"]["resumed_units"] >= 1 and manifest["documents_in"] == documents


def test_signals_the_shell_ignored_stay_ignored(corpus, mistral_tokenizer_dir, tmp_path):
    """`nohup easydata ...` starts it with SIGHUP ignored, a script's `easydata ... &` with SIGINT ignored: the
    run (launcher and workers) must go on through them, as any Unix tool does; our handlers replaced both, so a
    closed terminal or a Ctrl-C meant for the script's foreground job stopped it."""
    out = tmp_path / "out"

    def ignore() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = subprocess.Popen([sys.executable, "-m", "easydata", *_command(corpus, mistral_tokenizer_dir, out), "--quiet"],
                            cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=ignore)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            staging = next(out.glob(".easydata-tmp-*"), None) if out.exists() else None
            if staging is not None and completed_units(str(staging), "data", range(8)):
                break
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.02)
        for sig in (signal.SIGHUP, signal.SIGINT):
            os.killpg(proc.pid, sig)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0 and "interrupted" not in err, err[-2000:]
    assert json.loads((out / "manifest.json").read_text())["documents_written"] > 0


def test_a_full_disk_is_one_error_with_the_resume_command(corpus, mistral_tokenizer_dir, tmp_path):
    """ENOSPC for real: the output is a 1 MiB tmpfs (this machine's tests run as root, as CI does)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    try:
        out = mount / "out"
        args = _command(corpus, mistral_tokenizer_dir, out)
        run = subprocess.run([sys.executable, "-m", "easydata", *args, "--quiet"], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=600)
        lines = run.stderr.strip().splitlines()
        assert run.returncode == 2 and len(lines) == 2 and "Traceback" not in run.stderr, run.stderr[-3000:]
        assert lines[0].startswith("easydata: error: the disk is full (No space left on device)")
        assert f"; the run stopped; its finished work is kept in {out}/.easydata-tmp-" in lines[0]
        assert lines[1] == f"easydata: continue with: {shlex.join(['easydata', *args, '--quiet', '--resume'])}"
        assert not (out / "manifest.json").exists()
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.parametrize("extra", [[], ["--direct_num_workers=1"]], ids=["workers", "one-worker"])
def test_a_file_size_limit_is_one_error_with_the_resume_command(corpus, mistral_tokenizer_dir, tmp_path, extra):
    """`ulimit -f` (EFBIG: Python ignores SIGXFSZ, so the write fails): 473 lines and 24 tracebacks before."""
    from tests.conftest import easydata_with_limits

    out = tmp_path / "out"
    args = [*_command(corpus, mistral_tokenizer_dir, out), *extra]
    run = subprocess.run(easydata_with_limits(*args, "--quiet", file_size=512 * 1024), cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=600)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 2 and "Traceback" not in run.stderr, run.stderr[-3000:]
    assert lines[0].startswith("easydata: error: a file reached the size limit of this process (ulimit -f)")
    assert lines[1] == f"easydata: continue with: {shlex.join(['easydata', *args, '--quiet', '--resume'])}"
    assert not (out / "manifest.json").exists()
    resumed = subprocess.run([sys.executable, "-m", "easydata", *args, "--quiet", "--resume"], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
