"""Plain-text JSON lines parsed by Arrow in one call per block, exactly as `json.loads` would read each line.

Most JSONL corpora are lines like `{"text": "..."}`. For short lines the per-line `json.loads` and the record
checks around it cost more than the text itself; `pyarrow.json` parses a block of them at once. Arrow's
parser is not Python's (it splits two objects on one line into two rows, reads `{}` as a null, decodes
strings without checking UTF-8), so a block takes this path only when every check below proves that the
strings it returns are what `json.loads` would have returned, line for line; otherwise the caller judges
each line as before (`easydata.io.input_formats.lines`). Long lines stay on the per-line path: there
`json.loads` is the faster of the two (docs/performance.md#reading-inputs).
"""

from __future__ import annotations

import io
from typing import Optional, Sequence

import pyarrow as pa

from easydata.io.documents import unusable_value

__all__ = ["parse_plain_lines", "FAST_MAX_MEAN_BYTES"]

#: Blocks whose lines average more than this go line by line: measured crossover of `json.loads` and
#: `pyarrow.json` on this project's corpora (docs/performance.md#reading-inputs).
FAST_MAX_MEAN_BYTES = 1024


def parse_plain_lines(lines: Sequence[bytes], content_field: str) -> Optional[list[str]]:
    """The content strings of `lines` (stripped, non-blank JSON lines), when each is exactly one object holding
    only `content_field`, a string, and Arrow reads them as `json.loads` would; None otherwise.

    Checks, each closing a gap between the two parsers: one field (another field, a missing one, a duplicate
    key, a number, null or nested value fail Arrow's explicit schema or give a null row); one row per line (two
    objects on a line, or a bare carriage return, give extra rows); valid UTF-8 (Python decodes every string,
    strictly); no lone surrogate (escaped as `\\ud800`: refused by Arrow, checked again here).
    """
    import pyarrow.json as pj

    if not lines:
        return []
    schema = pa.schema([(content_field, pa.string())])
    block = b"\n".join(lines)
    try:
        table = pj.read_json(io.BytesIO(block),
                             read_options=pj.ReadOptions(use_threads=False, block_size=1 << 30),
                             parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error"))
        column = table.column(0)
        if table.num_rows != len(lines) or column.null_count:
            return None
        texts = column.to_pylist()  # strict UTF-8: raises on what Python would not decode
    except (pa.ArrowInvalid, UnicodeDecodeError, ValueError):
        return None
    if b"\\u" not in block:  # a surrogate code point comes only from a \u escape (UTF-8 cannot hold one)
        return texts
    # a surrogate code point: json.loads keeps it and the record checks refuse it, so judge such a block line by line
    return None if any(unusable_value(text, content_field) for text in texts) else texts
