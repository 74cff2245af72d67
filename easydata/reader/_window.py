"""A shuffle window's blocks as numpy arrays, and batch rows gathered from them.

`Window` holds the blocks of one shuffle window and loads each block the first time a batch needs one
of its rows. Loading converts every token column of the block once, without copying:

* packed outputs (every row `seq_length` long): a `[rows, L]` int32 view of the column's values (of
  the memory map for local Arrow IPC files, of the decoded row group for Parquet);
* unpacked outputs: the flat values plus each row's start and length.

`Window.gather(rows)` then builds a batch with `ndarray.take` (packed) or index arithmetic (unpacked
rows, padded or cut to `L`): no Arrow `take`, list-to-numpy conversion or concatenation of the
window's blocks per batch. Cost of a packed batch: one copy of its rows when they come grouped by
block (one block, or rows in storage order, as `TokenReader` asks for them), else two (the second
from a scratch buffer that stays in cache); the batch's arrays are views of one allocation. Memory: the decoded columns of the loaded blocks (Parquet), or only the page cache
(local Arrow IPC).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np
import pyarrow as pa

from easydata.ops.pack_stage import PACKED_COLUMNS
from easydata.reader.blocks import BlockIndex
from easydata.reader.batches import is_count
from easydata.run.manifest import packed_seq_length

__all__ = ["RowSpec", "Window", "pad_rows"]

_PAGE = 4096


@dataclasses.dataclass(frozen=True)
class RowSpec:
    """What a batch row is made of.

    Attributes:
      columns: token columns read from the blocks.
      seq_length: row length `L` of every output array.
      packed: rows are stored `L` long (else they are padded / cut to `L`, and `segment_ids` and
        `positions` are derived from the `input_ids` lengths).
      pad_id: fills `input_ids` beyond an unpacked row's end (other columns get 0).
    """

    columns: tuple[str, ...]
    seq_length: int
    packed: bool
    pad_id: int

    @property
    def keys(self) -> tuple[str, ...]:
        """The arrays of a raw batch."""
        return self.columns if self.packed else tuple(dict.fromkeys([*self.columns, "segment_ids", "positions"]))

    @classmethod
    def of_output(cls, index: BlockIndex, seq_length: Optional[int]) -> "RowSpec":
        """The rows of the output dataset `index` lists, from its manifest.

        Args:
          seq_length: row length for unpacked outputs (packed ones use their own).

        Raises:
          ValueError: an unpacked output without a positive `seq_length`, or a packed one with another.
        """
        manifest = index.manifest
        schema = manifest.get("schema") or {}
        packed = bool(schema.get("packed"))
        length = packed_seq_length(index.output_dir, schema) if packed else seq_length
        if seq_length is not None and not is_count(seq_length, least=1):
            raise ValueError(f"`seq_length` must be a positive integer, got {seq_length!r}.")
        if packed and seq_length is not None and seq_length != length:
            raise ValueError(f"'{index.output_dir}' holds packed rows of {length} tokens; seq_length={seq_length} applies"
                             " to unpacked outputs only (pass none, or write the output with that pack.seq_length).")
        if length is None or length <= 0:
            raise ValueError(f"'{index.output_dir}' holds unpacked rows of varying length: pass seq_length= to pad or"
                             " cut them to one length (or write the output with pack.enabled).")
        # This dataset's own columns (a chat output beside a plain one has a `loss_mask` the other lacks).
        own = (manifest.get("datasets") or {}).get(index.name, {}).get("columns")
        columns = [c for c in PACKED_COLUMNS if c in (own or schema.get("columns") or {})] or ["input_ids"]
        tok = manifest.get("tokenizer") or {}
        pad_id = next((int(v) for v in (tok.get("pad_token_id_used"), tok.get("pad_token_id"),
                                        tok.get("eos_token_id")) if v is not None), 0)
        return cls(columns=tuple(columns), seq_length=int(length), packed=packed, pad_id=pad_id)


@dataclasses.dataclass
class _Ragged:
    """An unpacked column: row `i` is `values[starts[i]:starts[i] + sizes[i]]`."""

    values: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray


def _values_and_offsets(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """A list column's flat values (int32) and row offsets into them (`len(rows) + 1`, not from 0)."""
    array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    if pa.types.is_fixed_size_list(array.type):
        size = array.type.list_size
        offsets = (array.offset + np.arange(len(array) + 1, dtype=np.int64)) * size
    else:
        offsets = array.offsets.to_numpy()
    values = array.values.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
    return values, offsets


