"""Project exceptions, and how they cross worker boundaries.

Every error a user can cause (bad config, missing input, unknown tokenizer, existing output, corrupt
shard) or the environment causes (a full disk: `EnvironmentFailure`) is an `EasyDataError`. The CLI
prints such errors as one line and exits non-zero; anything else is a bug and keeps its traceback.

A runner reports a worker's failure to the launching process as text (Beam's harness sends the
formatted traceback; Dask logs the exception's repr). So an `EasyDataError` that leaves a worker's step
is marked where it happens (`EasyDataError.mark`, called by `transforms.failures` around every step): it
gains the marker `easydata-error:` + base64 of `{"class": ..., "message": ...}` as JSON, printed on a
line of its own at the end of its traceback (an exception note; on Python 3.10, the last line of its
`str`) and in its `repr`. `from_text` decodes the last marker of a text back into an error of its own
class: the one place that reads a runner's text. Exception objects (an in-process failure) are
classified by class and `errno` (`classify`), never by their text. Errors raised in the launching
process carry no marker, so a Python API user's traceback shows the message alone.

Example:
    try:
        run()
    except Exception as e:
        error = classify(e)  # the EasyDataError inside, wherever it was raised; None: a bug
"""

from __future__ import annotations

import base64
import errno
import json
import os
import sys
from typing import Optional

__all__ = [
    "EasyDataError",
    "ConfigError",
    "InputError",
    "TransientInputError",
    "is_transient",
    "TRANSIENT_ADVICE",
    "STORE_ADVICE",
    "PROGRAMMING_ERRORS",
    "TokenizerError",
    "OutputError",
    "OutputInUse",
    "EnvironmentFailure",
    "RunInconsistent",
    "ValidationFailed",
    "MARKER",
    "classify",
    "from_text",
    "ends_in_user_error",
]

#: What starts the marker of an `EasyDataError` in a text a runner reports.
MARKER = "easydata-error:"
_MARKER_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=")
#: What Beam appends to the message of an error raised in a step (`... [while running 'Mix/Plan']`).
_STEP_NOTE = " [while running '"

# Environment failures a run can meet in any worker: errno -> what to tell the user.
_ENVIRONMENT_ERRNOS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
                       errno.EACCES: "permission denied", errno.EROFS: "the filesystem is read-only",
                       errno.EMFILE: "the process's limit of open files is reached (ulimit -n)",
                       errno.EFBIG: "a file reached the size limit of this process (ulimit -f)"}


class EasyDataError(Exception):
    """Base class for errors caused by user input or the environment; reported as one line by the CLI.

    Subclasses pass their message as the first argument. `mark()` gives the error its marker when it
    leaves a worker's step (`transforms.failures`); an error built with a marker argument (Beam rebuilds
    a step's error as `type(e)(e.args[0] + note, *e.args[1:])`, unpickling calls `type(e)(*e.args)`)
    keeps it. `str()` is the message alone (and the marker's line on Python 3.10, which prints no notes).
    """

    def __init__(self, *args: object):
        super().__init__(*args)
        self._marker: Optional[str] = None
        marker = next((a for a in args[1:] if isinstance(a, str) and a.startswith(MARKER)), None)
        if marker is not None:
            self._attach(marker)

    def mark(self) -> "EasyDataError":
        """Gives the error its marker (once), so that it is recognised in a runner's text; returns it."""
        if self._marker is None:
            marker = _encode(type(self).__name__, self.message)
            self.args = (*self.args, marker)
            self._attach(marker)
        return self

    def _attach(self, marker: str) -> None:
        self._marker = marker
        if _HAS_NOTES and marker not in getattr(self, "__notes__", ()):
            self.add_note(marker)  # printed on its own line after the error's in every traceback

    def __str__(self) -> str:
        message = str(self.args[0]) if self.args else ""
        return f"{message}\n{self._marker}" if self._marker and not _HAS_NOTES else message

    def __repr__(self) -> str:  # Dask reports a failed task by the exception's repr
        return f"{type(self).__name__}({self.message!r})" + (f" {self._marker}" if self._marker else "")

    @property
    def message(self) -> str:
        """What the CLI prints: the message as raised, without the marker or Beam's note of the step."""
        return _plain(str(self.args[0]) if self.args else "")


