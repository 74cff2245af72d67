"""The shuffle's encoding of token rows (`easydata.io.compact_rows`): every batch comes back exactly
(ids at the edges of every id width, empty documents, long documents cut into several rows, loss
masks, hidden and additional columns, slices, nulls), compressed or not, in fewer bytes than Arrow
IPC, and text-like ids in fewer still once compressed."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from easydata.io.compact_rows import MIN_COMPRESSED_BYTES, decode_rows, encode_row_ranges, encode_rows
from easydata.io.formats import documents_to_batch
from easydata.text.windows import PIECE_COLUMN, cut_documents

EDGES = [0, 1, 255, 256, 65_535, 65_536, 2**31 - 1]


@st.composite
def token_batches(draw: st.DrawFn) -> pa.RecordBatch:
    """Unpacked token rows as the tokenize stage makes them, cut into windows or not, often sliced."""
    high = draw(st.sampled_from(EDGES))
    ids = st.one_of(st.sampled_from([0, high]), st.integers(0, high))
    docs = draw(st.lists(st.lists(ids, max_size=40), max_size=12))
    lengths = np.array([len(d) for d in docs], dtype=np.int64)
    flat = np.array([t for d in docs for t in d], dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    mask = None
    if draw(st.booleans()):
        mask = np.array(draw(st.lists(st.integers(0, 1), min_size=len(flat), max_size=len(flat))), dtype=np.int32)
    extra = {}
    if draw(st.booleans()) and draw(st.integers(1, 8)) < 4:  # long documents: windows, several rows each
        pieces = cut_documents(flat, offsets, mode="window", max_length=draw(st.integers(2, 8)), stride=1, mask=mask)
        flat, offsets, mask = pieces.ids, pieces.offsets, pieces.mask
        extra[PIECE_COLUMN] = pa.array(pieces.piece, type=pa.int32())
    rows = len(offsets) - 1
    fields = {}
    if draw(st.booleans()):
        fields["source"] = draw(st.lists(st.one_of(st.text(max_size=5), st.none()), min_size=rows, max_size=rows))
    if draw(st.booleans()):
        fields["tags"] = draw(st.lists(st.lists(st.integers(-3, 3), max_size=3), min_size=rows, max_size=rows))
    extra["__key__"] = pa.array([f"doc-{i}-é" for i in range(rows)], type=pa.string())
    extra["__hash__"] = pa.array(draw(st.lists(st.integers(0, 2**64 - 1), min_size=rows, max_size=rows)),
                                 type=pa.uint64())
    batch = documents_to_batch(flat, offsets, fields, extra, loss_mask=mask)
    if rows and draw(st.booleans()):
        start = draw(st.integers(0, rows))
        batch = batch.slice(start, draw(st.integers(0, rows - start)))
    return batch


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(batch=token_batches(), compress=st.booleans())
def test_every_batch_comes_back_exactly(batch: pa.RecordBatch, compress: bool) -> None:
    encoded = encode_rows(batch, compress=compress)
    assert compress or encoded[:4] == b"EDR2"
    decoded = decode_rows(encoded)
    assert decoded.schema.equals(batch.schema, check_metadata=True)
    assert decoded.equals(batch)
    assert decoded.num_rows == batch.num_rows
    assert decode_rows(memoryview(encoded)).equals(batch)  # as group files hand them over


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(batch=token_batches(), data=st.data(), compress=st.booleans())
def test_row_ranges_encode_as_their_slices_would(batch: pa.RecordBatch, data: st.DataObject, compress: bool) -> None:
    """The routing step's one-pass encoding of many row ranges is, byte for byte, each slice's own."""
    cuts = sorted(data.draw(st.lists(st.integers(0, batch.num_rows), max_size=8)))
    starts, stops = [0, *cuts], [*cuts, batch.num_rows]
    encoded = encode_row_ranges(batch, starts, stops, compress=compress)
    assert encoded == [encode_rows(batch.slice(a, b - a), compress=compress) for a, b in zip(starts, stops)]
    for (a, b), one in zip(zip(starts, stops), encoded):
        assert decode_rows(one).equals(batch.slice(a, b - a))


def test_ranges_of_columns_with_nulls_are_decided_range_by_range() -> None:
    """A range without the batch's nulls is written compactly, as that range alone would be."""
    ids = pa.array([[1, 2], None, [3, 4, 5], [6]], type=pa.list_(pa.int32()))
    mask = pa.array([[1, 1], [1], None, [0]], type=pa.list_(pa.int32()))
    names = pa.array(["a", None, "c", "d"])
    batch = pa.RecordBatch.from_arrays([ids, mask, names], names=["input_ids", "loss_mask", "name"])
    starts, stops = [0, 1, 2, 3], [1, 2, 3, 4]
    encoded = encode_row_ranges(batch, starts, stops, compress=False)
    assert encoded == [encode_rows(batch.slice(a, b - a), compress=False) for a, b in zip(starts, stops)]
    first = encoded[0]
    assert b'"ids"' in first and b'"ones"' in first and b'"s"' in first and b'"ipc"' not in first
    assert b'"ipc"' in encoded[1]  # the null ids row
    for (a, b), one in zip(zip(starts, stops), encoded):
        assert decode_rows(one).equals(batch.slice(a, b - a))


