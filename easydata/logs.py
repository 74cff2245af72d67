"""Quiet Python API calls: Beam's import and worker chatter kept off the user's terminal.

Importing Apache Beam warns about optional GCP libraries (`Failed to import GCSFileSystem`,
`apitools not found`, the second through an implicit `logging.basicConfig` on the root logger), and
its local workers report start-up notes as warnings. `quiet_beam_logs()` holds Beam's loggers at
ERROR and drops those root-logger notes for the length of a call, then puts everything back
(including a root handler Beam's implicit `basicConfig` added), so the caller's own logging setup
is untouched and real errors still show.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

__all__ = ["quiet_beam_logs"]

_NOISE = ("apitools not found", "Failed to import GCSFileSystem", "semi_persistent_directory",
          "Discarding unparseable args")


class _DropBeamNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        return not (record.name.startswith("apache_beam") or any(n in record.getMessage() for n in _NOISE))


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