@dataclasses.dataclass
class _Block:
    """One loaded block: per column a `[rows, L]` array (packed) or a `_Ragged` (unpacked), and for
    packed columns the page offset (address modulo 4 KiB) of the array's data."""

    arrays: dict[str, Any]
    page_offsets: dict[str, int]


def _block_columns(table: pa.Table, spec: RowSpec, where: str) -> _Block:
    """One block's columns: `[rows, L]` views for packed outputs, `_Ragged` for unpacked ones."""
    block = _Block({}, {})
    length = spec.seq_length
    for name in spec.columns:
        values, offsets = _values_and_offsets(table.column(name))
        rows = len(offsets) - 1
        if spec.packed:
            if not np.array_equal(offsets, offsets[0] + length * np.arange(rows + 1)):
                sizes = np.unique(np.diff(offsets))
                raise ValueError(f"{where}: column '{name}' holds rows of {sizes.tolist()} tokens, but the manifest"
                                 f" says the output is packed to seq_length {length}; the output is damaged (run"
                                 " `easydata validate`).")
            array = values[offsets[0]:offsets[-1]].reshape(rows, length)
            block.arrays[name] = array
            block.page_offsets[name] = array.__array_interface__["data"][0] % _PAGE
        else:
            block.arrays[name] = _Ragged(values, offsets[:-1].astype(np.int64), np.diff(offsets).astype(np.int64))
    return block


def _away_from(sources: tuple[int, ...]) -> int:
    """A 64-byte aligned page offset as far as possible (circularly, modulo 4 KiB) from every source's."""
    if not sources:
        return 0
    candidates = np.arange(0, _PAGE, 64)
    gap = (candidates[:, None] - np.asarray(sources)[None, :]) % _PAGE
    return int(candidates[np.minimum(gap, _PAGE - gap).min(axis=1).argmax()])


def pad_rows(out: np.ndarray, where: np.ndarray, column: _Ragged, rows: np.ndarray) -> None:
    """Writes ragged `rows` of `column`, cut to `out.shape[1]`, into `out[where]` (already padded)."""
    length = out.shape[1]
    sizes = np.minimum(column.sizes[rows], length)
    starts = column.starts[rows]
    total = int(sizes.sum())
    if not total:
        return
    rank = np.arange(total) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    out[np.repeat(where, sizes), rank] = column.values[np.repeat(starts, sizes) + rank]