@pytest.mark.parametrize("high, width", [(255, 1), (256, 2), (65_535, 2), (65_536, 4), (2**31 - 1, 4)])
def test_ids_travel_in_the_narrowest_width(high: int, width: int) -> None:
    tokens = 10_000
    flat = np.full(tokens, high, dtype=np.int32)
    batch = documents_to_batch(flat, np.array([0, tokens]), {}, {"__hash__": pa.array([7], pa.uint64())})
    size = len(encode_rows(batch, compress=False))
    assert width * tokens <= size < width * tokens + 400  # lengths, a short directory, the hash
    assert decode_rows(encode_rows(batch, compress=False)).equals(batch)
    assert len(encode_rows(batch)) < tokens / 20  # one id repeated: next to nothing once compressed


@pytest.mark.parametrize("compress", [False, True])
def test_four_byte_ids_are_used_where_they_were_decoded_not_copied(compress: bool) -> None:
    """Ids of a vocabulary past 65,535 travel as 4 bytes; the payloads start 4-byte aligned, so decoding
    views them in the decoded buffer (a copy of every id otherwise: a gigabyte per gigabyte of Qwen3 ids)."""
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 151_000, 40_000).astype(np.int32)
    ids[::7] = 11  # compressible, like text
    batch = documents_to_batch(ids, np.array([0, 1_000, 25_000, 40_000]), {"source": ["a", "bb", "ccc"]})
    data = encode_rows(batch, compress=compress)
    assert data.startswith(b"EDZ1") == compress
    decoded = decode_rows(data)
    assert decoded.equals(batch)
    address = decoded.column("input_ids").values.buffers()[1].address
    if not compress:  # the ids lie inside `data` itself
        start = np.frombuffer(data, np.uint8).ctypes.data
        assert start <= address < start + len(data)
    assert address % 4 == 0
    narrow = documents_to_batch(ids % 60_000, np.array([0, 40_000]), {})  # 2-byte ids: widened, a copy
    assert decode_rows(encode_rows(narrow, compress=compress)).equals(narrow)


