"""`classified_failures`: errors are classified where they happen, in the step. A user error leaves a DoFn
marked (`easydata.errors.EasyDataError.mark`), and an environment failure (a full disk, `ulimit -f`, ...)
leaves it as a marked `easydata.errors.EnvironmentFailure` (decided by its `errno`, or by a storage client's
error class: no credentials, an endpoint that does not answer), so that the launching process recognises both
in the worker's traceback by their marker (`easydata.errors.from_text`) whatever the runner wrapped around it.

Every DoFn and CombineFn of this package, and every named function it maps with, is decorated
(`tests/test_errors.py` checks the classes). The methods Beam calls that a class defines (`setup`,
`process`, `finish_bundle`, `add_input`, `extract_output`, ...) are wrapped with `functools.wraps`, so Beam still reads their
parameters (`beam.DoFn.WindowParam`, state and timer parameters) through `__wrapped__`; generator
methods stay generators. Any other error passes unchanged.

Example:
    @classified_failures
    class _WriteFn(beam.DoFn):
        def process(self, batch):
            ...  # an OSError(ENOSPC) here reaches the launcher as "the disk is full (...) at 'path'"
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, TypeVar

from easydata.errors import EasyDataError, EnvironmentFailure

__all__ = ["classified_failures"]

#: The methods of a DoFn and of a CombineFn that Beam calls.
_METHODS = ("setup", "start_bundle", "process", "finish_bundle", "teardown", "create_accumulator", "add_input",
            "add_inputs", "merge_accumulators", "compact", "extract_output")

Step = TypeVar("Step")


def _raise_classified(error: Exception) -> None:
    """Raises the marked form of `error` when it is a user or environment error; returns otherwise."""
    if isinstance(error, EasyDataError):
        raise error.mark()
    failure = EnvironmentFailure.of(error)
    if failure is not None:
        raise failure.mark() from error


def _wrap(method: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isgeneratorfunction(method):
        @functools.wraps(method)
        def generator(*args: Any, **kwargs: Any) -> Any:
            try:
                return (yield from method(*args, **kwargs))
            except Exception as error:
                _raise_classified(error)
                raise
        return generator

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception as error:
            _raise_classified(error)
            raise
    return call


def classified_failures(step: Step) -> Step:
    """Decorates a DoFn or CombineFn class, or a function given to `beam.Map` / `beam.FlatMap` (see module
    docstring); returns it."""
    if not inspect.isclass(step):
        return _wrap(step)
    for name in _METHODS:
        method = step.__dict__.get(name)
        if method is not None:
            setattr(step, name, _wrap(method))
    return step
