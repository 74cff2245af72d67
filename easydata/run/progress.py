"""Progress of a running pipeline, visible from the process that launched it.

Beam workers may be other processes (or other machines), so they report through small files:
each worker's `ProgressSink` rewrites `<progress_dir>/<worker-id>.json` with its running counters
at most once a second. `ProgressMonitor`, a thread in the launching process, sums those files and
draws a progress bar over the known total input bytes (tqdm on a terminal, a line every
`log_every` seconds otherwise). Reporting is best effort: a failed write never fails the job.

`progress_directory` makes the launcher's local directory for those files (none when no progress is shown),
and removes the ones launchers killed without cleanup (SIGKILL, a lost machine) left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Iterator, Optional

from easydata.figures import count, size
from easydata.io.filesystems import get_fs, join

__all__ = ["ProgressSink", "ProgressMonitor", "CountProgress", "progress_directory", "remove_stale_progress_dirs",
           "read_progress", "report_stage", "say"]

#: Seconds between progress lines on stderr when it is not a terminal (a log, CI).
LOG_EVERY_SECONDS = 10.0
#: A progress directory's name: this prefix, the launching process's id, a dash and `tempfile`'s random part.
PROGRESS_DIR_PREFIX = "easydata-progress-"
_PROGRESS_DIR_NAME = re.compile(re.escape(PROGRESS_DIR_PREFIX) + r"(\d+)-[^/]+$")
#: A progress directory of a process that no longer runs is removed once nothing in it changed for this long (a
#: live run's workers rewrite their files every second: the age spares the runs of another PID namespace).
STALE_PROGRESS_DIR_SECONDS = 3600.0

#: Reading and tokenizing count `input_bytes`, `documents`, `tokens` and the work `units` read to their end; the
#: stages after them count the groups they packed or sorted, the shards they wrote and whether the commit started
#: (`report_stage`).
_COUNTERS = ("input_bytes", "documents", "tokens", "units", "groups", "shards", "committing")


@contextlib.contextmanager
def progress_directory(enabled: bool) -> Iterator[Optional[str]]:
    """A fresh local directory where a run's workers report progress, removed when the run ends; None when
    `enabled` is False (no progress shown: workers then write no progress files, so nothing is made).

    Its name carries this process's id, so that one left by a launcher killed without cleanup is recognised:
    entering also removes this user's progress directories whose process is gone and which were untouched for
    `STALE_PROGRESS_DIR_SECONDS` (`remove_stale_progress_dirs`).
    """
    if not enabled:
        yield None
        return
    remove_stale_progress_dirs(tempfile.gettempdir())
    with tempfile.TemporaryDirectory(prefix=f"{PROGRESS_DIR_PREFIX}{os.getpid()}-", ignore_cleanup_errors=True) as path:
        yield path


def remove_stale_progress_dirs(parent: str) -> list[str]:
    """Removes the progress directories under `parent` that launchers killed without cleanup left: owned by
    this user, named with the id of a process that no longer exists, and neither they nor a file in them
    changed for `STALE_PROGRESS_DIR_SECONDS`. Returns their paths. Best effort, and POSIX only (elsewhere
    asking whether a process exists is not a harmless signal)."""
    if os.name != "posix":
        return []
    removed = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return []
    for entry in entries:
        match = _PROGRESS_DIR_NAME.match(entry.name)
        try:
            if (match is None or not entry.is_dir(follow_symlinks=False)
                    or entry.stat(follow_symlinks=False).st_uid != os.getuid()
                    or time.time() - _last_change(entry.path) < STALE_PROGRESS_DIR_SECONDS
                    or _process_exists(int(match.group(1)))):
                continue
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.path)
    return removed


def _last_change(directory: str) -> float:
    """When `directory` or a file in it last changed (workers rewrite their files in place every second)."""
    with os.scandir(directory) as files:
        return max([os.stat(directory).st_mtime, *(f.stat(follow_symlinks=False).st_mtime for f in files)])


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process; or not a pid at all: leave it
        return True
    return True


class ProgressSink:
    """Per-worker counters, flushed to `<progress_dir>/<id>.json` at most every `interval` seconds."""

    def __init__(self, progress_dir: Optional[str], interval: float = 1.0):
        self._dir = progress_dir
        self._interval = interval
        self._path = join(progress_dir, f"{os.getpid()}-{uuid.uuid4().hex[:8]}.json") if progress_dir else None
        self._counts = dict.fromkeys(_COUNTERS, 0)
        self._last = 0.0

    def add(self, **counts: int) -> None:
        if self._path is None:
            return
        for key, value in counts.items():
            self._counts[key] += int(value)
        if time.monotonic() - self._last >= self._interval:
            self.flush()

    def flush(self) -> None:
        if self._path is None:
            return
        self._last = time.monotonic()
        try:
            fs, path = get_fs(self._path)
            fs.makedirs(posixpath.dirname(path), exist_ok=True)
            fs.pipe_file(path, json.dumps(self._counts).encode())
        except Exception:  # progress is advisory: never fail the job for it
            pass


#: This process's sink per progress directory, for `report_stage`.
_STAGE_SINKS: dict[str, ProgressSink] = {}


def report_stage(progress_dir: Optional[str], **counts: int) -> None:
    """A step after tokenizing reports what it finished (`groups=1`, `shards=1`, `committing=1`) through one
    sink per process; written at once, so the launcher names the stage that runs (None: not reported)."""
    if progress_dir is None:
        return
    sink = _STAGE_SINKS.get(progress_dir)
    if sink is None:
        sink = _STAGE_SINKS[progress_dir] = ProgressSink(progress_dir, interval=0.0)
    sink.add(**counts)


def say(line: str) -> None:
    """A line on stderr that does not break a progress line being drawn there (tqdm clears and redraws it)."""
    if sys.stderr.isatty():
        from tqdm import tqdm

        tqdm.write(line, file=sys.stderr)
    else:
        print(line, file=sys.stderr, flush=True)


#: What a run does before its input is read, as the terminal says it.
PLANNING = "planning: listing inputs, loading tokenizers, choosing the engine, starting workers"

#: The bar's width (and the screen's height) on a terminal that does not say how large it is.
DEFAULT_COLUMNS, DEFAULT_ROWS = 100, 24


def terminal_columns() -> Optional[int]:
    """The width stderr's terminal reports, or None when it reports none (0 columns) or is no terminal."""
    try:
        columns = os.get_terminal_size(sys.stderr.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return None
    return columns if columns > 0 else None


def count_bar(total: int, desc: str, unit: str = "B") -> Any:
    """A tqdm bar over `total` bytes (or other `unit`s) on stderr (a terminal)."""
    from tqdm import tqdm

    sized = terminal_columns() is not None
    # A terminal that reports no size (`script`, some CI and multiplexer setups: 0 columns, 0 rows) still gets a
    # bar, at a default size; tqdm alone draws nothing there (no row to draw on).
    return tqdm(total=total, unit=unit, unit_scale=unit == "B", desc=desc, file=sys.stderr, leave=False,
                dynamic_ncols=sized, ncols=None if sized else DEFAULT_COLUMNS, nrows=None if sized else DEFAULT_ROWS)


def read_progress(progress_dir: str) -> dict[str, int]:
    """Sums every worker's latest counters."""
    totals = dict.fromkeys(_COUNTERS, 0)
    try:
        fs, root = get_fs(progress_dir)
        files = fs.glob(join(root, "*.json"))
        for file in files:
            try:
                data = json.loads(fs.cat_file(file))
            except (ValueError, OSError):
                continue  # a file being rewritten: counted at the next poll
            for key in _COUNTERS:
                totals[key] += int(data.get(key, 0))
    except Exception:
        pass
    return totals


class ProgressMonitor:
    """Background thread drawing the progress of a local run.

    Started before planning (`total_bytes` None), it says so from the first second: `planning` on the terminal
    (with the time it takes), or a line every `log_every` seconds; `reading(total_bytes)` then starts the bar.

    Args:
      progress_dir: where workers report (None only when not `enabled`).
      total_bytes: input bytes of the whole job (the bar's 100%); None: still planning.
      log_every: seconds between plain log lines when stderr is not a terminal.
      after_input: what the job does once every input is read (the bar's and the lines' stage then, so a
        bar at 100% never sits there without saying what runs), until the later steps report their own:
        `group_stage` with the groups done, writing shards with the shards written, the commit.
      group_stage: what the steps after the shuffle do to each group (`packing` or `sorting`).
    """

    def __init__(self, progress_dir: Optional[str], total_bytes: Optional[int], log_every: Optional[float] = None,
                 enabled: bool = True,
                 after_input: str = "shuffling and writing shards", group_stage: str = "sorting"):
        self._after_input, self._group_stage = after_input, group_stage
        self._dir = progress_dir
        self._total: Optional[int] = None if total_bytes is None else max(total_bytes, 1)
        self._units: Optional[int] = None
        self._log_every = LOG_EVERY_SECONDS if log_every is None else log_every
        self._enabled = enabled
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="easydata-progress", daemon=True)

    def __enter__(self) -> "ProgressMonitor":
        if self._enabled:
            self._thread.start()
        return self

    def reading(self, total_bytes: int, units: Optional[int] = None) -> None:
        """Planning is done: the job reads `total_bytes` of input from now on, in `units` work units (None: not
        counted). The bytes of a compressed file or an Arrow file are estimated at planning, and a dataset's
        `num_rows` stops its reading early: with the units known, the input is read when every unit is, so the
        progress says 100 % then, and not before."""
        self._total = max(total_bytes, 1)
        self._units = units

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _stage(self, counts: dict[str, int]) -> str:
        """The stage after reading, by what the later steps reported (`report_stage`)."""
        if counts["committing"]:
            return "committing"
        if counts["shards"]:
            return f"writing shards ({counts['shards']:,} written)"
        if counts["groups"]:
            return f"{self._group_stage} ({counts['groups']:,} groups done)"
        return self._after_input

    def _planning(self, start: float) -> bool:
        """Says that the run is being planned until `reading` is called; False when the monitor stopped first."""
        status, last_log = None, start
        if sys.stderr.isatty():
            from tqdm import tqdm

            status = tqdm(total=None, desc=PLANNING, bar_format="{desc}: {elapsed}", file=sys.stderr, leave=False,
                          ncols=terminal_columns() or DEFAULT_COLUMNS, nrows=DEFAULT_ROWS)
        try:
            while self._total is None:
                if self._stop.wait(0.5):
                    return False
                if status is not None:
                    status.refresh()
                elif time.monotonic() - last_log >= self._log_every:
                    last_log = time.monotonic()
                    print(f"[easydata] {PLANNING}, {last_log - start:.0f}s", file=sys.stderr, flush=True)
            return True
        finally:
            if status is not None:
                status.close()

    def _run(self) -> None:
        start = time.monotonic()
        if not self._planning(start):
            return
        bar = count_bar(self._total, "tokenizing") if sys.stderr.isatty() else None
        last_log = time.monotonic()
        while True:
            stopping = self._stop.wait(0.5)
            counts = read_progress(self._dir)
            if self._units is None:
                done = min(counts["input_bytes"], self._total)
                read_all = done >= self._total
            else:
                read_all = counts["units"] >= self._units
                done = self._total if read_all else min(counts["input_bytes"], self._total * 999 // 1000)
            if bar is not None:
                if read_all and bar.desc != self._stage(counts):
                    bar.set_description(self._stage(counts), refresh=False)
                bar.n = done
                # What has been read and tokenized so far: a mix or a split then writes a share of it
                # (the summary at the end says what the output holds). Drawn once more at the end, so
                # even a job shorter than the refresh interval shows its counts.
                bar.set_postfix(docs_read=counts["documents"], tokens_tokenized=counts["tokens"], refresh=False)
                bar.refresh()
            elif not stopping and time.monotonic() - last_log >= self._log_every:
                last_log = time.monotonic()
                elapsed = last_log - start
                stage = f"; {self._stage(counts)}" if read_all else ""
                print(f"[easydata] {100 * done / self._total:5.1f}% of input read: {count(counts['documents'], 'document')}"
                      f" read, {count(counts['tokens'], 'token')} tokenized{stage}, {elapsed:.0f}s",
                      file=sys.stderr, flush=True)
            if stopping:
                break
        if bar is not None:
            bar.close()


class CountProgress:
    """Progress of work done in this process over a known count: the input bytes `easydata train-tokenizer`
    reads (`unit="B"`), the rows `easydata validate` and `stats` check (`unit="rows"`). A tqdm bar on a
    terminal, otherwise a line on stderr every `log_every` seconds, as `ProgressMonitor` draws a pipeline's.
    `update` is cheap to call per batch; `stage` says in one line what follows."""

    def __init__(self, total: int, desc: str, unit: str = "B", log_every: Optional[float] = None):
        self._total, self._desc, self._unit = max(int(total), 1), desc, unit
        self._log_every = LOG_EVERY_SECONDS if log_every is None else log_every
        self._done = self._documents = 0
        self._start = self._last_log = time.monotonic()
        self._bar = count_bar(self._total, desc, unit) if sys.stderr.isatty() else None

    def update(self, done: int, documents: int = 0) -> None:
        """`done` more of the count (bytes, rows), `documents` more documents taken."""
        self._done, self._documents = min(self._done + done, self._total), self._documents + documents
        if self._bar is not None:
            self._bar.n = self._done
            if self._documents:
                self._bar.set_postfix(docs=self._documents, refresh=False)
            self._bar.refresh()
        elif time.monotonic() - self._last_log >= self._log_every:
            self._last_log = time.monotonic()
            of = f"of {size(self._total)}" if self._unit == "B" else f"of {self._total:,} {self._unit}"
            documents = f", {self._documents:,} documents" if self._documents else ""
            print(f"[easydata] {self._desc}: {100 * self._done / self._total:5.1f}% {of}{documents},"
                  f" {self._last_log - self._start:.0f}s", file=sys.stderr, flush=True)

    def stage(self, desc: str) -> None:
        """What was counted is done; `desc` is what runs now (one line: the bar is cleared)."""
        self.close()
        print(f"[easydata] {desc} ({self._documents:,} documents read in {time.monotonic() - self._start:.0f}s)",
              file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "CountProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()  # also on an error or Ctrl-C: its message starts on a line of its own, not after the bar
