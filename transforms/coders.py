"""Beam coders for the pipeline's bulk elements: Arrow record batches and document batches.

Why: a PCollection without a type hint gets Beam's `FastPrimitivesCoder`, which pickles unknown
objects, and Beam's element counters estimate sizes by encoding sampled elements (the first ten of
every PCollection, then fewer). A sampled 5 MB record batch or a whole hash group was pickled just to
be measured. These coders measure a record batch by its buffer sizes and a document batch by the
input bytes it came from, and encode record batches in Arrow's IPC stream format (what a remote
runner's shuffle then carries) instead of pickle.

Importing this module registers both coders; the transforms declare their outputs' types with
`with_output_types` (e.g. `pa.RecordBatch`, `Tuple[int, pa.RecordBatch]`) so Beam picks them.
"""

from __future__ import annotations

import pickle
from typing import Tuple

import pyarrow as pa
from apache_beam import coders

from transforms.beam_internals import TypeCoder, type_coders_are_known
from easydata.io.sources import DocumentBatch

__all__ = ["RecordBatchCoder", "DocumentBatchCoder", "KeyedBatch"]

#: `(hash group, rows)`: what the routing steps emit.
KeyedBatch = Tuple[int, pa.RecordBatch]


def _encode_record_batch(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _decode_record_batch(data: bytes) -> pa.RecordBatch:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_next_batch()


class RecordBatchCoder(TypeCoder):
    """A `pa.RecordBatch` as one Arrow IPC stream; size estimated from its buffers, without encoding."""

    TYPE = pa.RecordBatch
    encode = staticmethod(_encode_record_batch)
    decode = staticmethod(_decode_record_batch)
    estimate = staticmethod(lambda batch: _estimate(batch.nbytes))


#: Beam's size estimates are C ints: a larger estimate raised OverflowError (a 2 GiB line read as a dead letter).
_MAX_ESTIMATE = 2**31 - 1


def _estimate(size: int) -> int:
    return min(int(size), _MAX_ESTIMATE)


def _document_batch_size(batch: DocumentBatch) -> int:
    if batch.rows is not None:  # a resumed run's loaded token rows
        return _estimate(batch.rows.nbytes)
    return _estimate(batch.input_bytes or sum(map(len, batch.texts)))


class DocumentBatchCoder(TypeCoder):
    """A `DocumentBatch`, pickled; size estimated from the input bytes it was read from."""

    TYPE = DocumentBatch
    encode = staticmethod(lambda batch: pickle.dumps(batch, pickle.HIGHEST_PROTOCOL))
    decode = staticmethod(pickle.loads)
    estimate = staticmethod(_document_batch_size)


if type_coders_are_known():  # else Beam's own coders (pickling, slower to size; never wrong)
    coders.registry.register_coder(pa.RecordBatch, RecordBatchCoder)
    coders.registry.register_coder(DocumentBatch, DocumentBatchCoder)
