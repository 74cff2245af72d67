"""Beam's import and worker chatter kept off the user's terminal: for the command and for Python API calls.

Importing Apache Beam warns about optional GCP libraries (`Failed to import GCSFileSystem`,
`apitools not found`, the second through an implicit `logging.basicConfig` on the root logger), and
its local workers report start-up notes as warnings. `quiet_beam_logs()` holds Beam's loggers at
ERROR and drops those root-logger notes for the length of a call, then puts everything back
(including a root handler Beam's implicit `basicConfig` added), so the caller's own logging setup
is untouched and real errors still show. `command_logging(verbose)` sets up the `easydata` command's own
terminal logging once, for the length of the process.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

__all__ = ["quiet_beam_logs", "command_logging"]

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
    from easydata.errors import DropUserErrors

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
