"""Token rows in few bytes, for what crosses a shuffle: `encode_rows` / `decode_rows`.

A remote runner's shuffle (Dataflow Shuffle, priced per GB) carries every unpacked token row once on
its way to its hash group, where rows are packed or sorted. Arrow's IPC format ships each token as
an int32 `input_ids` value plus an int32 `attention_mask` value (8 bytes; a loss mask is 4 more),
and every element repeats the schema (~700 bytes: a large run's hash groups receive elements of a
few rows each). This encoding ships, column by column:

- `input_ids` (`list<int32>`): the rows' lengths (uint32) and the ids in the narrowest unsigned
  type that holds the element's largest id (2 bytes per token up to 65,535: a 32k or 64k
  vocabulary; int32 when an id is negative);
- `attention_mask`: nothing, when it is all ones over the same rows (as unpacked rows always are);
- `loss_mask`: one bit per token (`np.packbits`), when it is 0/1 over the same rows;
- fixed-width numbers without nulls (the hidden hash and piece): their values; strings without
  nulls (the hidden key, text fields): lengths and UTF-8 bytes;
- anything else (a column with nulls, nested additional fields, a token column that does not
  qualify): that column as an Arrow IPC stream.

A short JSON directory names each column and how it was written (padded with spaces so that the payloads
start 4-byte aligned: 4-byte ids are then used where they were decompressed, not copied). Segment ids and
positions are never shipped: they are made where packed rows are made, after the shuffle. `decode_rows`
gives back a batch equal to the one encoded (same schema, same values), so nothing written depends on the
encoding.

Then the whole encoding is compressed with zstd at level 1 (one frame), when it is at least
`MIN_COMPRESSED_BYTES` long and the frame is smaller (with a run's shuffle dictionary, when it has one,
`easydata.ops.shuffle_dictionary`: such frames have their own magic, and decoding them needs it): token
ids of text repeat, and on the benchmark corpus this takes 2.01 bytes per token to 0.67 for under 1 % of
the job's CPU (compression runs at ~350 MB/s, decompression ~750 MB/s; the tokenizer makes ~3.5 MB/s of
ids on 2 cores; see docs/performance.md). Small elements stay as they are: a frame's fixed cost would eat the gain.

`encode_row_ranges` encodes many row ranges of one batch at once, each exactly as `encode_rows` would
encode its slice: the routing step splits every batch into one part per hash group it touches, and
a large run has so many groups that a part is often one document.
Pure numpy, pyarrow and zstandard, no Beam.
"""

from __future__ import annotations

import json
import struct
import threading
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pyarrow as pa
import zstandard

from easydata.io.token_arrays import list_column_values, ones_list_array, token_list_array

__all__ = ["encode_rows", "encode_row_ranges", "decode_rows", "MIN_COMPRESSED_BYTES"]

_MAGIC = b"EDR2"
_HEADER = struct.Struct("<4sII")  # magic, rows, directory bytes
_ZSTD_MAGIC = b"EDZ1"
_ZSTD_DICT_MAGIC = b"EDZD"  # a frame compressed with the run's shuffle dictionary
_ZSTD_HEADER = struct.Struct("<4sQ")  # magic, bytes of the encoding inside the frame
_ZSTD_LEVEL = 1
#: Encodings shorter than this are not compressed (a frame's fixed cost would eat the gain) ...
MIN_COMPRESSED_BYTES = 512
#: ... unless there is a dictionary, which gives a short element a history to compress against.
_MIN_DICTIONARY_BYTES = 64
# zstandard's (de)compressor objects must not be shared between threads (a runner may run several
# bundles at once in one process); one per thread, made once.
_codecs = threading.local()
_TOKEN_TYPE = pa.list_(pa.int32())
_ID_TYPES = ("<u1", "<u2", "<u4", "<i4")
_TOKEN_NAMES = ("input_ids", "attention_mask", "loss_mask")
_STRINGS = {"s": pa.string(), "b": pa.binary()}


