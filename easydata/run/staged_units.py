"""A dataset's work units, written to the run's staging directory before the job starts.

The job graph names each work unit by its id (its first split's index); the reading step looks the unit's
splits up here, once per worker. Carried in the graph instead, 100,000 input files made a 4 MB job graph
(Dataflow refuses graphs over 10 MB), and every worker re-pickled and bz2-compressed that list each time it
built the step (Beam's `Create` re-serialises its values per bundle processor): 19 of a 51 CPU-second run.

    OUT/.easydata-tmp-<run>/units/<dataset>.json     # [[split, ...], ...]: each unit's splits, in order

Written with `write_atomic` (the same content when written twice: a resumed run plans the same units).
"""

from __future__ import annotations

import json

from easydata.io.documents import InputSplit
from easydata.io.filesystems import join, open_file, write_atomic

__all__ = ["units_path", "write_units", "read_units"]


def units_path(staging: str, dataset: str) -> str:
    return join(staging, "units", f"{dataset}.json")


def write_units(staging: str, dataset: str, units: list[list[InputSplit]]) -> None:
    """Records `units` (`easydata.io.sources.work_units`) for the workers that read them."""
    data = [[split.as_dict() for split in unit] for unit in units]
    write_atomic(units_path(staging, dataset), json.dumps(data, separators=(",", ":")).encode())


def read_units(staging: str, dataset: str) -> dict[int, list[InputSplit]]:
    """The units `write_units` recorded, by id (the first split's index)."""
    with open_file(units_path(staging, dataset), "rb", decompress=False) as f:
        data = json.load(f)
    units = [[InputSplit(**split) for split in unit] for unit in data]
    return {unit[0].index: unit for unit in units if unit}
