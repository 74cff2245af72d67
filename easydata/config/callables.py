"""Functions in a config (a dataset's `format_callback`): their JSON form `"module:qualname"`
(`callable_name`), that name with a hash of the code for the fingerprint (`callable_identity`), and the
function a name resolves to (`resolve_callable`)."""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["callable_name", "callable_identity", "resolve_callable"]


def callable_name(value: Any) -> str:
    """JSON form of a function in a config: its `"module:qualname"` (what `resolve_callable` reads)."""
    if callable(value):
        return f"{getattr(value, '__module__', '?')}:{getattr(value, '__qualname__', type(value).__name__)}"
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def callable_identity(value: Any) -> str:
    """`callable_name` plus a hash of the function's code, so the fingerprint changes with it."""
    name = callable_name(value)
    code = getattr(value, "__code__", None)
    if code is None:
        return name
    digest = hashlib.sha256(code.co_code + repr(code.co_consts).encode() + repr(code.co_names).encode())
    return f"{name}#{digest.hexdigest()[:12]}"


def resolve_callable(spec: str) -> Any:
    """`"package.module:function"` -> the function (a `format_callback` given in YAML)."""
    import importlib

    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise ValueError("expected 'module:function'")
    target: Any = importlib.import_module(module)
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"'{spec}' is not callable")
    return target
