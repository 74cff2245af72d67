"""Project exceptions.

Every error a user can cause (bad config, missing input, unknown tokenizer, existing output, corrupt
shard) is an `EasyDataError`. The CLI prints such errors as one line and exits non-zero; anything
else is a bug and keeps its traceback.

One mechanism tells a user error from a bug wherever it surfaces: as the exception itself
(`isinstance`), as text after a runner wrapped it (`user_error_in`: a traceback or Beam's wrapped
message, where it reads `ConfigError: ...` or `easydata.errors.ConfigError: ...`), or as its repr
(`user_error_repr_prefixes`: dask reports a failed task that way). The names come from the
`EasyDataError` class tree, so a new error class is covered everywhere at once.
"""

from __future__ import annotations

import errno
import logging
import re
from typing import Optional

__all__ = [
    "EasyDataError",
    "ConfigError",
    "InputError",
    "TransientInputError",
    "is_transient",
    "TokenizerError",
    "OutputError",
    "RunInconsistent",
    "ValidationFailed",
    "DropUserErrors",
    "environment_error_in",
    "user_error_in",
    "as_user_error",
    "ends_in_user_error",
    "user_error_repr_prefixes",
]

# Environment failures a run can meet in any worker: errno -> what to tell the user.
_ENVIRONMENT_ERRNOS = {28: "the disk is full", 122: "the disk quota is exceeded", 13: "permission denied",
                       30: "the filesystem is read-only", 24: "too many open files",
                       27: "a file reached the size limit of this process (ulimit -f)"}
_ERRNO = re.compile(r"\[Errno (\d+)\] ([^\n\\:\]]{1,80})(?:: '([^'\n\\]{1,300})')?")
_ERRNO_DETAIL = re.compile(r"\[errno (\d+)\] ([^\n\\\]\[]{1,80})")


def environment_error_in(text: str) -> Optional[str]:
    """`what happened (the system's words) at 'path'` for an OS-level failure such as a full disk, found
    in the text of an exception (Beam wraps a worker's failure in its own), else None."""
    for number, words, path in _ERRNO.findall(text):
        if int(number) in _ENVIRONMENT_ERRNOS:
            detail = next((w.strip() for n, w in _ERRNO_DETAIL.findall(text) if n == number), None)
            words = detail or words.strip()
            return f"{_ENVIRONMENT_ERRNOS[int(number)]} ({words})" + (f" at '{path}'" if path else "")
    return None


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


class TransientInputError(InputError):
    """Reading an input failed for a reason that may pass (a reset connection, a timeout, a store's I/O
    error): never a dead letter, since the data may be fine. The step fails, so a runner retries its
    bundle (Dataflow, Dask); a local run stops in one line, nothing committed."""


#: errno values of failures that may pass when the read is tried again.
_TRANSIENT_ERRNOS = frozenset({errno.EIO, errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNABORTED, errno.ECONNREFUSED,
                               errno.EAGAIN, errno.ENETDOWN, errno.ENETUNREACH, errno.ENETRESET, errno.EHOSTUNREACH,
                               errno.EHOSTDOWN, errno.EPIPE, errno.ESTALE, errno.EREMOTEIO})
#: Network error classes of the storage clients fsspec uses (aiohttp for http/gcs, botocore for s3, google-auth,
#: urllib3), by class name so none of them has to be importable.
_TRANSIENT_CLASS_NAMES = frozenset({"ClientConnectionError", "ClientPayloadError", "ServerDisconnectedError",
                                    "ServerTimeoutError", "EndpointConnectionError", "ConnectionClosedError",
                                    "ReadTimeoutError", "ConnectTimeoutError", "ResponseStreamingError",
                                    "IncompleteReadError", "ProtocolError", "TransportError", "IncompleteRead"})


def is_transient(error: BaseException) -> bool:
    """Whether a failure reading an input may pass when tried again (a network or storage error), as
    opposed to corrupt data (a bad gzip stream, invalid JSON or UTF-8, a damaged Parquet page), which
    reading again would meet again. Decided by the exception's class and errno, never its text."""
    import socket

    if isinstance(error, (ConnectionError, TimeoutError)):
        return True
    if isinstance(error, socket.gaierror):
        return error.errno == socket.EAI_AGAIN  # a temporary failure in name resolution
    if isinstance(error, OSError) and error.errno in _TRANSIENT_ERRNOS:
        return True
    return any(cls.__name__ in _TRANSIENT_CLASS_NAMES for cls in type(error).__mro__)


