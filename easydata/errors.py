"""Project exceptions.

Every error a user can cause (bad config, missing input, unknown tokenizer, existing output, corrupt
shard) is an `EasyDataError`. The CLI prints such errors as one line and exits non-zero; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import logging

__all__ = [
    "EasyDataError",
    "ConfigError",
    "InputError",
    "TokenizerError",
    "OutputError",
    "ValidationFailed",
    "DropUserErrors",
]


class EasyDataError(Exception):
    """Base class for errors caused by user input; reported as one line by the CLI."""


class ConfigError(EasyDataError, ValueError):
    """The pipeline configuration is invalid. `problems` lists every issue found."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        if len(self.problems) == 1:
            message = f"invalid config: {self.problems[0]}"
        else:
            message = f"invalid config ({len(self.problems)} problems): " + "; ".join(self.problems)
        super().__init__(message)


class InputError(EasyDataError):
    """An input file, glob or URL cannot be found or read."""


class TokenizerError(EasyDataError):
    """A tokenizer cannot be found, loaded, or lacks a token the config needs."""


class OutputError(EasyDataError):
    """The output location is unusable (exists without overwrite, not writable, ...)."""


class ValidationFailed(EasyDataError):
    """An output directory does not satisfy the format contract."""


class DropUserErrors(logging.Filter):
    """Drops log records that carry a user error (an `EasyDataError` as their exception), e.g. Beam's
    traceback log of a step that raised one: whoever runs the job reports it in one line. Workers
    extend it for the other forms their runtime reports the same error in."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], EasyDataError))