def _id_type(ids: np.ndarray) -> str:
    """The narrowest of `_ID_TYPES` that holds every id."""
    if not len(ids):
        return _ID_TYPES[0]
    low, high = int(ids.min()), int(ids.max())
    return "<i4" if low < 0 else "<u1" if high <= 0xFF else "<u2" if high <= 0xFFFF else "<u4"


def _plain(field: pa.Field) -> bool:
    """A field that is what `pa.field(name, type)` makes (so the type alone rebuilds it)."""
    return field.nullable and not field.metadata


#: How one column of one row range is written: `(directory entry without sizes, payloads)` (bytes-like, by byte).
_Encoded = tuple[list[Any], list[bytes | memoryview]]
#: A column prepared once for a batch, called per row range `[start, stop)`.
_RangeEncoder = Callable[[int, int], _Encoded]


def _ipc(field: pa.Field) -> Callable[[pa.Array], _Encoded]:
    """Any column as an Arrow IPC stream (what the compact kinds do not cover)."""
    def encode(column: pa.Array) -> _Encoded:
        sink = pa.BufferOutputStream()
        one = pa.RecordBatch.from_arrays([column], schema=pa.schema([field]))
        with pa.ipc.new_stream(sink, one.schema) as writer:
            writer.write_batch(one)
        return [field.name, "ipc"], [sink.getvalue().to_pybytes()]
    return encode


def _prepare(field: pa.Field, column: pa.Array, ids_lengths: Optional[np.ndarray]
             ) -> tuple[_RangeEncoder, Optional[np.ndarray]]:
    """`column` made ready to encode any of its row ranges, and its row lengths when it is compact token ids.

    The kind of a range is the kind `column.slice(start, stop - start)` alone would get: a column
    with nulls is decided range by range (its ranges without nulls are compact), a token mask range
    by range (all ones, else 0/1 bits, over the same row lengths as the ids of `ids_lengths`).
    """
    name, ipc = field.name, _ipc(field)
    if column.null_count:  # some ranges may hold no nulls: decide each on its own slice
        def each(start: int, stop: int) -> _Encoded:
            part = column.slice(start, stop - start)
            if part.null_count:
                return ipc(part)
            lengths = None if ids_lengths is None else ids_lengths[start:stop]
            return _prepare(field, part, lengths)[0](0, stop - start)
        return each, None
    plain = _plain(field)
    if plain and field.type == _TOKEN_TYPE and name in _TOKEN_NAMES and not column.values.null_count:
        values, offsets = list_column_values(column)
        lengths = np.diff(offsets)
        if name == "input_ids":
            lengths_u4 = lengths.astype("<u4")

            def ids(start: int, stop: int) -> _Encoded:
                tokens = values[offsets[start]:offsets[stop]]
                id_type = _id_type(tokens)
                # 4-byte ids go as they are (an int32 >= 0 is its own u4): no copy before the one joining the parts
                same = id_type == "<u4" and tokens.dtype == np.dtype("<i4") and tokens.flags.c_contiguous
                payload = memoryview(tokens.view("<u4") if same else tokens.astype(id_type)).cast("B")
                return [name, "ids", id_type], [lengths_u4[start:stop].tobytes(), payload]
            return ids, lengths
        if ids_lengths is not None:
            def mask(start: int, stop: int) -> _Encoded:
                if not np.array_equal(lengths[start:stop], ids_lengths[start:stop]):
                    return ipc(column.slice(start, stop - start))
                bits = values[offsets[start]:offsets[stop]]
                if bool((bits == 1).all()):
                    return [name, "ones"], []
                if bool(((bits == 0) | (bits == 1)).all()):
                    return [name, "bits"], [np.packbits(bits.astype(np.uint8)).tobytes()]
                return ipc(column.slice(start, stop - start))
            return mask, None
    if plain and (pa.types.is_integer(field.type) or pa.types.is_floating(field.type)):
        numbers = column.to_numpy()
        dtype = numbers.dtype.newbyteorder("<")
        numbers = numbers.astype(dtype, copy=False)
        return (lambda start, stop: ([name, "n", dtype.str], [numbers[start:stop].tobytes()])), None
    kind = "s" if field.type == pa.string() else "b" if field.type == pa.binary() else None
    if plain and kind is not None:
        _, offsets_buffer, data = column.buffers()
        string_offsets = np.frombuffer(offsets_buffer, np.int32)[column.offset:column.offset + len(column) + 1]
        string_lengths = np.diff(string_offsets).astype("<u4")
        text = memoryview(b"") if data is None else memoryview(data)

        def strings(start: int, stop: int) -> _Encoded:
            return [name, kind], [string_lengths[start:stop].tobytes(),
                                  text[string_offsets[start]:string_offsets[stop]].tobytes()]
        return strings, None
    return (lambda start, stop: ipc(column.slice(start, stop - start))), None


