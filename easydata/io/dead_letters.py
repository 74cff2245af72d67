"""Dead letters: the records a step could not use, written where the run's commit moves them.

Every step that rejects records (reading, chat rendering, a streaming window) writes them through
`write_dead_letters`: one JSON line per record (`easydata.io.sources.Reject.to_json`) in a file of the
staging directory whose name the step derives from its input, written through a temporary name. A
retried or duplicated attempt of the step therefore writes the same file again, whole, and never
adds a second copy of a record.
"""

from __future__ import annotations

import json
from typing import Iterable

from easydata.io.filesystems import write_atomic
from easydata.io.staging import Staging
from easydata.io.sources import Reject

__all__ = ["write_dead_letters", "dead_letter_path"]


def dead_letter_path(dataset: str, name: str) -> str:
    """The relative path of a step's dead-letter file: `rejected/<dataset>/<name>.jsonl`."""
    return f"rejected/{dataset}/{name}.jsonl"


def write_dead_letters(staging: str, relative: str, rejects: Iterable[Reject]) -> str:
    """Writes `rejects` to `staging/relative`; returns `relative` (the path the commit moves)."""
    data = "".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in rejects).encode()
    write_atomic(Staging(staging).file(relative), data)
    return relative
