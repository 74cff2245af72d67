"""Plain data (a YAML or JSON mapping) into the config dataclasses, with every problem reported: unknown
keys with a did-you-mean, wrong types, bad enumeration values, each as one message naming where it is
(`_convert` appends to a list instead of raising, so `PipelineConfig.from_dict` can list them all)."""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from typing import Any, Literal, Optional, Union

__all__ = ["convert"]


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp) if a is not type(None))
    if origin is list:
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if origin is dict:
        return "mapping"
    if dataclasses.is_dataclass(tp):
        return "mapping"
    return getattr(tp, "__name__", str(tp))


def _convert(tp: Any, value: Any, where: str, problems: list[str]) -> Any:
    """Converts plain data into `tp`, appending a message per problem instead of raising."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            problems.append(f"{where or 'config'}: expected a mapping, got {type(value).__name__}")
            return None
        return _convert_dataclass(tp, value, where, problems)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            trial: list[str] = []
            result = _convert(arg, value, where, trial)
            if not trial:
                return result
        non_none = [a for a in args if a is not type(None)]
        literals = [a for a in non_none if typing.get_origin(a) is Literal]
        if len(non_none) == 1 or isinstance(value, str) and len(literals) == 1:
            # Optional[X], or a string for a Literal-or-bool field: report X's own, more precise, problem
            return _convert(literals[0] if isinstance(value, str) and literals else non_none[0], value, where, problems)
        problems.append(f"{where}: expected {_type_name(tp)}, got {value!r}")
        return None
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            hint = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
            suggestion = f" (did you mean '{hint[0]}'?)" if hint else ""
            problems.append(f"{where}: must be one of {', '.join(map(str, allowed))}; got {value!r}{suggestion}")
            return None
        return value
    if origin is list:
        (item_type,) = typing.get_args(tp)
        if not isinstance(value, list):
            problems.append(f"{where}: expected a list, got {type(value).__name__}")
            return None
        return [_convert(item_type, v, f"{where}[{i}]", problems) for i, v in enumerate(value)]
    if origin is dict:
        key_type, value_type = typing.get_args(tp)
        if not isinstance(value, dict):
            problems.append(f"{where}: expected a mapping, got {type(value).__name__}")
            return None
        return {_convert(key_type, k, f"{where}", problems): _convert(value_type, v, f"{where}.{k}", problems)
                for k, v in value.items()}
    if tp is Any:
        return value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is int and not isinstance(value, (bool, int)):
        whole = _whole_number(value)
        if whole is not None:
            return whole
    if tp is int and isinstance(value, bool) or not isinstance(value, tp):
        problems.append(f"{where}: expected {_type_name(tp)}, got {value!r}")
        return None
    return value


def _convert_dataclass(cls: Any, data: dict[str, Any], where: str, problems: list[str]) -> Any:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in fields:
            hint = difflib.get_close_matches(str(key), list(fields), n=1)
            suggestion = f" (did you mean '{hint[0]}'?)" if hint else ""
            problems.append(f"unknown key '{path}'{suggestion}")
            continue
        kwargs[key] = _convert(hints[key], value, path, problems)
    missing = [name for name, f in fields.items()
               if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
               and name not in data]
    for name in missing:
        problems.append(f"missing required key '{where + '.' if where else ''}{name}'")
    if missing:
        return None
    try:
        return cls(**kwargs)
    except TypeError as e:  # pragma: no cover - guarded by the checks above
        problems.append(f"{where or 'config'}: {e}")
        return None


#: A number in scientific notation without a dot: YAML 1.1 (PyYAML) reads `2e10` as text.
_SCIENTIFIC = re.compile(r"[+-]?[0-9]+(\.[0-9]*)?[eE][+-]?[0-9]+")


def _whole_number(value: Any) -> Optional[int]:
    """An integer written as a float (`2.0e10`, or `2e10`, which YAML leaves a string), as token budgets and
    sizes are; None when `value` is not a whole number of at most 19 digits."""
    if isinstance(value, str) and _SCIENTIFIC.fullmatch(value.strip()):
        value = float(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return None


def convert(tp: Any, value: Any, where: str, problems: list[str]) -> Any:
    """`value` as `tp` (a config dataclass, or a type inside one); a message per problem is appended to
    `problems` instead of raising."""
    return _convert(tp, value, where, problems)
