"""One mechanism tells a user error from a bug, whatever form a runner reports it in: the error's own
marker, decoded in one place (`easydata.errors.from_text`), or the exception object's class and errno."""

from __future__ import annotations

import logging
import pickle
import traceback

import pytest

from easydata.logs import DropUserErrors
from easydata.errors import (MARKER, ConfigError, EasyDataError, EnvironmentFailure, InputError,
                             RunInconsistent, classify, ends_in_user_error, from_text)


def _traceback_of(error: BaseException) -> str:
    try:
        raise error
    except BaseException:
        return traceback.format_exc()


def test_an_error_is_recognised_in_its_traceback_and_after_beam_rebuilt_it_with_the_step() -> None:
    error = InputError("no file 'x'").mark()  # as it leaves a worker's step (transforms.failures)
    text = _traceback_of(error)
    assert ends_in_user_error(text) and MARKER in text
    found = from_text(text)
    assert type(found) is InputError and found.message == "no file 'x'"
    # Beam rebuilds a step's error as `type(e)(e.args[0] + " [while running 'Mix/Plan']")`, raised while handling
    # the first; the runner then raises a RuntimeError of its own around the worker's traceback text.
    rebuilt = type(error)(error.args[0] + " [while running 'Mix/Plan']", *error.args[1:])
    outer = RuntimeError(_traceback_of(rebuilt))
    found = classify(outer)
    assert type(found) is InputError and found.message == "no file 'x'"
    config = ConfigError("bad key").mark()
    again = type(config)(config.args[0] + " [while running 'Plan']", *config.args[1:])
    assert from_text(_traceback_of(again)).message == "invalid config: bad key"  # the prefix once


def test_what_is_not_ours_stays_a_bug_whatever_its_text_says() -> None:
    # The old rule matched `ConfigError: ...` anywhere in a text: a library's own ConfigError, or a message
    # that quotes one, read as ours.
    assert from_text("yaml.ConfigError: not ours") is None
    assert classify(ValueError("ConfigError: looks like ours")) is None
    assert classify(KeyError("a")) is None
    assert not ends_in_user_error(_traceback_of(KeyError("a")))
    # A bug met while a user error was handled is a bug: its traceback ends in the bug.
    try:
        try:
            raise InputError("no file").mark()
        except InputError:
            raise KeyError("oops")
    except KeyError as e:
        bug = e
    assert not ends_in_user_error(_traceback_of(bug))
    # A marker that does not decode is not an error.
    assert from_text(f"{MARKER}!!!") is None and from_text(f"{MARKER}bm90IGpzb24=") is None


def test_an_environment_failure_is_decided_by_errno_not_text() -> None:
    full = OSError(28, "No space left on device", "/out/x.parquet")
    found = classify(full)
    assert isinstance(found, EnvironmentFailure)
    assert found.message == "the disk is full (No space left on device) at '/out/x.parquet'"
    assert classify(OSError(2, "No such file or directory")) is None  # not an environment failure
    assert classify(RuntimeError("OSError: [Errno 28] No space left on device")) is None  # text alone is not
    try:
        raise RuntimeError("writing failed") from full
    except RuntimeError as e:
        assert isinstance(classify(e), EnvironmentFailure)  # raised from it
    # Made in a worker, it crosses as text like every user error.
    assert type(from_text(_traceback_of(EnvironmentFailure.of(full).mark()))) is EnvironmentFailure


def test_a_storage_clients_own_error_is_the_environments_by_class() -> None:
    """No credentials, an unknown AWS profile, an endpoint that does not answer, an expired Google login: the
    storage clients raise their own classes (not `OSError`), which reached the user as a traceback."""
    botocore = pytest.importorskip("botocore.exceptions")
    for error in (botocore.NoCredentialsError(), botocore.ProfileNotFound(profile="nosuch"),
                  botocore.EndpointConnectionError(endpoint_url="http://127.0.0.1:9/b")):
        found = classify(error)
        assert isinstance(found, EnvironmentFailure), error
        assert type(error).__name__ in found.message and "Remote storage" in found.message
        marked = EnvironmentFailure.of(error).mark()  # from a worker, as text
        assert type(from_text(_traceback_of(marked))) is EnvironmentFailure
    # An object store's 403 reaches us as a PermissionError without an errno (s3fs, gcsfs).
    forbidden = classify(PermissionError(None, "Forbidden", "s3://b/k.jsonl"))
    assert isinstance(forbidden, EnvironmentFailure)
    assert forbidden.message == "permission denied (Forbidden) at 's3://b/k.jsonl'"
    assert classify(PermissionError("Forbidden")).message == "permission denied (Forbidden)"
    auth = pytest.importorskip("google.auth.exceptions")
    assert isinstance(classify(auth.RefreshError("token expired")), EnvironmentFailure)

    class NoCredentialsError(Exception):  # the same name in another module is not the client's
        pass

    assert classify(NoCredentialsError("Unable to locate credentials")) is None


