"""Tests for `easydata.run.progress`: worker sinks write their counters, `read_progress` sums every worker's
latest file (skipping ones being rewritten), a sink without a directory does nothing, and the monitor
prints plain progress lines off a terminal and stops when its `with` block ends."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from easydata.run.progress import ProgressMonitor, ProgressSink, read_progress

ZERO = {"input_bytes": 0, "documents": 0, "tokens": 0, "units": 0, "groups": 0, "shards": 0, "committing": 0}


def progress_files(directory: Path) -> dict[str, dict[str, int]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))}


def test_sink_writes_its_counters(tmp_path: Path) -> None:
    sink = ProgressSink(str(tmp_path / "progress"), interval=3600)
    sink.add(input_bytes=100, documents=2, tokens=50)
    sink.flush()
    files = progress_files(tmp_path / "progress")
    assert list(files.values()) == [{**ZERO, "input_bytes": 100, "documents": 2, "tokens": 50}]
    (name,) = files
    assert re.fullmatch(r"\d+-[0-9a-f]{8}\.json", name)  # <pid>-<random>: unique per worker
    sink.add(input_bytes=20, documents=1)  # within the interval: buffered
    assert progress_files(tmp_path / "progress")[name] == {**ZERO, "input_bytes": 100, "documents": 2, "tokens": 50}
    sink.flush()
    assert progress_files(tmp_path / "progress")[name] == {**ZERO, "input_bytes": 120, "documents": 3, "tokens": 50}


def test_sink_flushes_every_add_with_zero_interval(tmp_path: Path) -> None:
    sink = ProgressSink(str(tmp_path), interval=0)
    for _ in range(5):
        sink.add(documents=1, tokens=7)
    assert read_progress(str(tmp_path)) == {**ZERO, "input_bytes": 0, "documents": 5, "tokens": 35}


def test_read_progress_sums_several_sinks(tmp_path: Path) -> None:
    sinks = [ProgressSink(str(tmp_path), interval=0) for _ in range(3)]
    for i, sink in enumerate(sinks, start=1):
        sink.add(input_bytes=1000 * i, documents=i, tokens=10 * i)
    sinks[0].add(documents=4)
    assert len(progress_files(tmp_path)) == 3
    assert read_progress(str(tmp_path)) == {**ZERO, "input_bytes": 6000, "documents": 10, "tokens": 60}


def test_read_progress_skips_partial_files_and_missing_keys(tmp_path: Path) -> None:
    ProgressSink(str(tmp_path), interval=0).add(input_bytes=5, documents=1, tokens=3)
    (tmp_path / "being-rewritten.json").write_text('{"input_bytes": 9')  # a torn write
    (tmp_path / "old-worker.json").write_text('{"documents": 2}')
    (tmp_path / "notes.txt").write_text('{"documents": 100}')  # not a progress file
    assert read_progress(str(tmp_path)) == {**ZERO, "input_bytes": 5, "documents": 3, "tokens": 3}


def test_read_progress_of_a_missing_directory(tmp_path: Path) -> None:
    assert read_progress(str(tmp_path / "nowhere")) == ZERO


def test_sink_without_directory_does_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    sink = ProgressSink(None, interval=0)
    sink.add(input_bytes=10, documents=1, tokens=5)
    sink.flush()
    assert list(tmp_path.iterdir()) == []


def test_sink_never_fails_the_job(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    sink = ProgressSink(str(blocker / "progress"), interval=0)
    sink.add(documents=1)  # cannot create the directory: silently ignored
    sink.flush()
    assert blocker.read_text() == "not a directory"


def test_sink_works_on_memory_filesystem(memory_fs: Any) -> None:
    ProgressSink("memory://progress", interval=0).add(input_bytes=3, documents=1, tokens=2)
    ProgressSink("memory://progress", interval=0).add(input_bytes=4, documents=1, tokens=1)
    assert read_progress("memory://progress") == {**ZERO, "input_bytes": 7, "documents": 2, "tokens": 3}


# ---- monitor -------------------------------------------------------------------------------------


def monitor_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "easydata-progress"]


@pytest.mark.slow
def test_monitor_prints_plain_lines_off_a_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ProgressSink(str(tmp_path), interval=0).add(input_bytes=250, documents=3, tokens=1234)
    ProgressSink(str(tmp_path), interval=0).add(input_bytes=250, documents=1000, tokens=1_000_000)
    with ProgressMonitor(str(tmp_path), total_bytes=2000, log_every=0.01):
        assert len(monitor_threads()) == 1
        deadline = time.monotonic() + 5
        err = ""
        while not err and time.monotonic() < deadline:  # the first line comes after about 0.5 s
            time.sleep(0.05)
            err = capsys.readouterr().err
    assert monitor_threads() == []
    line = err.splitlines()[0]
    assert re.fullmatch(r"\[easydata\]  25\.0% of input read: 1,003 documents read, 1,001,234 tokens tokenized, \d+s", line), line
    time.sleep(0.6)
    assert capsys.readouterr().err == ""  # stopped: nothing more is printed


def test_monitor_caps_at_100_percent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ProgressSink(str(tmp_path), interval=0).add(input_bytes=5000, documents=1, tokens=1)
    with ProgressMonitor(str(tmp_path), total_bytes=0, log_every=0):  # unknown total: counted as 1 byte
        deadline = time.monotonic() + 5
        err = ""
        while not err and time.monotonic() < deadline:
            time.sleep(0.05)
            err = capsys.readouterr().err
    assert err.startswith("[easydata] 100.0% of input read: 1 document read, 1 token tokenized; shuffling and writing"
                          " shards, ")


def test_disabled_monitor_starts_no_thread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ProgressSink(str(tmp_path), interval=0).add(input_bytes=1, documents=1, tokens=1)
    with ProgressMonitor(str(tmp_path), total_bytes=10, log_every=0, enabled=False):
        assert monitor_threads() == []
        time.sleep(0.6)
    assert capsys.readouterr().err == ""


def _dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_progress_directories_of_killed_launchers_are_removed(tmp_path: Path) -> None:
    """A launcher killed with SIGKILL cannot remove its progress directory; the next run removes those of
    processes that are gone and untouched for an hour, and nothing else."""
    import os

    from easydata.run.progress import STALE_PROGRESS_DIR_SECONDS, remove_stale_progress_dirs

    dead, old = _dead_pid(), time.time() - STALE_PROGRESS_DIR_SECONDS - 60
    made = {name: tmp_path / name for name in (
        f"easydata-progress-{dead}-abc123",  # stale: removed
        f"easydata-progress-{dead}-recent",  # its process is gone, but touched within the hour
        f"easydata-progress-{os.getpid()}-alive",  # a live process's
        "easydata-progress-abc123",  # not this naming (no pid): left alone
        f"other-{dead}-abc123")}
    for path in made.values():
        path.mkdir()
        (path / "1-abcd.json").write_text("{}")
    for name, path in made.items():
        if not name.endswith("-recent"):
            os.utime(path / "1-abcd.json", (old, old))
            os.utime(path, (old, old))
    stale_dir_fresh_file = tmp_path / f"easydata-progress-{dead}-writing"  # a worker still rewrites its file
    stale_dir_fresh_file.mkdir()
    (stale_dir_fresh_file / "1-abcd.json").write_text("{}")
    os.utime(stale_dir_fresh_file, (old, old))
    (tmp_path / f"easydata-progress-{dead}-file").write_text("not a directory")
    os.utime(tmp_path / f"easydata-progress-{dead}-file", (old, old))

    assert remove_stale_progress_dirs(str(tmp_path)) == [str(made[f"easydata-progress-{dead}-abc123"])]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [name for name in made if name != f"easydata-progress-{dead}-abc123"]
        + [f"easydata-progress-{dead}-file", stale_dir_fresh_file.name])


def test_a_run_without_progress_makes_no_progress_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, every run made one in the temporary directory, `--quiet` too, and a killed one stayed there."""
    import os
    import tempfile

    from easydata.run.progress import STALE_PROGRESS_DIR_SECONDS, progress_directory

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    stale = tmp_path / f"easydata-progress-{_dead_pid()}-left"
    stale.mkdir()
    old = time.time() - STALE_PROGRESS_DIR_SECONDS - 60
    os.utime(stale, (old, old))
    with progress_directory(False) as path:
        assert path is None
        assert list(tmp_path.iterdir()) == [stale]
    with progress_directory(True) as path:
        assert path is not None and Path(path).parent == tmp_path and Path(path).is_dir()
        assert Path(path).name.startswith(f"easydata-progress-{os.getpid()}-")
        assert list(tmp_path.iterdir()) == [Path(path)]  # the stale one went
    assert list(tmp_path.iterdir()) == []
    with progress_directory(True) as path:  # removed under a run (another namespace's sweep): no error at its end
        import shutil

        shutil.rmtree(path)



