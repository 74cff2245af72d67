"""Token files for numpy-based training scripts: `bin` (flat token stream) and `npz` (padded arrays).

`bin` (nanoGPT / Megatron style), per shard:

* `part-00000-of-00004.bin`: every row's `input_ids` back to back, raw little-endian `uint16` when
  the vocabulary fits in 16 bits (`vocab_size <= 65536`), else `uint32`; `np.memmap(path,
  dtype=np.uint16, mode="r")` reads it. The dtype is recorded in the manifest (`schema.token_dtype`).
* `part-00000-of-00004.idx`: document boundaries, raw little-endian `int64`, `rows + 1` offsets into
  the token stream starting at 0: document `i` is `tokens[idx[i]:idx[i + 1]]`.
* `part-00000-of-00004.mask` (chat data only): the `loss_mask`, one `uint8` per token.

`megatron` (Megatron-LM's indexed dataset, `MMIDIDX` version 1, read by Megatron-LM, NeMo,
GPT-NeoX and MaxText's Grain `mmap` source), per shard:

* `part-00000-of-00004.bin`: every document's `input_ids` back to back, little-endian `uint16` when
  the vocabulary fits in 16 bits, else `int32` (Megatron's codes 8 and 4; it has no `uint32`).
* `part-00000-of-00004.idx`: `b"MMIDIDX\x00\x00"`, version `<Q` 1, dtype code `<B`, sequence
  count `<Q` N, document count `<Q` N + 1, then N `int32` sequence lengths, N `int64` byte offsets
  into the `.bin`, and N + 1 `int64` document indices `0, 1, ..., N` (one sequence per document).
* `part-00000-of-00004.mask` (chat data only, our addition; Megatron ignores it): as for `bin`.

Megatron's readers take the path without extension (`.../part-00000-of-00004`). The sequence lengths
are kept in memory while a shard is written (4 bytes per document) and the index is written at
`close()`, when the counts its header needs are known.

`npz` (`np.load`-compatible, as standalone tokenize scripts write it), per shard one
`part-00000-of-00004.npz` with int32 `[rows, W]` arrays: `input_ids` (padded with the pad id),
`attention_mask` (1 on real tokens), plus `segment_ids` / `positions` for packed rows and `loss_mask`
for chat data. `W` is the packed `seq_length`, else `tokenize.max_length` when set, else the
longest row of the shard. `compression: gzip` stores the members deflated (as `np.savez_compressed`).

Writers stream: `bin` appends to its files as rows arrive; `npz` spools rows to local temporary
files and builds the archive at `close()` (its header needs the row count and width), so neither
holds a shard in memory. `iter_token_file_batches` reads both back as Arrow batches of `list<int32>`
columns (for `validate`, `inspect`, `stats`), one chunk at a time.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import struct
import tempfile
import zipfile
from typing import IO, Any, Iterator, Optional

import numpy as np
import pyarrow as pa

from easydata.io.filesystems import file_size, get_fs, open_arrow_file, open_file
from easydata.io.token_arrays import list_column_values, ones_list_array, token_list_array

__all__ = ["TOKEN_FILE_FORMATS", "TokenFileSpec", "token_dtype_for", "companion_path", "BinShardWriter",
           "MegatronShardWriter", "NpzShardWriter", "open_token_file_writer", "token_file_spec",
           "iter_token_file_batches", "read_bin_index", "read_megatron_index", "bin_token_dtype", "MEGATRON_HEADER"]

TOKEN_FILE_FORMATS = ("bin", "npz", "megatron")
MEGATRON_HEADER = b"MMIDIDX\x00\x00"
#: Megatron-LM's dtype codes (`megatron.core.datasets.indexed_dataset.DType`) of the dtypes written here.
_MEGATRON_CODES = {"uint16": 8, "int32": 4}
_COMPANIONS = {"index": ".idx", "loss_mask": ".mask"}
_CHUNK_BYTES = 16 * 2**20
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def token_dtype_for(vocab_size: Optional[int]) -> str:
    """`uint16` when every id of a `vocab_size` vocabulary fits in 16 bits, else `uint32`."""
    return "uint16" if vocab_size is not None and vocab_size <= 2**16 else "uint32"


def companion_path(path: str, role: str) -> str:
    """The file beside a `.bin` shard holding its `index` or `loss_mask`."""
    return path[:path.rindex(".")] + _COMPANIONS[role]


@dataclasses.dataclass(frozen=True)
class TokenFileSpec:
    """What token-file writers need beyond the rows.

    Attributes:
      token_dtype: `bin` token dtype (`token_dtype_for(vocab_size)`).
      width: `npz` row width (packed `seq_length` or `tokenize.max_length`); None: the longest row.
      pad_id: `npz` padding id of `input_ids`.
    """

    token_dtype: str = "uint32"
    width: Optional[int] = None
    pad_id: int = 0


def _write_values(f: IO, values: np.ndarray, dtype: np.dtype | str) -> None:
    """Writes `values`, which fit `dtype` (checked by the caller), as its raw bytes without a `tobytes` copy:
    the file takes the array's buffer. Integers of `dtype`'s size are reinterpreted, not copied (`int32` ids
    as Megatron's `int32` or `bin`'s `uint32`: the same bytes for values that fit both); others are cast."""
    dtype = np.dtype(dtype)
    if values.dtype.kind in "iu" and dtype.kind in "iu" and values.dtype.itemsize == dtype.itemsize:
        values = values.view(dtype)
    f.write(memoryview(np.ascontiguousarray(values.astype(dtype, copy=False))).cast("B"))


def _ids_fitting(batch: pa.RecordBatch | pa.Table, limit: int, dtype: np.dtype, path: str
                 ) -> tuple[np.ndarray, np.ndarray]:
    """A batch's flat `input_ids` and offsets, checked to fit the file's token dtype."""
    ids, offsets = list_column_values(batch.column("input_ids"))
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= limit):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise ValueError(f"{path}: token id {bad} does not fit {dtype.name}")
    return ids, offsets


class BinShardWriter:
    """Streams rows into a `.bin` token stream, its `.idx` boundaries and (chat) its `.mask`.

    Args:
      path: the `.bin` destination (companions are written beside it).
      schema: the rows' schema (`loss_mask` present: a `.mask` file is written too).
      token_dtype: `uint16` or `uint32`.
    """

    def __init__(self, path: str, schema: pa.Schema, token_dtype: str):
        self.path, self.rows, self._end = path, 0, 0
        self.dtype = np.dtype(token_dtype).newbyteorder("<")
        if self.dtype.kind != "u" or self.dtype.itemsize not in (2, 4):
            raise ValueError(f"`token_dtype` must be uint16 or uint32, got {token_dtype!r}.")
        self._limit = 2 ** (8 * self.dtype.itemsize)
        self.companions = {"index": companion_path(path, "index")}
        if "loss_mask" in schema.names:
            self.companions["loss_mask"] = companion_path(path, "loss_mask")
        self.columns = (("input_ids", np.dtype(token_dtype).name),) + \
            ((("loss_mask", "uint8"),) if "loss_mask" in self.companions else ())
        self._files = {"input_ids": open_arrow_file(path, "wb")}
        self._files.update({role: open_arrow_file(p, "wb") for role, p in self.companions.items()})
        self._files["index"].write(np.zeros(1, dtype="<i8").tobytes())

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        if batch.num_rows == 0:
            return
        ids, offsets = _ids_fitting(batch, self._limit, self.dtype, self.path)
        _write_values(self._files["input_ids"], ids, self.dtype)
        _write_values(self._files["index"], offsets[1:] + self._end, "<i8")
        if "loss_mask" in self._files:
            _write_values(self._files["loss_mask"], list_column_values(batch.column("loss_mask"))[0], np.uint8)
        self._end += int(offsets[-1])
        self.rows += batch.num_rows

    def close(self) -> int:
        for f in self._files.values():
            f.close()
        return self.rows


class MegatronShardWriter:
    """Streams documents into a Megatron `.bin` and writes its `MMIDIDX` `.idx` at `close()`.

    Args:
      path: the `.bin` destination (the `.idx`, and for chat data a `.mask`, go beside it).
      schema: the rows' schema.
      token_dtype: `uint16` when the vocabulary fits, else `uint32` (written as Megatron's `int32`).
    """

    def __init__(self, path: str, schema: pa.Schema, token_dtype: str):
        self.path, self.rows = path, 0
        name = "uint16" if token_dtype == "uint16" else "int32"
        self.dtype = np.dtype(name).newbyteorder("<")
        self._limit = 2**16 if name == "uint16" else 2**31
        self.companions = {"index": companion_path(path, "index")}
        if "loss_mask" in schema.names:
            self.companions["loss_mask"] = companion_path(path, "loss_mask")
        self.columns = (("input_ids", name),) + ((("loss_mask", "uint8"),) if "loss_mask" in self.companions else ())
        self._bin = open_arrow_file(path, "wb")
        self._mask = open_arrow_file(self.companions["loss_mask"], "wb") if "loss_mask" in self.companions else None
        self._lengths: list[np.ndarray] = []

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        if batch.num_rows == 0:
            return
        ids, offsets = _ids_fitting(batch, self._limit, self.dtype, self.path)
        _write_values(self._bin, ids, self.dtype)
        if self._mask is not None:
            _write_values(self._mask, list_column_values(batch.column("loss_mask"))[0], np.uint8)
        self._lengths.append(np.diff(offsets).astype("<i4"))
        self.rows += batch.num_rows

    def close(self) -> int:
        self._bin.close()
        if self._mask is not None:
            self._mask.close()
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, "<i4")
        pointers = np.zeros(len(lengths), dtype="<i8")
        np.cumsum(lengths[:-1].astype(np.int64) * self.dtype.itemsize, out=pointers[1:])
        with open_arrow_file(self.companions["index"], "wb") as f:
            f.write(MEGATRON_HEADER)
            f.write(struct.pack("<Q", 1))
            f.write(struct.pack("<B", _MEGATRON_CODES[self.dtype.name]))
            f.write(struct.pack("<Q", len(lengths)))
            f.write(struct.pack("<Q", len(lengths) + 1))
            f.write(lengths.tobytes())
            f.write(pointers.tobytes())
            f.write(np.arange(len(lengths) + 1, dtype="<i8").tobytes())
        return self.rows


class NpzShardWriter:
    """Spools rows to local temporary files, then writes the `.npz` archive at `close()`.

    Args:
      path: the `.npz` destination.
      schema: the rows' schema (packed when it has `segment_ids`).
      spec: row width and pad id.
      compression: `none` (stored members) or `gzip` (deflated members).
    """

    def __init__(self, path: str, schema: pa.Schema, spec: TokenFileSpec, compression: str = "none"):
        if compression not in ("none", "gzip"):
            raise ValueError(f"npz `compression` must be none or gzip, got {compression!r}.")
        self.path, self.spec, self.rows = path, spec, 0
        self._zip_compression = zipfile.ZIP_STORED if compression == "none" else zipfile.ZIP_DEFLATED
        self.packed = "segment_ids" in schema.names
        self._stored = [c for c in ("input_ids", "segment_ids", "positions", "loss_mask") if c in schema.names]
        arrays = ["input_ids", "attention_mask"] + [c for c in self._stored if c != "input_ids"]
        self.columns = tuple((name, "int32") for name in arrays)
        self.companions: dict[str, str] = {}
        self._temp = tempfile.mkdtemp(prefix="easydata-npz-")
        self._spool = {c: open(os.path.join(self._temp, c), "wb") for c in self._stored}
        self._lengths: list[np.ndarray] = []

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        if batch.num_rows == 0:
            return
        for name in self._stored:
            values, offsets = list_column_values(batch.column(name))
            self._spool[name].write(values.astype("<i4").tobytes())
            if name == "input_ids":
                self._lengths.append(np.diff(offsets))
        self.rows += batch.num_rows

    def _rows(self, lengths: np.ndarray, width: int) -> Iterator[dict[str, np.ndarray]]:
        """The padded `[k, width]` arrays of consecutive chunks of rows."""
        sources = {name: open(os.path.join(self._temp, name), "rb") for name in self._stored}
        try:
            per_chunk = max(1, _CHUNK_BYTES // (4 * max(width, 1)))
            for first in range(0, len(lengths), per_chunk):
                sizes = lengths[first:first + per_chunk]
                real = np.arange(width)[None, :] < sizes[:, None]
                chunk = {"attention_mask": real.astype("<i4")}
                for name, f in sources.items():
                    values = np.frombuffer(f.read(4 * int(sizes.sum())), dtype="<i4")
                    out = np.full(real.shape, self.spec.pad_id if name == "input_ids" else 0, dtype="<i4")
                    out[real] = values
                    chunk[name] = out
                if self.packed:
                    chunk["attention_mask"] = (chunk["segment_ids"] != 0).astype("<i4")
                yield chunk
        finally:
            for f in sources.values():
                f.close()

    def close(self) -> int:
        try:
            for f in self._spool.values():
                f.close()
            lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, dtype=np.int64)
            longest = int(lengths.max()) if len(lengths) else 0
            width = self.spec.width if self.spec.width is not None else longest
            if longest > width:
                raise ValueError(f"{self.path}: a row of {longest} tokens does not fit the npz width {width}")
            self._write_members([name for name, _ in self.columns], lengths, width)
        finally:
            shutil.rmtree(self._temp, ignore_errors=True)
        return self.rows

    def _write_members(self, names: list[str], lengths: np.ndarray, width: int) -> None:
        """One member per array; zipfile writes one member at a time, so each is a pass over the spool."""
        with open_file(self.path, "wb") as raw, \
                zipfile.ZipFile(raw, "w", compression=self._zip_compression, allowZip64=True) as archive:
            for name in names:
                info = zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_TIME)  # fixed time: bytes depend on rows only
                info.compress_type = self._zip_compression
                with archive.open(info, "w", force_zip64=True) as member:
                    np.lib.format.write_array_header_1_0(member, {
                        "descr": "<i4", "fortran_order": False, "shape": (len(lengths), width)})
                    for chunk in self._rows(lengths, width):
                        member.write(chunk[name].tobytes())


def token_file_spec(config: Any, vocab_size: Optional[int], pad_id: int) -> TokenFileSpec:
    """The spec a run's config implies: dtype from the vocabulary, width from packing or `max_length`."""
    width = config.pack.seq_length if config.pack.enabled else (
        config.tokenize.max_length if config.tokenize.truncation_mode != "none" else None)
    return TokenFileSpec(token_dtype=token_dtype_for(vocab_size), width=width, pad_id=pad_id)


def open_token_file_writer(path: str, fmt: str, schema: pa.Schema, spec: Optional[TokenFileSpec],
                           compression: str) -> BinShardWriter | MegatronShardWriter | NpzShardWriter:
    """The writer of a `bin`, `megatron` or `npz` shard."""
    spec = spec or TokenFileSpec()
    if fmt == "bin":
        return BinShardWriter(path, schema, spec.token_dtype)
    if fmt == "megatron":
        return MegatronShardWriter(path, schema, spec.token_dtype)
    if fmt == "npz":
        return NpzShardWriter(path, schema, spec, compression)
    raise ValueError(f"unknown token file format {fmt!r}")


# ---- reading back ---------------------------------------------------------------------------------


def read_bin_index(path: str) -> np.ndarray:
    """The `int64` document offsets of a `.bin` shard (from its `.idx`).

    Raises:
      ValueError: an index that is not whole 8-byte offsets rising from 0 (truncated or foreign), naming it.
    """
    index = companion_path(path, "index")
    with open_file(index, "rb", decompress=False) as f:
        data = f.read()
    if len(data) % 8:
        raise ValueError(f"{index}: {len(data)} bytes are not whole 8-byte document offsets (truncated?)")
    offsets = np.frombuffer(data, dtype="<i8").astype(np.int64)
    if len(offsets) and (offsets[0] != 0 or np.any(np.diff(offsets) < 0)):
        raise ValueError(f"{index}: document offsets do not rise from 0 (not an easydata .bin index?)")
    return offsets


def read_megatron_index(path: str) -> tuple[np.dtype, np.ndarray, np.ndarray]:
    """A Megatron shard's token dtype, sequence lengths and byte pointers (from its `.idx`).

    Raises:
      ValueError: not an `MMIDIDX` version 1 index, or counts that do not match its size.
    """
    with open_file(companion_path(path, "index"), "rb", decompress=False) as f:
        data = f.read()
    if data[:9] != MEGATRON_HEADER or struct.unpack_from("<Q", data, 9)[0] != 1:
        raise ValueError(f"{companion_path(path, 'index')}: not a Megatron MMIDIDX version 1 index")
    code, count, documents = struct.unpack_from("<BQQ", data, 17)
    names = {v: k for k, v in _MEGATRON_CODES.items()}
    if code not in names or len(data) != 34 + 20 * count + 8 * (documents - count):
        raise ValueError(f"{companion_path(path, 'index')}: unexpected dtype code {code} or size")
    lengths = np.frombuffer(data, dtype="<i4", count=count, offset=34).astype(np.int64)
    pointers = np.frombuffer(data, dtype="<i8", count=count, offset=34 + 4 * count)
    return np.dtype(names[code]).newbyteorder("<"), lengths, pointers


def _iter_megatron(path: str, columns: Optional[list[str]]) -> Iterator[pa.RecordBatch]:
    """A Megatron shard's documents, one chunk of about 16 MB at a time."""
    dtype, lengths, pointers = read_megatron_index(path)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    if len(pointers) and np.any(pointers != offsets[:-1] * dtype.itemsize):
        raise ValueError(f"{companion_path(path, 'index')}: sequence pointers are not contiguous")
    yield from _iter_stream(path, offsets, dtype, columns)


def bin_token_dtype(path: str, tokens: int) -> np.dtype:
    """A `.bin` file's token dtype, from its size and token count (2 bytes: uint16, 4: uint32)."""
    if tokens == 0:
        return np.dtype("<u2")
    size = file_size(path)
    if size not in (2 * tokens, 4 * tokens):
        raise ValueError(f"{path}: {size} bytes do not hold {tokens} uint16 or uint32 tokens (truncated?)")
    return np.dtype("<u2" if size == 2 * tokens else "<u4")


def _read_range(f: IO, start: int, count: int, dtype: np.dtype) -> np.ndarray:
    f.seek(start * dtype.itemsize)
    data = f.read(count * dtype.itemsize)
    if len(data) != count * dtype.itemsize:
        raise ValueError(f"unexpected end of file at item {start + len(data) // dtype.itemsize}")
    return np.frombuffer(data, dtype=dtype)


def _iter_bin(path: str, columns: Optional[list[str]]) -> Iterator[pa.RecordBatch]:
    offsets = read_bin_index(path)
    if len(offsets) == 0 or offsets[0] != 0 or np.any(np.diff(offsets) < 0):
        raise ValueError(f"{companion_path(path, 'index')}: not a valid document index")
    yield from _iter_stream(path, offsets, bin_token_dtype(path, int(offsets[-1])), columns)


def _iter_stream(path: str, offsets: np.ndarray, dtype: np.dtype, columns: Optional[list[str]]
                 ) -> Iterator[pa.RecordBatch]:
    """Documents `tokens[offsets[i]:offsets[i + 1]]` of a token stream (and its `.mask`) as batches."""
    mask_path = companion_path(path, "loss_mask")
    fs, inner = get_fs(mask_path)
    wanted = columns or ["input_ids", "attention_mask", "loss_mask"]
    files = {"input_ids": (open_file(path, "rb", decompress=False), dtype)}
    if "loss_mask" in wanted and fs.exists(inner):
        files["loss_mask"] = (open_file(mask_path, "rb", decompress=False), np.dtype(np.uint8))
    try:
        rows, first = len(offsets) - 1, 0
        while first < rows:
            # Rows of about `_CHUNK_BYTES / 4` tokens per batch (at least one row).
            last = int(np.searchsorted(offsets, offsets[first] + _CHUNK_BYTES // 4, side="right")) - 1
            last = min(max(last, first + 1), rows)
            local = offsets[first:last + 1] - offsets[first]
            arrays = {name: token_list_array(_read_range(f, int(offsets[first]), int(local[-1]), dt), local)
                      for name, (f, dt) in files.items()}
            if "attention_mask" in wanted:
                arrays["attention_mask"] = ones_list_array(local)
            yield pa.RecordBatch.from_pydict({n: arrays[n] for n in wanted if n in arrays})
            first = last
    finally:
        for f, _ in files.values():
            f.close()


def _npz_members(archive: zipfile.ZipFile) -> dict[str, tuple[Any, tuple[int, ...], np.dtype]]:
    members = {}
    for info in archive.infolist():
        name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
        handle = archive.open(info)
        version = np.lib.format.read_magic(handle)
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = reader(handle)
        if fortran or len(shape) != 2:
            raise ValueError(f"npz member {info.filename} is not a C-ordered 2-D array")
        members[name] = (handle, shape, dtype)
    return members


def _iter_npz(path: str, columns: Optional[list[str]]) -> Iterator[pa.RecordBatch]:
    with open_file(path, "rb", decompress=False) as raw, zipfile.ZipFile(raw) as archive:
        members = _npz_members(archive)
        if "input_ids" not in members or "attention_mask" not in members:
            raise ValueError(f"{path}: an easydata npz shard has input_ids and attention_mask arrays")
        rows, width = members["input_ids"][1]
        packed = "segment_ids" in members
        per_chunk = max(1, _CHUNK_BYTES // (4 * max(width, 1)))
        for first in range(0, rows, per_chunk):
            count = min(per_chunk, rows - first)
            chunk = {name: np.frombuffer(handle.read(count * width * dtype.itemsize), dtype=dtype).reshape(count, width)
                     for name, (handle, _, dtype) in members.items()}
            if packed:  # rows are stored whole: padding is marked by segment id 0
                keep = np.ones((count, width), dtype=bool)
            else:
                keep = chunk["attention_mask"] != 0
            offsets = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(np.int64)
            arrays = {name: token_list_array(values[keep], offsets) for name, values in chunk.items()}
            yield pa.RecordBatch.from_pydict({n: a for n, a in arrays.items() if columns is None or n in columns})


def iter_token_file_batches(path: str, fmt: str, columns: Optional[list[str]] = None) -> Iterator[pa.RecordBatch]:
    """A `bin` / `megatron` / `npz` shard's rows as Arrow batches of `list<int32>` columns (unpacked rows cut to their
    length; packed rows whole), one chunk of about 16 MB at a time."""
    if fmt == "bin":
        yield from _iter_bin(path, columns)
    elif fmt == "megatron":
        yield from _iter_megatron(path, columns)
    elif fmt == "npz":
        yield from _iter_npz(path, columns)
    else:
        raise ValueError(f"unknown token file format {fmt!r}")
