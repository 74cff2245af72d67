"""EasyData's per-record preparation: `format_fields` renames, then `format_callback`.

Both run on each record dict before its content field is read, in the reader that parses the file
(`easydata.io.sources`), so every later stage sees the prepared record. Renames also apply to the keys
of message dicts (a chat dataset with `{"from": ..., "value": ...}` renamed to `role`/`content`), as
EasyData does. The callback returns the record to use (a dict), or a string (the document text, put
into the content field); `None` or an exception makes the record a dead letter with the reason.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

from easydata.config.callables import resolve_callable

__all__ = ["RecordFormatter", "FormatError", "resolve_callable"]


class FormatError(ValueError):
    """A record the user's `format_callback` refused or failed on (the record becomes a dead letter)."""


class RecordFormatter:
    """Applies a dataset's `format_fields` and `format_callback` to one record.

    Args:
      fields: `{old_name: new_name}` renames (top level and inside lists of message dicts).
      callback: a function of a record dict, or its `"module:function"` name.
      content_field: where a string returned by the callback goes.
    """

    def __init__(self, fields: dict[str, str], callback: Union[Callable[[dict[str, Any]], Any], str, None],
                 content_field: str):
        self.fields, self.content_field = dict(fields), content_field
        self._callback = callback
        self._function: Optional[Callable[[dict[str, Any]], Any]] = None

    @classmethod
    def for_dataset(cls, dataset: Any) -> Optional["RecordFormatter"]:
        """A dataset's `format_fields` then `format_callback` as one function of a record (None when neither
        is set)."""
        if not dataset.format_fields and dataset.format_callback is None:
            return None
        return cls(dataset.format_fields, dataset.format_callback, dataset.content_field)

    @property
    def needs_all_columns(self) -> bool:
        """A callback may read any field: columnar readers must then read them all."""
        return self._callback is not None

    def source_columns(self, wanted: list[str]) -> list[str]:
        """The input columns that hold the `wanted` fields before renaming."""
        back = {new: old for old, new in self.fields.items()}
        return [back.get(name, name) for name in wanted]

    def _rename(self, record: dict[str, Any]) -> dict[str, Any]:
        out = {self.fields.get(key, key): value for key, value in record.items()}
        for key, value in out.items():
            if isinstance(value, list) and value and isinstance(value[0], dict):
                out[key] = [{self.fields.get(k, k): v for k, v in item.items()} if isinstance(item, dict) else item
                            for item in value]
        return out

    def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        """The prepared record.

        Raises:
          FormatError: the callback returned None or something else than a dict or string, or raised.
        """
        if self.fields:
            record = self._rename(record)
        if self._callback is None:
            return record
        if self._function is None:
            self._function = resolve_callable(self._callback) if isinstance(self._callback, str) else self._callback
        try:
            result = self._function(dict(record))
        except (Exception, SystemExit) as e:  # the user's code (even `sys.exit()`): this record's rejection reason
            raise FormatError(f"format_callback raised {type(e).__name__}: {e}"[:500]) from None
        if isinstance(result, str):
            return {**record, self.content_field: result}
        if not isinstance(result, dict):
            raise FormatError(f"format_callback returned {type(result).__name__}, not a dict or a string")
        return result
