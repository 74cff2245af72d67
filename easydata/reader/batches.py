"""What every reader of global batches shares: which process this is, and the JAX / tf.data views.

`resolve_processes` gives `(process_index, process_count)` (JAX's when installed); `JaxBatches` adds
`as_jax`, `as_pmap` and `as_tf_dataset` to any reader that iterates `[batch_size // process_count, L]`
numpy batches (`TokenReader`, `MixedReader`, `WindowReader`, `FollowReader`). JAX and TensorFlow are
imported on call only.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Sequence

import numpy as np

__all__ = ["JaxBatches", "check_prefetch", "check_state", "is_count", "resolve_processes"]


def resolve_processes(process_index: Optional[int], process_count: Optional[int],
                      batch_size: Optional[int] = None) -> tuple[int, int]:
    """`(process_index, process_count)`, each defaulting to JAX's when JAX is installed, else 0 / 1.

    Raises:
      ValueError: `process_count` not positive, `process_index` outside `[0, process_count)`, or (with
        `batch_size`, the GLOBAL batch) a batch size that is not positive or does not divide over the
        processes. Every reader checks here, so none yields empty or short batches for a wrong index.
    """
    if process_index is None or process_count is None:
        try:
            import jax
        except ImportError:
            default_index, default_count = 0, 1
        else:
            default_index, default_count = jax.process_index(), jax.process_count()
        process_index = default_index if process_index is None else process_index
        process_count = default_count if process_count is None else process_count
    if batch_size is not None and not is_count(batch_size, least=1):
        raise ValueError(f"`batch_size` must be a positive integer, got {batch_size!r}.")
    if not (is_count(process_count, least=1) and is_count(process_index) and process_index < process_count):
        raise ValueError(f"`process_index` must be in [0, {process_count}) and `process_count` positive, got"
                         f" {process_index} of {process_count}.")
    if batch_size is not None and batch_size % process_count:
        raise ValueError(f"`batch_size` {batch_size} does not divide over {process_count} processes; use a"
                         f" multiple of {process_count}.")
    return process_index, process_count


def is_count(value: Any, least: int = 0) -> bool:
    """An integer (numpy's too; not a bool) of at least `least`."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= least


def check_prefetch(prefetch: Any) -> None:
    """Refuses a read-ahead depth that is not a non-negative integer (every reader that reads ahead)."""
    if not is_count(prefetch):
        raise ValueError(f"`prefetch` must be a non-negative integer (0: no read-ahead), got {prefetch!r}.")


def check_state(state: Any, expected: dict[str, Any], same: Sequence[str], what: str,
                counters: Sequence[str] = ()) -> None:
    """Refuses a `state_dict()` this reader cannot continue from, naming why, before anything changes.

    Args:
      state: what `load_state_dict` was given.
      expected: this reader's own `state_dict()` (its `version` is the one accepted).
      same: keys whose values must equal this reader's (the dataset, batch size, seed, ...).
      what: the reader's name in messages ("reader", "mixed reader", ...).
      counters: keys that must hold non-negative integers (positions: epoch, step, rows).

    Raises:
      ValueError: not a dict of this version, a missing key, a differing value, or a bad counter.
    """
    if not isinstance(state, dict) or state.get("version") != expected["version"]:
        version = state.get("version") if isinstance(state, dict) else state
        raise ValueError(f"{what} state version {version!r} is not {expected['version']}.")
    missing = sorted(set(expected) - set(state))
    if missing:
        raise ValueError(f"{what} state lacks {missing}.")
    for key in same:
        if state[key] != expected[key]:
            raise ValueError(f"{what} state is for {key}={state[key]!r}, this reader has {expected[key]!r}.")
    for key in counters:
        value = state[key]
        if not is_count(value):
            raise ValueError(f"{what} state has {key}={value!r}, not a non-negative integer.")


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

    def _require_whole_batches(self, what: str) -> None:
        if not self.drop_remainder:
            raise ValueError(f"{what} needs drop_remainder=True: every global batch must have the same shape.")

    def as_jax(self, mesh: Any, partition_spec: Any) -> Iterator[dict[str, Any]]:
        """Global `jax.Array`s `[batch_size, L]` laid out by `NamedSharding(mesh, partition_spec)`,
        built from each process's rows with `jax.make_array_from_process_local_data`."""
        import jax
        from jax.sharding import NamedSharding

        self._require_whole_batches("as_jax")
        sharding = NamedSharding(mesh, partition_spec)
        shape = (self.batch_size, self.seq_length)
        _require_divisible(shape, mesh, partition_spec)
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

        self._require_whole_batches("as_pmap")
        devices = jax.local_devices()
        if self.local_batch_size % len(devices):
            raise ValueError(f"the per-process batch {self.local_batch_size} does not divide over"
                             f" {len(devices)} local devices; use a multiple of {len(devices) * self.process_count}"
                             " as batch_size.")
        per_device = self.local_batch_size // len(devices)
        for batch in self:
            yield {k: v.reshape(len(devices), per_device, *v.shape[1:]) for k, v in batch.items()}


def _require_divisible(shape: tuple[int, int], mesh: Any, partition_spec: Any) -> None:
    """Refuses, before the first batch is read, a `[batch_size, L]` shape whose axes do not divide over the
    mesh axes `partition_spec` lays them on (JAX's own `IndivisibleError` came from the first batch).

    Raises:
      ValueError: naming the axis, its size, the mesh axes and a size that divides.
    """
    for dim, (size, axes) in enumerate(zip(shape, tuple(partition_spec) + (None,) * len(shape))):
        names = () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)
        parts = 1
        for name in names:
            parts *= mesh.shape[name] if name in mesh.shape else 1  # an unknown name: JAX's own error names it
        if parts > 1 and size % parts:
            what = "batch_size" if dim == 0 else "seq_length"
            raise ValueError(f"{what} {size} does not divide over the {parts} devices of mesh axes {names} that"
                             f" the partition spec lays it on; use a multiple of {parts}.")
