"""One run at a time per output (`easydata.run.lock`): the lock, its heartbeat, stale locks, real runs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from easydata.cli import main
from easydata.errors import OutputError
from easydata.run.lock import LOCK_NAME, OutputLock, read_lock
from tests.conftest import REPO_ROOT, make_texts, write_jsonl


@pytest.fixture(params=["local", "memory"])
def output_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "out")
    request.getfixturevalue("memory_fs")
    return "memory://locks/out"


def test_a_second_lock_on_the_same_output_names_the_holder(output_url: str) -> None:
    with OutputLock(output_url, "first0000001", heartbeat_seconds=0):
        holder = read_lock(output_url)
        assert (holder["run_id"], holder["host"], holder["pid"]) == ("first0000001", socket.gethostname(), os.getpid())
        with pytest.raises(OutputError) as info:
            OutputLock(output_url, "second000002", heartbeat_seconds=0).acquire()
        message = str(info.value)
        assert message.startswith(f"output '{output_url}' is in use by run first0000001 (host {socket.gethostname()},"
                                   f" pid {os.getpid()}, since ")
        assert "\n" not in message
    assert read_lock(output_url) is None  # released
    with OutputLock(output_url, "second000002", heartbeat_seconds=0):  # free again
        assert read_lock(output_url)["run_id"] == "second000002"


def _write_lock(output_url: str, **holder) -> None:
    import fsspec

    fs, root = fsspec.core.url_to_fs(output_url)
    fs.makedirs(root, exist_ok=True)
    fs.pipe_file(f"{root}/{LOCK_NAME}", json.dumps(holder).encode())


def test_a_dead_holders_lock_is_taken_over(output_url: str) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)  # a process of this host that has ended
    _write_lock(output_url, run_id="crashed00001", host=socket.gethostname(), pid=pid, started_at=time.time(),
                heartbeat_at=time.time())
    lock = OutputLock(output_url, "next00000001", heartbeat_seconds=0).acquire()
    assert lock.took_over == f"run crashed00001's lock is stale: process {pid} on this host has ended"
    assert read_lock(output_url)["run_id"] == "next00000001"
    lock.release()


def test_an_expired_lease_is_taken_over_and_a_fresh_one_is_not(output_url: str) -> None:
    _write_lock(output_url, run_id="remote000001", host="another-host", pid=1, started_at=0, heartbeat_at=time.time())
    with pytest.raises(OutputError, match="is in use by run remote000001 \\(host another-host, pid 1"):
        OutputLock(output_url, "mine00000001", heartbeat_seconds=0).acquire()
    _write_lock(output_url, run_id="remote000001", host="another-host", pid=1, started_at=0,
                heartbeat_at=time.time() - 3600, lease_seconds=300)
    lock = OutputLock(output_url, "mine00000001", heartbeat_seconds=0).acquire()
    assert lock.took_over.startswith("run remote000001's lock is stale: its last heartbeat is 3600 s old")
    lock.release()


def test_the_heartbeat_renews_the_lease(output_url: str) -> None:
    with OutputLock(output_url, "beating00001", heartbeat_seconds=0.05):
        first = read_lock(output_url)["heartbeat_at"]
        deadline = time.monotonic() + 10
        while read_lock(output_url)["heartbeat_at"] == first and time.monotonic() < deadline:
            time.sleep(0.02)
        assert read_lock(output_url)["heartbeat_at"] > first


@pytest.mark.parametrize("kind", ["file", "fifo"])
def test_an_output_path_that_is_not_a_directory_is_said_so(tmp_path: Path, tokenizer_dir: Path, capsys, kind) -> None:
    """A file (or a FIFO, /dev/null) as the output said it was "locked by '.easydata-lock', which cannot be read
    ... remove it and run again" (makedirs' FileExistsError taken for the lock's); the dry run said nothing."""
    target = tmp_path / "target"
    if kind == "file":
        target.write_text("mine")
    else:
        os.mkfifo(target)
    with pytest.raises(OutputError) as info:
        OutputLock(str(target), "run000000001", heartbeat_seconds=0).acquire()
    assert str(info.value) == f"output '{target}' exists and is not a directory: choose another --output"
    write_jsonl(tmp_path / "a.jsonl", ({"text": t} for t in make_texts(5)))
    args = ["tokenize", "--data-files", str(tmp_path / "a.jsonl"), "--tokenizer", str(tokenizer_dir), "--output",
            str(target), "--quiet", "--direct_num_workers=1"]
    assert main([*args, "--dry-run"]) == 0
    assert "the output path exists and is not a directory: the run would stop" in capsys.readouterr().out
    assert main(args) == 2
    assert capsys.readouterr().err.strip() == f"easydata: error: {info.value}"
    assert kind == "fifo" or target.read_text() == "mine"