def _codec(kind: str, dictionary: Optional[bytes]) -> Any:
    """This thread's zstd compressor (`kind` "c") or decompressor ("d") for `dictionary` (None: none),
    made once per thread and dictionary (a run has one; the bytes object's hash is cached)."""
    made = getattr(_codecs, "made", None)
    if made is None:
        made = _codecs.made = {}
    codec = made.get((kind, dictionary))
    if codec is None:
        data = None if dictionary is None else zstandard.ZstdCompressionDict(dictionary)
        codec = made[(kind, dictionary)] = zstandard.ZstdCompressor(level=_ZSTD_LEVEL, dict_data=data) \
            if kind == "c" else zstandard.ZstdDecompressor(dict_data=data)
    return codec


def encode_rows(batch: pa.RecordBatch, *, compress: bool = True, dictionary: Optional[bytes] = None) -> bytes:
    """`batch` as bytes `decode_rows` turns back into an equal batch (see the module docstring).

    Args:
      batch: token rows (any schema; the token columns are written compactly when they qualify).
      compress: zstd-compress the encoding when that makes it smaller (False: never).
      dictionary: a zstd dictionary to compress with (`decode_rows` then needs it too).
    """
    return encode_row_ranges(batch, [0], [batch.num_rows], compress=compress, dictionary=dictionary)[0]


def encode_row_ranges(batch: pa.RecordBatch, starts: Sequence[int], stops: Sequence[int], *,
                      compress: bool = True, dictionary: Optional[bytes] = None) -> list[bytes]:
    """`encode_rows(batch.slice(start, stop - start))` for each row range, byte for byte.

    Each column is taken apart once for the whole batch and each range cuts its payloads from it:
    routing a batch to tens of thousands of hash groups (about one document per group) then costs a
    few slices per part instead of a whole encoding per part.
    """
    ids_index = batch.schema.get_field_index("input_ids")
    if ids_index >= 0 and batch.column(ids_index).null_count and len(starts) > 1:
        # ids with null rows: a range without them has compact ids its masks compare with, as on its own
        return [encode_row_ranges(batch.slice(start, stop - start), [0], [stop - start], compress=compress,
                                  dictionary=dictionary)[0] for start, stop in zip(starts, stops)]
    encoders: list[_RangeEncoder] = []
    ids_lengths: Optional[np.ndarray] = None
    for index in range(batch.num_columns):  # the ids first in the directory's sense: masks compare with them
        encoder, lengths = _prepare(batch.schema.field(index), batch.column(index),
                                    ids_lengths if index > ids_index else None)
        encoders.append(encoder)
        if index == ids_index:
            ids_lengths = lengths
    meta = {k.decode("latin-1"): v.decode("latin-1") for k, v in (batch.schema.metadata or {}).items()}
    encoded = []
    for start, stop in zip(starts, stops):
        directory: list[Any] = []
        payloads: list[bytes | memoryview] = []
        for encoder in encoders:
            entry, parts = encoder(start, stop)
            directory.append(entry + [len(p) for p in parts])
            payloads += parts
        head = json.dumps([directory, meta] if meta else [directory], separators=(",", ":")).encode()
        head += b" " * (-(_HEADER.size + len(head)) % 4)  # the payloads start 4-byte aligned (`_int32_ids`)
        encoded.append(_framed(b"".join([_HEADER.pack(_MAGIC, stop - start, len(head)), head, *payloads]),
                               compress, dictionary))
    return encoded


