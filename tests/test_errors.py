"""One mechanism tells a user error from a bug, whatever form a runner reports it in."""

from __future__ import annotations

import logging

from easydata.errors import (ConfigError, DropUserErrors, EasyDataError, ends_in_user_error, user_error_in,
                             user_error_repr_prefixes)


def test_user_errors_are_found_in_every_form() -> None:
    wrapped = "RuntimeError: step failed ConfigError: bad key [while running 'Plan']\n  more context"
    assert user_error_in(wrapped) == "bad key [while running 'Plan']"
    assert user_error_in("easydata.errors.InputError: no file 'x'") == "no file 'x'"
    assert user_error_in("ValueError: not ours") is None and user_error_in("MyConfigError: not ours") is None
    assert ends_in_user_error("Traceback (most recent call last):\n  ...\neasydata.errors.OutputError: exists")
    assert ends_in_user_error("Traceback:\nOSError: [Errno 28] No space left on device: '/x'")
    assert not ends_in_user_error("Traceback:\nKeyError: 'a'")
    assert "ConfigError(" in user_error_repr_prefixes()


def test_a_new_error_class_is_covered_everywhere_at_once() -> None:
    class QuotaError(EasyDataError):
        pass

    assert user_error_in("QuotaError: over quota") == "over quota"
    assert "QuotaError(" in user_error_repr_prefixes()
    record = logging.LogRecord("x", logging.ERROR, "f", 1, "failed", None, (QuotaError, QuotaError("q"), None))
    assert not DropUserErrors().filter(record)
    assert isinstance(ConfigError(["a", "b"]), EasyDataError)
