"""A dataset's work units, written to the run's staging directory before the job starts.

The job graph names each work unit by its id (its first split's index); the reading step looks the unit's
splits up here. Carried in the graph instead, 100,000 input files made a 4 MB job graph (Dataflow refuses
graphs over 10 MB), and every worker re-pickled and bz2-compressed that list each time it built the step
(Beam's `Create` re-serialises its values per bundle processor): 19 of a 51 CPU-second run.

    OUT/.easydata-tmp-<run>/units/<dataset>.jsonl        # a line per unit: its splits, in order
    OUT/.easydata-tmp-<run>/units/<dataset>.index.json   # unit id -> [offset, length] of its line

A worker reads the index once and each unit's line when it reads the unit (one ranged read: a million
input files are a few hundred MB of splits, which no worker holds whole). Both files are written with
`write_atomic`, the lines first, and hold the same bytes when written twice (a resumed run plans the same
units).
"""

from __future__ import annotations

import json
from typing import Iterator

from easydata.io.documents import InputSplit
from easydata.io.filesystems import join, open_file, write_atomic

__all__ = ["write_units", "StagedUnits", "iter_units"]


def _paths(staging: str, dataset: str) -> tuple[str, str]:
    root = join(staging, "units")
    return join(root, f"{dataset}.jsonl"), join(root, f"{dataset}.index.json")


def write_units(staging: str, dataset: str, units: list[list[InputSplit]]) -> None:
    """Records `units` (`easydata.io.sources.work_units`) for the workers that read them."""
    lines, index, offset = [], {}, 0
    for unit in units:
        line = (json.dumps([split.as_dict() for split in unit], separators=(",", ":")) + "\n").encode()
        index[unit[0].index] = [offset, len(line)]
        lines.append(line)
        offset += len(line)
    data_path, index_path = _paths(staging, dataset)
    write_atomic(data_path, b"".join(lines))
    write_atomic(index_path, json.dumps(index, separators=(",", ":")).encode())


def _splits(line: bytes) -> list[InputSplit]:
    return [InputSplit(**split) for split in json.loads(line)]


class StagedUnits:
    """The units `write_units` recorded for a dataset, each read when it is asked for (`units[unit_id]`)."""

    def __init__(self, staging: str, dataset: str):
        self._data_path, index_path = _paths(staging, dataset)
        with open_file(index_path, "rb", decompress=False) as f:
            self._index = {int(unit): (offset, length) for unit, (offset, length) in json.load(f).items()}

    def __len__(self) -> int:
        return len(self._index)

    def __getitem__(self, unit_id: int) -> list[InputSplit]:
        offset, length = self._index[unit_id]
        with open_file(self._data_path, "rb", decompress=False) as f:
            f.seek(offset)
            return _splits(f.read(length))


def iter_units(staging: str, dataset: str) -> Iterator[list[InputSplit]]:
    """Every recorded unit of `dataset`, in order, read line by line."""
    with open_file(_paths(staging, dataset)[0], "rb", decompress=False) as f:
        for line in f:
            yield _splits(line)