class Window:
    """The blocks of one shuffle window, loaded on first use, gathered into batch rows.

    Args:
      index: where the blocks live.
      blocks: the window's block ids, in the order their rows are concatenated.
      spec: the columns and row length to produce.
    """

    def __init__(self, index: BlockIndex, blocks: np.ndarray, spec: RowSpec):
        self.index, self.spec = index, spec
        self.blocks = [int(b) for b in blocks]
        self.starts = np.concatenate([[0], np.cumsum(index.block_rows[blocks])]).astype(np.int64)
        self._loaded: list[Optional[_Block]] = [None] * len(self.blocks)
        self._scratch: Optional[np.ndarray] = None
        self._scratch_address = 0
        self._placement: Optional[list[tuple[str, int, int]]] = None  # see `_place`

    def _block(self, slot: int) -> _Block:
        loaded = self._loaded[slot]
        if loaded is None:
            block = self.blocks[slot]
            table = self.index.read(block, list(self.spec.columns))
            where = (f"{self.index.shard_paths[int(self.index.block_shard[block])]} block"
                     f" {int(self.index.block_local[block])}")
            loaded = self._loaded[slot] = _block_columns(table, self.spec, where)
            self._placement = None
        return loaded

    def load(self) -> "Window":
        """Loads every block now and touches each page of its arrays once (for memory-mapped Arrow
        files: maps the pages here, on a read-ahead thread, rather than in the first batch's copy)."""
        for slot in range(len(self.blocks)):
            for array in self._block(slot).arrays.values():
                flat = array.reshape(-1) if isinstance(array, np.ndarray) else array.values
                flat[::_PAGE // flat.itemsize].sum()  # numpy releases the GIL in the loop
        return self

    def _place(self) -> list[tuple[str, int, int]]:
        """Per column: `(name, page offset of its batch array, page offset of its scratch)`, each far
        from the page offsets of the loaded blocks' arrays (and the scratch's from the batch's too)."""
        if self._placement is None:
            self._placement = []
            for name in self.spec.columns:
                sources = tuple(sorted({b.page_offsets[name] for b in self._loaded if b is not None}))
                target = _away_from(sources)
                self._placement.append((name, target, _away_from(sources + (target,))))
        return self._placement

    def gather(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """The window's rows `rows` (indices into its concatenated rows) as `[len(rows), L]` int32 arrays."""
        if len(self.blocks) == 1:
            slot, local = np.zeros(len(rows), dtype=np.int64), rows
        else:
            slot = np.searchsorted(self.starts, rows, side="right") - 1
            local = rows - self.starts[slot]
        if self.spec.packed:
            return self._gather_packed(slot, local)
        return self._gather_unpacked(slot, local)

    def _gather_packed(self, slot: np.ndarray, local: np.ndarray) -> dict[str, np.ndarray]:
        """Fixed-length rows, copied by `take` (C loops: no Python work per row).

        Rows grouped by block (one block, or storage order): per column, one `take` per block straight
        into the batch. Rows of several blocks in any other order: per column, a `take` per block into
        a scratch buffer in block order, then one `take` from it into batch order (the scratch stays
        in cache). The batch's arrays share one allocation. Every copy's
        destination sits at a page offset (address modulo 4 KiB) far from its source's: rows copied to
        just above their source's page offset hit 4K aliasing, 10x slower on AMD EPYC with glibc's
        `rep movsb`.
        """
        length, n = self.spec.seq_length, len(local)
        if not n:
            return {name: np.zeros((0, length), dtype=np.int32) for name in self.spec.columns}
        nbytes = n * length * 4
        counts = np.bincount(slot, minlength=len(self.blocks)) if len(self.blocks) > 1 else np.array([n])
        used = np.flatnonzero(counts).tolist()
        blocks = [self._block(s) for s in used]
        placement = self._place()
        raw = np.empty(len(placement) * (nbytes + _PAGE), dtype=np.uint8)
        address, at, out = raw.__array_interface__["data"][0], 0, {}
        for name, target, _ in placement:
            at += (target - address - at) % _PAGE
            out[name] = raw[at:at + nbytes].view(np.int32).reshape(n, length)
            at += nbytes
        if len(used) == 1 or (slot[1:] >= slot[:-1]).all():  # grouped by block: straight into the batch
            at = 0
            for block, count in zip(blocks, counts[used].tolist()):
                for name, _, _ in placement:  # `mode="clip"` only stops numpy buffering `out=`: indices are valid
                    block.arrays[name].take(local[at:at + count], axis=0, out=out[name][at:at + count], mode="clip")
                at += count
            return out
        order = np.argsort(slot, kind="stable")
        inverse = np.empty(n, dtype=np.int64)
        inverse[order] = np.arange(n)
        local = local[order]
        ends = np.cumsum(counts[used]).tolist()
        spans = list(zip(blocks, [0, *ends[:-1]], ends))
        if self._scratch is None or len(self._scratch) < nbytes + _PAGE:
            self._scratch = np.empty(nbytes + _PAGE, dtype=np.uint8)
            self._scratch_address = self._scratch.__array_interface__["data"][0]
        for name, _, offset in placement:
            begin = (offset - self._scratch_address) % _PAGE
            scratch = self._scratch[begin:begin + nbytes].view(np.int32).reshape(n, length)
            for block, first, end in spans:
                block.arrays[name].take(local[first:end], axis=0, out=scratch[first:end], mode="clip")
            scratch.take(inverse, axis=0, out=out[name], mode="clip")
        return out

    def _gather_unpacked(self, slot: np.ndarray, local: np.ndarray) -> dict[str, np.ndarray]:
        """Ragged rows padded or cut to `L`; `segment_ids` / `positions` from the `input_ids` lengths."""
        spec, n = self.spec, len(local)
        out = {name: np.full((n, spec.seq_length), spec.pad_id if name == "input_ids" else 0, dtype=np.int32)
               for name in spec.columns}
        lengths = np.empty(n, dtype=np.int64)
        for s in np.unique(slot).tolist():
            where = np.flatnonzero(slot == s)
            block, rows = self._block(s).arrays, local[where]
            for name in spec.columns:
                pad_rows(out[name], where, block[name], rows)
            lengths[where] = np.minimum(block["input_ids"].sizes[rows], spec.seq_length)
        real = np.arange(spec.seq_length)[None, :] < lengths[:, None]  # one segment per row, 0 on padding
        out["segment_ids"] = real.astype(np.int32)
        out["positions"] = np.where(real, np.arange(spec.seq_length)[None, :], 0).astype(np.int32)
        return out
