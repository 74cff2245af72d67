"""A Grain random-access data source over an easydata output (Grain is optional).

`GrainSource(path)` has `__len__` and `__getitem__(i) -> dict of numpy rows`, the
`grain.RandomAccessDataSource` protocol, so Grain users keep their samplers and transforms:

    import grain.python as grain
    source = GrainSource("out")
    loader = grain.DataLoader(data_source=source, sampler=grain.IndexSampler(len(source), ...), ...)

Row `i` is found through the block index (`bisect` over cumulative rows); the last block read is
cached, so sequential and block-local access decode each block once. Arrow outputs are the better
choice for random access (memory-mapped, no decompression).
"""

from __future__ import annotations

import threading
from typing import Any, Optional

import numpy as np

from easydata.reader.blocks import BlockIndex

__all__ = ["GrainSource"]


class GrainSource:
    """Random access to the rows of one dataset of an output (see module docstring)."""

    def __init__(self, path: str, name: Optional[str] = None):
        self.index = BlockIndex.from_output(path, name)
        self._starts = np.concatenate([[0], np.cumsum(self.index.block_rows)])
        columns = (self.index.manifest.get("schema") or {}).get("columns") or {"input_ids": None}
        self._columns = list(columns)
        self._cache: tuple[int, Any] = (-1, None)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.index.num_rows

    def __getitem__(self, record_key: int) -> dict[str, Any]:
        i = int(record_key)
        if not 0 <= i < len(self):
            raise IndexError(f"row {i} is outside [0, {len(self)})")
        block = int(np.searchsorted(self._starts, i, side="right") - 1)
        with self._lock:
            if self._cache[0] != block:
                self._cache = (block, self.index.read(block, self._columns))
            table = self._cache[1]
        row = table.slice(i - int(self._starts[block]), 1).to_pylist()[0]
        return {k: np.asarray(v, dtype=np.int32) if isinstance(v, list) else v for k, v in row.items()}

    def __repr__(self) -> str:
        return f"GrainSource({self.index.output_dir!r}, name={self.index.name!r}, rows={len(self)})"
