"""What reaches the user's terminal, decided in one place: Beam's import and worker chatter, and the
reports of user errors, for the command, Python API calls and every kind of worker process.

Importing Apache Beam warns about optional GCP libraries (`Failed to import GCSFileSystem`,
`apitools not found`, the second through an implicit `logging.basicConfig` on the root logger), and
its local workers report start-up notes as warnings. `quiet_beam_logs()` holds Beam's loggers at
ERROR and drops those root-logger notes for the length of a call, then puts everything back
(including a root handler Beam's implicit `basicConfig` added), so the caller's own logging setup
is untouched and real errors still show. `command_logging(verbose)` sets up the `easydata` command's own
terminal logging once, for the length of the process.

A user or environment error (`easydata.errors.classify`) is reported once, in one line, by whoever runs the
job; every other report of it is dropped (`DropUserErrors`): in the launching process while a job runs
(`quiet_user_errors`), in a local worker process (`quiet_local_worker`: its log handlers and the tracebacks
Beam's harness prints on stderr) and in a Dask worker (`quiet_dask_worker`: also dask's "Compute Failed").
"""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import Any, Iterator

from easydata.errors import classify, ends_in_user_error, from_text

__all__ = ["quiet_beam_logs", "command_logging", "DropUserErrors", "quiet_user_errors", "quiet_local_worker",
           "quiet_dask_worker"]

_NOISE = ("apitools not found", "Failed to import GCSFileSystem", "semi_persistent_directory",
          "Discarding unparseable args")


class _DropBeamNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        return not (record.name.startswith("apache_beam") or any(n in record.getMessage() for n in _NOISE))


def command_logging(verbose: bool) -> None:
    """The `easydata` command's terminal: warnings and errors, without Beam's warnings, the known import
    notes, or the errors of user and environment problems (`main` prints those as one line); with
    `verbose`, Python's defaults (everything Beam logs shows)."""
    if verbose:
        return
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)  # a local dask cluster's scheduler logs at INFO
    handler.addFilter(_DropBeamNoise())
    handler.addFilter(DropUserErrors())
    logging.basicConfig(handlers=[handler], level=logging.WARNING)
    logging.getLogger("apache_beam").setLevel(logging.ERROR)


@contextlib.contextmanager
def quiet_beam_logs() -> Iterator[None]:
    """Silences Beam's warnings (not its errors) while the block runs."""
    beam = logging.getLogger("apache_beam")
    root = logging.getLogger()
    level, handlers = beam.level, list(root.handlers)
    noise = _DropBeamNoise()
    beam.setLevel(logging.ERROR)
    root.addFilter(noise)
    try:
        yield
    finally:
        beam.setLevel(level)
        root.removeFilter(noise)
        for handler in root.handlers[:]:
            if handler not in handlers:  # added by an implicit basicConfig during the call
                root.removeHandler(handler)


class DropUserErrors(logging.Filter):
    """Drops log records that carry a user or environment error: Beam's log of a step that raised one
    (the exception, or its traceback as text): whoever runs the job reports it in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None and classify(record.exc_info[1]) is not None:
            return False
        return not (record.levelno >= logging.ERROR and ends_in_user_error(record.getMessage()))


@contextlib.contextmanager
def quiet_user_errors() -> Iterator[None]:
    """While a job runs in this process: Beam's log of a step's user error is dropped (the caller raises it)."""
    logger, quiet = logging.getLogger("apache_beam.runners.common"), DropUserErrors()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


class _StderrWithoutUserErrorTracebacks:
    """A worker's `sys.stderr`: Beam's harness also prints the traceback of every failed bundle there
    (`print(traceback, file=sys.stderr)`); that of a user error is dropped like its log records."""

    def __init__(self, stream: Any):
        self._stream = stream
        self._dropped = False

    def write(self, text: str) -> int:
        dropped, self._dropped = self._dropped, False
        if text.startswith("Traceback (most recent call last):") and ends_in_user_error(text):
            self._dropped = True
        elif not (dropped and text == "\n"):  # print's line end after a dropped traceback
            self._stream.write(text)
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def quiet_local_worker() -> None:
    """In a local worker process (`beam_pipelines.local.local_worker`), for its life: a user error's reports
    are dropped from every log handler (its stderr and Beam's forwarding to the launcher, which logs the
    step's error and the failed bundle's traceback) and from the tracebacks Beam's harness prints."""
    quiet = DropUserErrors()
    for handler in logging.getLogger().handlers:
        handler.addFilter(quiet)
    sys.stderr = _StderrWithoutUserErrorTracebacks(sys.stderr)


class _DaskUserErrors(DropUserErrors):
    """Also drops dask's "Compute Failed" of a task that raised a user error (it holds the exception's repr,
    and so its marker)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not super().filter(record):
            return False
        if str(record.msg).startswith("Compute Failed") and isinstance(record.args, tuple) and len(record.args) > 3:
            return from_text(str(record.args[3])) is None
        return True


def quiet_dask_worker() -> None:
    """In a Dask worker process (`beam_pipelines.dask.dask_worker`), for its life: only errors reach its stderr,
    and not a user error's."""
    quiet = _DaskUserErrors()
    handler = logging.StreamHandler()
    handler.setLevel(logging.ERROR)
    handler.addFilter(quiet)
    logging.basicConfig(handlers=[handler], format="%(levelname)s:%(name)s:%(message)s")
    logging.getLogger("distributed.worker").addFilter(quiet)  # dask logs it through its own handler