def _framed(encoded: bytes, compress: bool, dictionary: Optional[bytes]) -> bytes:
    """`encoded` in a zstd frame, when asked and when that is smaller."""
    if compress and len(encoded) >= (MIN_COMPRESSED_BYTES if dictionary is None else _MIN_DICTIONARY_BYTES):
        frame = _codec("c", dictionary).compress(encoded)
        if _ZSTD_HEADER.size + len(frame) < len(encoded):
            return _ZSTD_HEADER.pack(_ZSTD_MAGIC if dictionary is None else _ZSTD_DICT_MAGIC, len(encoded)) + frame
    return encoded


def _int32_ids(ids: np.ndarray) -> np.ndarray:
    """Decoded ids as int32: 4-byte ids (a vocabulary past 65,535) are viewed as they lie in the decoded
    buffer when it is aligned (a u4 id came from an int32 >= 0), narrower ones are widened (a copy)."""
    if ids.dtype.itemsize == 4 and ids.ctypes.data % 4 == 0:
        return ids.view("<i4")
    return ids.astype(np.int32)


def decode_rows(data: bytes, dictionary: Optional[bytes] = None) -> pa.RecordBatch:
    """The batch `encode_rows` encoded (compressed or not; `dictionary`: the one it was compressed with)."""
    magic = bytes(data[:len(_ZSTD_MAGIC)])
    if magic in (_ZSTD_MAGIC, _ZSTD_DICT_MAGIC):
        if magic == _ZSTD_DICT_MAGIC and dictionary is None:
            raise ValueError("these rows were compressed with a shuffle dictionary: decode them with it")
        _, size = _ZSTD_HEADER.unpack_from(data)
        data = _codec("d", dictionary if magic == _ZSTD_DICT_MAGIC else None).decompress(
            data[_ZSTD_HEADER.size:], max_output_size=size)
        if len(data) != size:
            raise ValueError(f"compressed rows decompressed to {len(data)} bytes, expected {size}")
    magic, rows, head_size = _HEADER.unpack_from(data)
    if magic != _MAGIC:
        raise ValueError("not a batch of rows encoded by easydata.io.compact_rows")
    head = json.loads(bytes(data[_HEADER.size:_HEADER.size + head_size]))
    at = _HEADER.size + head_size
    buffer = memoryview(data)
    fields, arrays = [], []
    ids_offsets: Optional[np.ndarray] = None
    for entry in head[0]:
        name, kind = entry[0], entry[1]
        sizes = [s for s in entry[2:] if isinstance(s, int)]
        parts = []
        for size in sizes:
            parts.append(buffer[at:at + size])
            at += size
        if kind == "ids":
            offsets = np.zeros(rows + 1, dtype=np.int64)
            np.cumsum(np.frombuffer(parts[0], "<u4"), out=offsets[1:])
            ids_offsets = offsets
            array = token_list_array(_int32_ids(np.frombuffer(parts[1], entry[2])), offsets)
        elif kind == "ones":
            array = ones_list_array(ids_offsets)
        elif kind == "bits":
            bits = np.unpackbits(np.frombuffer(parts[0], np.uint8), count=int(ids_offsets[-1]))
            array = token_list_array(bits.astype(np.int32), ids_offsets)
        elif kind == "n":
            array = pa.array(np.frombuffer(parts[0], entry[2]))
        elif kind in _STRINGS:
            offsets = np.zeros(rows + 1, dtype=np.int32)
            np.cumsum(np.frombuffer(parts[0], "<u4"), out=offsets[1:])
            array = pa.Array.from_buffers(_STRINGS[kind], rows, [None, pa.py_buffer(offsets), pa.py_buffer(parts[1])])
        else:  # ipc
            one = pa.ipc.open_stream(pa.py_buffer(parts[0])).read_next_batch()
            fields.append(one.schema.field(0))
            arrays.append(one.column(0))
            continue
        fields.append(pa.field(name, array.type))
        arrays.append(array)
    meta = {k.encode("latin-1"): v.encode("latin-1") for k, v in head[1].items()} if len(head) > 1 else None
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields, meta))
