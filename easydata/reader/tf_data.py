"""`tf.data` for TensorFlow users: the reader's batches as a `tf.data.Dataset`.

`as_tf_dataset(reader)` wraps a `TokenReader` or `MixedReader` in `tf.data.Dataset.from_generator`,
so the dataset gives exactly the reader's batches: the same rows, order, per-process sharding
(`process_index` / `process_count`) and resume (`reader.load_state_dict(state)` before iterating;
`reader.state_dict()` after the batches the dataset has produced, so add no `.prefetch()` ahead of a
checkpoint, or checkpoint the state the step consumed). The element signature comes from one batch
read ahead and given back (the reader's state is restored). TensorFlow is imported here only, on
call; reading `gs://` / `s3://` goes through fsspec like every other reader path (tensorflow-io's
file systems are not needed, and its Parquet reader cannot read list columns; see docs/reader.md).
"""

from __future__ import annotations

from typing import Any

__all__ = ["as_tf_dataset"]


def as_tf_dataset(reader: Any) -> Any:
    """A `tf.data.Dataset` of the reader's batches (dicts of `[local_batch, L]` tensors)."""
    import tensorflow as tf

    state = reader.state_dict()
    first = next(iter(reader), None)
    reader.load_state_dict(state)  # the probe is given back: the dataset starts where the reader was
    if first is None:
        raise ValueError("the reader has no batch left to read")
    rows = reader.local_batch_size if reader.drop_remainder else None
    signature = {name: tf.TensorSpec(shape=(rows, *value.shape[1:]), dtype=tf.as_dtype(value.dtype), name=name)
                 for name, value in first.items()}

    def batches() -> Any:
        yield from reader

    return tf.data.Dataset.from_generator(batches, output_signature=signature)