class ConfigError(EasyDataError, ValueError):
    """The pipeline configuration is invalid. `problems` lists every issue found."""

    def __init__(self, problems: list[str] | str, *marker: str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        if len(self.problems) == 1 and self.problems[0].startswith("invalid config"):  # rebuilt from its message
            message = self.problems[0]
        elif len(self.problems) == 1:
            message = f"invalid config: {self.problems[0]}"
        else:
            message = f"invalid config ({len(self.problems)} problems): " + "; ".join(self.problems)
        super().__init__(message, *marker)


class InputError(EasyDataError):
    """An input file, glob or URL cannot be found or read."""


class TransientInputError(InputError):
    """Reading an input failed for a reason that may pass (a reset connection, a timeout, a store's I/O
    error): never a dead letter, since the data may be fine. The step fails, so a runner retries its
    bundle (Dataflow, Dask); a local run stops in one line, nothing committed."""


#: What a `TransientInputError`'s message ends with, after what failed where.
TRANSIENT_ADVICE = (" (a network or storage error, not bad data: nothing was committed; run again, with --resume to"
                    " keep the work done)")

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
#: The base classes of the storage clients' own errors, raised before or instead of an answer from the store: no
#: credentials or an expired login, a profile, region or endpoint that does not exist, a store that cannot be
#: reached (botocore for `s3://`, google-auth for `gs://`), by module and class name, so none has to be
#: importable. The store's answers (403, 404, ...) reach us as `OSError`s from fsspec instead.
_STORE_CLIENT_ERRORS = frozenset({("botocore.exceptions", "BotoCoreError"),
                                  ("google.auth.exceptions", "GoogleAuthError")})
#: Where a store-client error's message sends the user.
STORE_ADVICE = "credentials, profile and endpoint come from the environment: docs/operations.md, 'Remote storage'"


def _is_store_client_error(error: BaseException) -> bool:
    """An error of a storage client library itself (`_STORE_CLIENT_ERRORS`): the environment's doing, not ours."""
    return any((cls.__module__, cls.__name__) in _STORE_CLIENT_ERRORS for cls in type(error).__mro__)


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


#: Bugs, not bad input or a failing environment: never turned into dead letters, never reported as a user's
#: error (a reader of a corrupt file first catches what its library raises for bad data, e.g. pyarrow's
#: `KeyError` for a missing column, before this).
PROGRAMMING_ERRORS = (TypeError, AttributeError, NameError, KeyError, IndexError, AssertionError, RecursionError,
                      MemoryError, NotImplementedError)


class TokenizerError(EasyDataError):
    """A tokenizer cannot be found, loaded, or lacks a token the config needs."""


class OutputError(EasyDataError):
    """The output location is unusable (exists without overwrite, not writable, ...)."""


class OutputInUse(OutputError):
    """Another run that is still alive holds the output's lock (`easydata.run.lock`); the message names it."""


class EnvironmentFailure(EasyDataError):
    """The machine refused a write or an open: a full disk, a quota, permissions, a read-only filesystem,
    too many open files, `ulimit -f`; or a storage client could not be used (no credentials, an unknown
    profile, an endpoint that does not answer). Not a bug and not bad data; the run stops and its finished
    work is kept for `--resume`. Made from the `OSError` or the client's error by `EnvironmentFailure.of`."""

    @classmethod
    def of(cls, error: BaseException, path: Optional[str] = None) -> Optional["EnvironmentFailure"]:
        """The failure `error` is (or was caused by), as `what happened (the system's words) at 'path'` (the
        error's own file name, else `path`: pyarrow's errors name none); None when it is no environment
        failure. Decided by `errno` and the class, never by text."""
        for link in _chain(error):
            if isinstance(link, EnvironmentFailure):
                return link
            code = link.errno if isinstance(link, OSError) else None
            if code is None and isinstance(link, PermissionError):  # an object store's 403 (s3fs, gcsfs): no errno
                code = errno.EACCES
            if code in _ENVIRONMENT_ERRNOS:
                # the system's words (a library's strerror may wrap them); a store's own when it gave no errno
                words = os.strerror(code) if link.errno is not None else link.strerror or str(link) or os.strerror(code)
                where = f" at '{link.filename or path}'" if link.filename or path else ""
                return cls(f"{_ENVIRONMENT_ERRNOS[code]} ({words}){where}")
            if _is_store_client_error(link):
                where = f" for '{path}'" if path else ""
                return cls(f"the storage client failed{where}: {type(link).__name__}: {link} ({STORE_ADVICE})")
        return None


class RunInconsistent(EasyDataError):
    """A run's counters do not add up at its commit (documents, rows or a mix's selection against what the
    output holds): a bug, never a user's doing, but nothing was committed and the run's tokenized work is
    kept, so it is said in one line with the `--resume` command, like an interrupted run."""


class ValidationFailed(EasyDataError):
    """An output directory does not satisfy the format contract."""


_HAS_NOTES = sys.version_info >= (3, 11)


def _plain(message: str) -> str:
    """`message` without a marker line (Python 3.10 keeps it in the message) or Beam's note of the step
    (added when Beam rebuilt the error: `... [while running 'Mix/Plan']`)."""
    message = message.split("\n" + MARKER)[0]
    note = message.rfind(_STEP_NOTE)
    return message[:note] if note >= 0 and message.endswith("']") else message


def _encode(name: str, message: str) -> str:
    payload = json.dumps({"class": name, "message": message}, ensure_ascii=True).encode()
    return MARKER + base64.urlsafe_b64encode(payload).decode("ascii")


def _error_classes() -> dict[str, type]:
    """`EasyDataError` and every subclass of it, by class name."""
    classes, todo = {}, [EasyDataError]
    while todo:
        cls = todo.pop()
        classes.setdefault(cls.__name__, cls)
        todo.extend(cls.__subclasses__())
    return classes


def _decode(token: str) -> Optional[EasyDataError]:
    try:
        fields = json.loads(base64.urlsafe_b64decode(token.encode("ascii")))
        name, message = str(fields["class"]), str(fields["message"])
    except (ValueError, KeyError, TypeError):
        return None
    message = _plain(message)
    cls = _error_classes().get(name, EasyDataError)
    error = cls.__new__(cls)
    EasyDataError.__init__(error, message)  # the message as it was worded (a ConfigError's already is); unmarked
    if isinstance(error, ConfigError):
        error.problems = [message]
    return error


def _markers(text: str) -> list[str]:
    """The base64 token of every marker in `text`, in order."""
    found, start = [], text.find(MARKER)
    while start >= 0:
        end = start + len(MARKER)
        while end < len(text) and text[end] in _MARKER_CHARS:
            end += 1
        found.append(text[start + len(MARKER):end])
        start = text.find(MARKER, end)
    return found


def from_text(text: str) -> Optional[EasyDataError]:
    """The error of the last marker in `text` (a worker's traceback, or the message of the error a runner
    raised around it), rebuilt as its own class with its message (without Beam's note of the step);
    None when `text` holds no marker."""
    for token in reversed(_markers(text)):
        error = _decode(token)
        if error is not None:
            return error
    return None


def _chain(error: BaseException) -> list[BaseException]:
    """`error` and the errors it was raised from (`raise ... from`), outermost first. Not the errors it was
    raised while handling: a bug met while handling a full disk is a bug."""
    chain: list[BaseException] = []
    link: Optional[BaseException] = error
    while link is not None and link not in chain:
        chain.append(link)
        link = link.__cause__
    return chain


def classify(error: BaseException) -> Optional[EasyDataError]:
    """The user or environment error behind `error`, None for a bug.

    In order: `error` itself or an error it was raised from that is an `EasyDataError` (raised in this
    process); such an `OSError` with an environment `errno` (`EnvironmentFailure.of`); the marker
    of a worker's error in `error`'s text (a runner's wrapping of a failure elsewhere: `from_text`).
    """
    for link in _chain(error):
        if isinstance(link, EasyDataError):
            return link
    environment = EnvironmentFailure.of(error)
    if environment is not None:
        return environment
    notes = "\n".join(str(n) for n in getattr(error, "__notes__", ()) or ())
    return from_text(f"{error}\n{notes}")


def ends_in_user_error(text: str) -> bool:
    """Whether a formatted traceback (or a runner's message holding one) ends in a user or environment
    error: its last line holds a marker. A bug raised while one was handled ends in the bug's line."""
    lines = [line for line in text.splitlines() if line.strip()]
    return bool(lines) and MARKER in lines[-1] and from_text(lines[-1]) is not None