def test_a_new_error_class_is_covered_everywhere_at_once() -> None:
    class QuotaError(EasyDataError):
        pass

    found = from_text(_traceback_of(QuotaError("over quota").mark()))
    assert type(found) is QuotaError and found.message == "over quota"
    assert from_text(repr(QuotaError("q").mark())).message == "q"  # Dask's "Compute Failed" holds the repr
    record = logging.LogRecord("x", logging.ERROR, "f", 1, "failed", None, (QuotaError, QuotaError("q"), None))
    assert not DropUserErrors().filter(record)
    text = logging.LogRecord("x", logging.ERROR, "f", 1, _traceback_of(QuotaError("q").mark()), None, None)
    assert not DropUserErrors().filter(text)
    bug = logging.LogRecord("x", logging.ERROR, "f", 1, _traceback_of(KeyError("k")), None, None)
    assert DropUserErrors().filter(bug)


@pytest.mark.parametrize("error", [ConfigError(["a", "b"]), RunInconsistent("counts differ"), InputError("x")])
def test_an_error_survives_pickling_with_one_marker(error) -> None:
    copy = pickle.loads(pickle.dumps(error.mark()))
    assert type(copy) is type(error) and copy.message == error.message and str(copy) == str(error)
    assert _traceback_of(copy).count(MARKER) == 1


def test_an_error_raised_where_the_user_called_carries_no_marker() -> None:
    """Only errors that leave a worker's step are marked: a Python API user's traceback shows the message."""
    error = ConfigError("bad key")
    assert MARKER not in _traceback_of(error) and str(error) == "invalid config: bad key"
    assert repr(error) == "ConfigError('invalid config: bad key')"


def test_every_step_of_the_pipeline_classifies_its_failures() -> None:
    """Every DoFn in transforms/ is wrapped by `classified_failures`: a user error leaves it marked, an OSError
    with an environment errno leaves it as a marked EnvironmentFailure, anything else unchanged."""
    import importlib
    import inspect
    from pathlib import Path

    import apache_beam as beam

    from transforms.failures import classified_failures

    found = []
    for path in sorted((Path(__file__).parent.parent / "transforms").glob("*.py")):
        module = importlib.import_module(f"transforms.{path.stem}")
        for name, cls in vars(module).items():
            if inspect.isclass(cls) and issubclass(cls, (beam.DoFn, beam.CombineFn)) \
                    and cls.__module__ == module.__name__:
                found.append(name)
                methods = [m for m in ("process", "add_input", "extract_output") if m in cls.__dict__]
                assert methods and all(hasattr(cls.__dict__[m], "__wrapped__") for m in methods), \
                    f"{module.__name__}.{name}"
    assert len(found) >= 15, found

    @classified_failures
    class Steps(beam.DoFn):
        def process(self, element, window=beam.DoFn.WindowParam):
            yield element
            raise element

        def finish_bundle(self):
            raise OSError(28, "No space left on device", "/out/shard")

    steps = Steps()
    from apache_beam.transforms.core import get_function_args_defaults

    assert get_function_args_defaults(Steps.process)[1] == [beam.DoFn.WindowParam]  # Beam still sees the parameters
    with pytest.raises(InputError) as raised:
        list(steps.process(InputError("bad")))
    assert MARKER in "".join(raised.value.__notes__)
    with pytest.raises(KeyError):
        list(steps.process(KeyError("bug")))
    with pytest.raises(EnvironmentFailure, match="the disk is full") as raised:
        steps.finish_bundle()
    assert isinstance(raised.value.__cause__, OSError)
