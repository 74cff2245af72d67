"""What every reader of global batches shares: which process this is, and the JAX / tf.data views.

`resolve_processes` gives `(process_index, process_count)` (JAX's when installed); `JaxBatches` adds
`as_jax`, `as_pmap` and `as_tf_dataset` to any reader that iterates `[batch_size // process_count, L]`
numpy batches (`TokenReader`, `MixedReader`, `WindowReader`, `FollowReader`). JAX and TensorFlow are
imported on call only.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

import numpy as np

__all__ = ["JaxBatches", "resolve_processes"]


def resolve_processes(process_index: Optional[int], process_count: Optional[int]) -> tuple[int, int]:
    """`(process_index, process_count)`, each defaulting to JAX's when JAX is installed, else 0 / 1."""
    if process_index is not None and process_count is not None:
        return process_index, process_count
    try:
        import jax
    except ImportError:
        default_index, default_count = 0, 1
    else:
        default_index, default_count = jax.process_index(), jax.process_count()
    return (default_index if process_index is None else process_index,
            default_count if process_count is None else process_count)


class JaxBatches:
    """`as_jax` / `as_pmap` (and `as_tf_dataset`) for any reader that iterates `[batch_size // process_count, L]` numpy batches.

    Shared by `TokenReader` and `MixedReader`; the host class provides `batch_size`, `seq_length`,
    `local_batch_size`, `process_count`, `drop_remainder` and `__iter__`. JAX is imported on call only.
    """

    batch_size: int
    seq_length: int
    local_batch_size: int
    process_count: int
    drop_remainder: bool

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        raise NotImplementedError

    def as_jax(self, mesh: Any, partition_spec: Any) -> Iterator[dict[str, Any]]:
        """Global `jax.Array`s `[batch_size, L]` laid out by `NamedSharding(mesh, partition_spec)`,
        built from each process's rows with `jax.make_array_from_process_local_data`."""
        import jax
        from jax.sharding import NamedSharding

        if not self.drop_remainder:
            raise ValueError("as_jax needs drop_remainder=True: every global batch must have the same shape.")
        sharding = NamedSharding(mesh, partition_spec)
        shape = (self.batch_size, self.seq_length)
        for batch in self:
            yield {k: jax.make_array_from_process_local_data(sharding, v, shape) for k, v in batch.items()}

    def as_tf_dataset(self) -> Any:
        """A `tf.data.Dataset` of these batches (same rows, order, sharding, resume);
        `easydata.reader.tf_data`. TensorFlow is imported on call only."""
        from easydata.reader.tf_data import as_tf_dataset

        return as_tf_dataset(self)

    def as_pmap(self) -> Iterator[dict[str, Any]]:
        """Batches `[local_device_count, batch_size // process_count // local_device_count, L]` (numpy,
        which `jax.pmap` splits over local devices along the first axis)."""
        import jax

        devices = jax.local_devices()
        if self.local_batch_size % len(devices):
            raise ValueError(f"the per-process batch {self.local_batch_size} does not divide over"
                             f" {len(devices)} local devices; use a multiple of {len(devices) * self.process_count}"
                             " as batch_size.")
        per_device = self.local_batch_size // len(devices)
        for batch in self:
            yield {k: v.reshape(len(devices), per_device, *v.shape[1:]) for k, v in batch.items()}
