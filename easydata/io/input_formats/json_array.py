"""`.json` inputs: a JSON array of objects (a record's position is its index), or JSON lines (read as
JSONL). An array is parsed whole: it is one split."""

from __future__ import annotations

import dataclasses
import json
from typing import Iterator

from easydata.config import DatasetConfig
from easydata.io.documents import BOM, EXCERPT_CHARS, DocumentCollector, InputSplit, refuse_other_encodings
from easydata.io.filesystems import open_file
from easydata.io.input_formats.lines import read_lines

__all__ = ["read_json"]


def read_json(split: InputSplit, dataset: DatasetConfig, out: DocumentCollector) -> Iterator[int]:
    """`.json`: a JSON array of objects (position = index), or JSON lines."""
    with open_file(split.path) as f:
        head = f.read(64)
    refuse_other_encodings(head)
    if not head.removeprefix(BOM).lstrip().startswith(b"["):
        yield from read_lines(dataclasses.replace(split, type="jsonl"), dataset, out)
        return
    with open_file(split.path) as f:
        data = f.read()
    try:
        records = json.loads(data.removeprefix(BOM))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        reason = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        out.reject(0, f"malformed JSON array: {reason}", data[:EXCERPT_CHARS].decode("utf-8", "replace"))
        yield len(data)
        return
    per = len(data) // max(len(records), 1)
    for i, record in enumerate(records):
        out.add_record(i, record)
        yield per
        if out.done:
            return