def test_fewer_bytes_than_arrow_ipc_on_token_rows() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 2000, 64)
    flat = rng.integers(0, 32_000, int(lengths.sum())).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    batch = documents_to_batch(flat, offsets, {}, {"__key__": pa.array([f"k{i}" for i in range(64)]),
                                                   "__hash__": pa.array(rng.integers(0, 2**63, 64), pa.uint64())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    compact = len(encode_rows(batch))
    assert compact < 2.1 * len(flat) < len(sink.getvalue()) / 3.5  # ~2 bytes per token instead of ~8


def test_schema_metadata_and_odd_token_columns_survive() -> None:
    ids = pa.array([[1, 2], None, [3]], type=pa.list_(pa.int32()))  # a null row: shipped as IPC
    mask = pa.array([[0, 2], [], [1]], type=pa.list_(pa.int32()))  # not 0/1
    batch = pa.RecordBatch.from_arrays([ids, mask], names=["input_ids", "loss_mask"]).replace_schema_metadata(
        {b"origin": b"test"})
    decoded = decode_rows(encode_rows(batch))
    assert decoded.schema.equals(batch.schema, check_metadata=True) and decoded.equals(batch)


def _text_like_rows(documents: int, seed: int) -> pa.RecordBatch:
    """Ids drawn the way text uses a vocabulary: a few ids very often (Zipf), most rarely."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 600, documents)
    flat = np.minimum(rng.zipf(1.3, int(lengths.sum())), 31_999).astype(np.int32)
    return documents_to_batch(flat, np.concatenate([[0], np.cumsum(lengths)]), {}, {
        "__key__": pa.array([f"doc-{i}" for i in range(documents)]),
        "__hash__": pa.array(rng.integers(0, 2**63, documents), pa.uint64())})


def test_text_like_ids_are_compressed_and_small_elements_are_not() -> None:
    batch = _text_like_rows(64, seed=4)
    raw, compressed = encode_rows(batch, compress=False), encode_rows(batch)
    assert compressed[:4] == b"EDZ1" and raw[:4] == b"EDR2"
    assert len(compressed) < 0.7 * len(raw)
    assert decode_rows(compressed).equals(batch)
    small = pa.RecordBatch.from_arrays([pa.array([[1, 2, 3]], pa.list_(pa.int32()))], names=["input_ids"])
    assert len(encode_rows(small, compress=False)) < MIN_COMPRESSED_BYTES
    assert encode_rows(small) == encode_rows(small, compress=False)  # below the threshold: as it is


def test_incompressible_rows_stay_raw() -> None:
    rng = np.random.default_rng(5)
    flat = rng.integers(0, 2**31 - 1, 5_000).astype(np.int32)  # random 4-byte ids: nothing to gain
    batch = documents_to_batch(flat, np.array([0, 5_000]), {}, {})
    assert encode_rows(batch) == encode_rows(batch, compress=False)


def test_other_bytes_are_refused() -> None:
    with pytest.raises(ValueError, match="not a batch of rows"):
        decode_rows(b"PAR1" + bytes(16))
    compressed = encode_rows(_text_like_rows(16, seed=6))
    with pytest.raises(zstandard.ZstdError):  # a cut frame never decodes to a shorter batch
        decode_rows(compressed[:len(compressed) // 2])


def _a_dictionary() -> bytes:
    from easydata.ops.shuffle_dictionary import sample_routed_rows, train_shuffle_dictionary

    dictionary = train_shuffle_dictionary(sample_routed_rows([_text_like_rows(400, seed=s) for s in (7, 8)], 4096))
    assert dictionary is not None and len(dictionary) > 1000
    return dictionary


_DICTIONARY: list[bytes] = []


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(batch=token_batches(), data=st.data())
def test_rows_compressed_with_a_dictionary_come_back_exactly(batch: pa.RecordBatch, data: st.DataObject) -> None:
    """With the run's shuffle dictionary (`easydata.ops.shuffle_dictionary`), ranges still encode as
    their slices would, and decode, with the dictionary, to what was encoded."""
    if not _DICTIONARY:
        _DICTIONARY.append(_a_dictionary())
    dictionary = _DICTIONARY[0]
    cuts = sorted(data.draw(st.lists(st.integers(0, batch.num_rows), max_size=8)))
    starts, stops = [0, *cuts], [*cuts, batch.num_rows]
    encoded = encode_row_ranges(batch, starts, stops, dictionary=dictionary)
    assert encoded == [encode_rows(batch.slice(a, b - a), dictionary=dictionary) for a, b in zip(starts, stops)]
    for (a, b), one in zip(zip(starts, stops), encoded):
        assert decode_rows(one, dictionary).equals(batch.slice(a, b - a))


def test_a_dictionary_makes_small_elements_smaller_and_is_needed_to_decode() -> None:
    from easydata.ops.shuffle_dictionary import sample_routed_rows, train_shuffle_dictionary

    dictionary = _a_dictionary()
    assert dictionary == _a_dictionary()  # deterministic: every planning of the same sample agrees
    assert train_shuffle_dictionary([b"x" * 600] * 3) is None  # too few samples: no dictionary
    unseen = sample_routed_rows([_text_like_rows(300, seed=9)], 4096)  # one document per element, as at scale
    plain = sum(len(encode_rows(decode_rows(e))) for e in unseen)
    with_dictionary = [encode_rows(decode_rows(e), dictionary=dictionary) for e in unseen]
    assert sum(map(len, with_dictionary)) < 0.9 * plain
    framed = next(e for e in with_dictionary if e[:4] == b"EDZD")
    with pytest.raises(ValueError, match="shuffle dictionary"):
        decode_rows(framed)
    assert decode_rows(framed, dictionary).num_rows == 1