def _in_a_pty(args: list[str], columns: int | None) -> str:
    """Runs `python -m easydata ARGS` with its stdio on a new pseudo-terminal (of `columns` x 24, or of no
    size at all, as `script` and some CI and multiplexer setups give); returns what it drew."""
    import fcntl
    import os
    import select
    import struct
    import subprocess
    import sys
    import termios

    master, slave = os.openpty()
    if columns is not None:
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "easydata", *args], stdin=slave, stdout=slave, stderr=slave,
                            close_fds=True)
    os.close(slave)
    out = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the child closed its end
                    break
                if not data:
                    break
                out += data
            elif proc.poll() is not None:
                break
        assert proc.wait(timeout=300) == 0, out.decode(errors="replace")
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return out.decode("utf-8", errors="replace")


@pytest.mark.slow
@pytest.mark.parametrize("columns", [None, 120], ids=["no-size", "sized"])
def test_a_terminal_gets_a_progress_bar_even_when_it_reports_no_size(tmp_path, tokenizer_dir, columns) -> None:
    """Before: under a terminal reporting 0 x 0 (`script`), nothing was drawn until the summary."""
    from tests.conftest import make_texts, write_jsonl

    write_jsonl(tmp_path / "a.jsonl", ({"text": t} for t in make_texts(3000)))
    args = ["tokenize", "--data-files", str(tmp_path / "a.jsonl"), "--tokenizer", str(tokenizer_dir), "--output"]
    drawn = _in_a_pty([*args, str(tmp_path / "out")], columns)
    bars = [line for line in drawn.split("\r") if line.startswith("tokenizing:")]
    assert bars and all("%|" in bar and "B/s" in bar for bar in bars), drawn[:2000]  # share, bar, rate
    # Its counts, under the name of whichever stage runs when they are drawn (a small job reads in a moment).
    staged = [line for line in drawn.split("\r") if "%|" in line]
    assert any("docs_read=" in bar and "tokens_tokenized=" in bar for bar in staged), drawn[:2000]
    assert max(len(bar.rstrip()) for bar in bars) <= (columns or 100)
    assert "wrote " in drawn  # then the summary
    # From the first second: planning is said (with its time) before the bar, not a blank screen.
    assert "planning: listing inputs" in drawn and drawn.index("planning: ") < drawn.index("tokenizing:"), drawn[:500]
    quiet = _in_a_pty([*args, str(tmp_path / "quiet"), "--quiet"], columns)
    assert "tokenizing:" not in quiet


