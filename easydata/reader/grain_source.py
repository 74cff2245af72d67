"""A Grain random-access data source over an easydata output (Grain is optional).

`GrainSource(path)` has `__len__` and `__getitem__(i) -> dict of numpy rows`, the
`grain.RandomAccessDataSource` protocol, so Grain users keep their samplers and transforms:

    import grain.python as grain
    source = GrainSource("out")
    loader = grain.DataLoader(data_source=source, sampler=grain.IndexSampler(len(source), ...), ...)

Row `i` is found through the block index (`bisect` over cumulative rows); the last block read is
cached, so sequential and block-local access decode each block once. Arrow outputs are the better
choice for random access (memory-mapped, no decompression).

A list of numbers (the token columns, a `list<float>` additional field) is a numpy array of its column's type;
any other value (text, a decimal, a list of strings or structs, a list holding a null) is the Python value
pyarrow gives (`python_rows`).
"""

from __future__ import annotations

import threading
from typing import Any, Optional

import numpy as np
import pyarrow as pa

from easydata.io.field_values import python_rows
from easydata.io.token_arrays import numpy_dtype
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

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for Grain's worker processes (`worker_count > 0`) without the lock and the cached block;
        the index travels without its open files (`BlockIndex.__getstate__`)."""
        state = {k: v for k, v in self.__dict__.items() if k != "_lock"}
        state["_cache"] = (-1, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
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
        row = table.slice(i - int(self._starts[block]), 1)
        return {name: _as_array(value, row.schema.field(name).type) for name, value in python_rows(row)[0].items()}

    def __repr__(self) -> str:
        return f"GrainSource({self.index.output_dir!r}, name={self.index.name!r}, rows={len(self)})"


def _as_array(value: Any, arrow_type: pa.DataType) -> Any:
    """A list of numbers without nulls as a numpy array of its column's value type (`int32` for tokens); any
    other value as it is."""
    listed = pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or \
        pa.types.is_fixed_size_list(arrow_type)
    if not (listed and isinstance(value, list) and None not in value):
        return value
    t = arrow_type.value_type
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)):
        return value
    return np.asarray(value, dtype=numpy_dtype(t))