class TokenizerError(EasyDataError):
    """A tokenizer cannot be found, loaded, or lacks a token the config needs."""


class OutputError(EasyDataError):
    """The output location is unusable (exists without overwrite, not writable, ...)."""


class RunInconsistent(EasyDataError):
    """A run's counters do not add up at its commit (documents, rows or a mix's selection against what the
    output holds): a bug, never a user's doing, but nothing was committed and the run's tokenized work is
    kept, so it is said in one line with the `--resume` command, like an interrupted run."""


class ValidationFailed(EasyDataError):
    """An output directory does not satisfy the format contract."""


class DropUserErrors(logging.Filter):
    """Drops log records that carry a user error (an `EasyDataError` as their exception), e.g. Beam's
    traceback log of a step that raised one, or an environment failure (a full disk): whoever runs
    the job reports it in one line. Workers extend it for the other forms their runtime reports the
    same error in."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], EasyDataError):
            return False
        # A full disk (or another environment failure) is reported in one line by the launcher too.
        return not (record.levelno >= logging.ERROR and environment_error_in(
            f"{record.getMessage()} {record.exc_info[1] if record.exc_info else ''}"))


def _error_names() -> list[str]:
    """`EasyDataError` and every subclass of it, by class name."""
    names, todo = [], [EasyDataError]
    while todo:
        cls = todo.pop()
        names.append(cls.__name__)
        todo.extend(cls.__subclasses__())
    return sorted(set(names))


def _error_line() -> "re.Pattern[str]":
    names = "|".join(map(re.escape, _error_names()))
    return re.compile(rf"(?:\beasydata\.errors\.|(?<![\w.]))(?:{names}): ([^\n]+)")


def user_error_in(text: str) -> Optional[str]:
    """The message of the last easydata error named in `text` (a traceback, or the message of an
    exception a runner wrapped around it: the last one names the step, `... [while running 'X']`)."""
    found = _error_line().findall(text)
    return found[-1].strip() if found else None


def as_user_error(exc: BaseException) -> Optional[EasyDataError]:
    """The easydata error a runner wrapped in an error of its own (Beam's `RuntimeError` around a worker's
    traceback), rebuilt as its own class with its message, for the Python API to raise: callers catch
    `EasyDataError` (or `ConfigError`, ...) and see one clear line. None when `exc` holds none."""
    if isinstance(exc, EasyDataError) and not _STEP_NOTE.search(str(exc)):
        return exc
    text = f"{type(exc).__name__}: {exc}" if isinstance(exc, EasyDataError) else f"{exc}"
    found = list(_error_class_line().finditer(text))
    if not found:
        return None
    name, message = found[-1].group(1), found[-1].group(2).strip()
    message = _STEP_NOTE.sub("", message)  # Beam's note of the step
    classes, todo = {}, [EasyDataError]
    while todo:
        cls = todo.pop()
        classes[cls.__name__] = cls
        todo.extend(cls.__subclasses__())
    cls = classes.get(name, EasyDataError)
    error = cls.__new__(cls)
    Exception.__init__(error, message)  # the message as it was (a ConfigError's is already worded)
    if isinstance(error, ConfigError):
        error.problems = [message]
    return error


#: What Beam appends to an error raised in a step (`... [while running 'Mix/Plan']`).
_STEP_NOTE = re.compile(r" \[while running '[^']*'\]$")


def _error_class_line() -> "re.Pattern[str]":
    names = "|".join(map(re.escape, _error_names()))
    return re.compile(rf"(?:\beasydata\.errors\.|(?<![\w.]))({names}): ([^\n]+)")


def ends_in_user_error(text: str) -> bool:
    """Whether a formatted traceback ends in an easydata error or an environment failure (a full disk)."""
    lines = [line for line in text.splitlines() if line.strip()]
    return bool(lines) and (_error_line().match(lines[-1].strip()) is not None
                            or environment_error_in(lines[-1]) is not None)


def user_error_repr_prefixes() -> tuple[str, ...]:
    """How an easydata error's `repr` starts (`ConfigError(`, ...): dask reports failed tasks so."""
    return tuple(f"{name}(" for name in _error_names())