@pytest.mark.slow
def test_a_run_into_a_locked_output_fails_in_one_line(tmp_path: Path, tokenizer_dir: Path, capsys) -> None:
    write_jsonl(tmp_path / "a.jsonl", ({"text": t} for t in make_texts(20)))
    args = ["tokenize", "--data-files", str(tmp_path / "a.jsonl"), "--tokenizer", str(tokenizer_dir),
            "--output", str(tmp_path / "out"), "--quiet", "--direct_num_workers=1"]
    with OutputLock(str(tmp_path / "out"), "holder000001", heartbeat_seconds=0):
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err
        assert err.startswith(f"easydata: error: output '{tmp_path / 'out'}' is in use by run holder000001 ")
        assert not (tmp_path / "out" / "manifest.json").exists()
    assert main(args) == 0  # once released
    assert (tmp_path / "out" / "manifest.json").exists() and not (tmp_path / "out" / LOCK_NAME).exists()


@pytest.mark.slow
def test_two_runs_started_together_into_one_output_never_both_succeed(tmp_path: Path, tokenizer_dir: Path) -> None:
    """Before the lock, both exited 0 and one silently replaced the other."""
    write_jsonl(tmp_path / "a.jsonl", ({"text": t} for t in make_texts(400, seed=2)))
    write_jsonl(tmp_path / "b.jsonl", ({"text": t} for t in make_texts(400, seed=3)))
    runs = [subprocess.Popen([sys.executable, "-m", "easydata", "tokenize", "--data-files", str(tmp_path / name),
                              "--tokenizer", str(tokenizer_dir), "--output", str(tmp_path / "out"), "--quiet",
                              "--direct_num_workers=1"], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for name in ("a.jsonl", "b.jsonl")]
    results = [(run.wait(timeout=300), run.stderr.read()) for run in runs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, err in results if code == 2).strip()
    assert len(loser.splitlines()) == 1 and loser.startswith("easydata: error: output ")
    assert "is in use by run " in loser or "already exists" in loser
    winner = next(i for i, (code, _) in enumerate(results) if code == 0)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["config"]["datasets"][0]["data_files"] == [str(tmp_path / ("a.jsonl", "b.jsonl")[winner])]
    assert main(["validate", str(tmp_path / "out")]) == 0
    assert not (tmp_path / "out" / LOCK_NAME).exists()


_DELAYED_READ = """
import sys, time
import easydata.run.lock as lock
_read = lock._read_raw
def _slow_read(output_dir):
    raw = _read(output_dir)
    time.sleep(float(sys.argv[1]))  # both runs judge the same stale lock, then act on it late
    return raw
lock._read_raw = _slow_read
from easydata.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.slow
def test_two_runs_taking_over_one_stale_lock_never_both_win(tmp_path: Path, tokenizer_dir: Path) -> None:
    """Before: with a 4 s delay after reading the lock, both runs removed the stale lock (the second
    removing the first's new one), both exited 0 into one output, one silently replaced."""
    out = tmp_path / "out"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _write_lock(str(out), run_id="crashed00001", host=socket.gethostname(), pid=int(dead.stdout),
                started_at=time.time(), heartbeat_at=time.time())
    write_jsonl(tmp_path / "a.jsonl", ({"text": t} for t in make_texts(200, seed=2)))
    write_jsonl(tmp_path / "b.jsonl", ({"text": t} for t in make_texts(200, seed=3)))
    runs = [subprocess.Popen([sys.executable, "-c", _DELAYED_READ, "4", "tokenize", "--data-files",
                              str(tmp_path / name), "--tokenizer", str(tokenizer_dir), "--output", str(out), "--quiet",
                              "--direct_num_workers=1"], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for name in ("a.jsonl", "b.jsonl")]
    results = [(run.wait(timeout=300), run.stderr.read()) for run in runs]
    assert sorted(code for code, _ in results) == [0, 2], results
    loser = next(err for code, err in results if code == 2).strip()
    assert len(loser.splitlines()) == 1 and "is in use by run " in loser, loser
    winner = next(i for i, (code, _) in enumerate(results) if code == 0)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["datasets"][0]["data_files"] == [str(tmp_path / ("a.jsonl", "b.jsonl")[winner])]
    assert main(["validate", str(out)]) == 0
    assert not any(p.name.startswith(LOCK_NAME) for p in out.iterdir())  # no lock, no file moved aside


def test_a_run_that_lost_its_lock_does_not_commit(tmp_path: Path) -> None:
    from easydata.run.lock import check_owner

    with OutputLock(str(tmp_path / "out"), "mine00000001", heartbeat_seconds=0):
        check_owner(str(tmp_path / "out"), "mine00000001")
        _write_lock(str(tmp_path / "out"), run_id="taker0000001", host="h", pid=1, heartbeat_at=time.time())
        with pytest.raises(OutputError, match="this run lost its lock on output .* to run taker0000001"):
            check_owner(str(tmp_path / "out"), "mine00000001")