def test_lines_name_the_stage_once_every_input_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """After tokenizing, the bar sat at 100 % with no word of the packing, shuffling and writing going on."""
    ProgressSink(str(tmp_path), interval=0).add(input_bytes=2000, documents=7, tokens=70)
    with ProgressMonitor(str(tmp_path), total_bytes=2000, log_every=0.01, after_input="packing and writing"):
        deadline = time.monotonic() + 5
        err = ""
        while not err and time.monotonic() < deadline:
            time.sleep(0.05)
            err = capsys.readouterr().err
    assert re.fullmatch(r"\[easydata\] 100\.0% of input read: 7 documents read, 70 tokens tokenized; packing and"
                        r" writing, \d+s", err.splitlines()[0]), err


def test_each_stage_after_reading_says_what_it_has_done(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """After tokenizing, the lines named one fixed label through packing, writing and the commit; now each step
    reports what it finished (`report_stage`) and the line names the stage that runs, with its own count."""
    from easydata.run.progress import report_stage

    ProgressSink(str(tmp_path), interval=0).add(input_bytes=2000, documents=7, tokens=70)
    for counts, expected in [({"groups": 3}, "; packing (3 groups done), "),
                             ({"shards": 2}, "; writing shards (2 written), "),
                             ({"committing": 1}, "; committing, ")]:
        report_stage(str(tmp_path), **counts)
        with ProgressMonitor(str(tmp_path), total_bytes=2000, log_every=0.01, after_input="packing and writing",
                             group_stage="packing"):
            deadline, err = time.monotonic() + 5, ""
            while not err and time.monotonic() < deadline:
                time.sleep(0.05)
                err = capsys.readouterr().err
        assert expected in err.splitlines()[0], err
    report_stage(None, groups=1)  # not reported: nothing written, nothing raised


def test_the_input_is_read_when_every_unit_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The plan's bytes are estimates for compressed and Arrow files, and `num_rows` stops reading early: by the
    bytes alone, the lines said 100 % (and the next stage) while units were still read, or never said it."""

    def first_line() -> str:
        deadline, err = time.monotonic() + 5, ""
        while not err and time.monotonic() < deadline:
            time.sleep(0.05)
            err = capsys.readouterr().err
        return err.splitlines()[0]

    ProgressSink(str(tmp_path), interval=0).add(input_bytes=2500, documents=7, tokens=70, units=1)
    with ProgressMonitor(str(tmp_path), 2000, log_every=0.01, after_input="packing and writing") as monitor:
        monitor.reading(2000, units=2)  # more bytes than planned, one unit of two read: not all read
        line = first_line()
    assert re.fullmatch(r"\[easydata\]  99\.9% of input read: 7 documents read, 70 tokens tokenized, \d+s", line), line
    ProgressSink(str(tmp_path), interval=0).add(input_bytes=10, documents=1, units=1)
    with ProgressMonitor(str(tmp_path), 9000, log_every=0.01, after_input="packing and writing") as monitor:
        monitor.reading(9000, units=2)  # fewer bytes than planned, every unit read: all of it
        line = first_line()
    assert re.fullmatch(r"\[easydata\] 100\.0% of input read: 8 documents read, 70 tokens tokenized; packing and"
                        r" writing, \d+s", line), line


@pytest.mark.slow
@pytest.mark.parametrize("pack", [True, False], ids=["packed", "sorted"])
def test_a_run_reports_its_groups_shards_and_commit(tmp_path: Path, tokenizer_dir: Path, pack: bool) -> None:
    import apache_beam as beam

    from beam_pipelines.batch import build_batch_pipeline
    from beam_pipelines.runners import make_runner_and_options
    from easydata.config import PipelineConfig
    from easydata.run.run_plan import prepare_run
    from tests.conftest import make_texts, write_jsonl

    write_jsonl(tmp_path / "a.jsonl", ({"text": t} for t in make_texts(200, seed=3)))
    config = PipelineConfig.from_dict({
        "default_tokenizer": str(tokenizer_dir), "datasets": [{"name": "web", "data_files": str(tmp_path / "a.jsonl")}],
        "pack": {"enabled": pack, "seq_length": 64}, "save": {"output_dir": str(tmp_path / "out"), "num_shards": 3}})
    plan = prepare_run(config, group_bytes=4096)
    progress = tmp_path / "progress"
    runner, options = make_runner_and_options(["--direct_num_workers=1"])
    with beam.Pipeline(runner=runner, options=options) as pipeline:
        build_batch_pipeline(pipeline, config, plan, time.time(), progress_dir=str(progress))
    counts = read_progress(str(progress))
    assert counts["units"] == len(plan.datasets[0].unit_ids(config.datasets[0]))  # each unit once, read through
    assert 1 < counts["groups"] <= plan.datasets[0].num_groups  # the non-empty groups, each once
    assert (counts["shards"], counts["committing"], counts["documents"]) == (3, 1, 200)


def test_planning_is_said_until_reading_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """17-22 s of blank screen before the bar on a busy machine: the monitor now starts before planning."""
    from easydata.run.progress import PLANNING

    ProgressSink(str(tmp_path), interval=0).add(input_bytes=500, documents=3, tokens=30)
    with ProgressMonitor(str(tmp_path), None, log_every=0.01) as monitor:
        deadline, err = time.monotonic() + 5, ""
        while "planning" not in err and time.monotonic() < deadline:
            time.sleep(0.05)
            err += capsys.readouterr().err
        monitor.reading(1000)
        while "of input read" not in err and time.monotonic() < deadline:
            time.sleep(0.05)
            err += capsys.readouterr().err
    lines = err.splitlines()
    assert re.fullmatch(rf"\[easydata\] {PLANNING}, \d+s", lines[0]), err
    assert any(line.startswith("[easydata]  50.0% of input read: 3 documents read") for line in lines), err
