"""`MixedReader`: global batches mixed from several easydata outputs with weights that change with the
training step; sharded over processes, exactly resumable, prefetched, as numpy or JAX.

    code = TokenReader("out_code", batch_size=64, seed=0)
    text = TokenReader("out_text", batch_size=64, seed=0)
    mixed = MixedReader({"code": code, "text": text},
                        schedule=[WeightSchedulePoint(step=0, weights={"code": 0.2, "text": 0.8}),
                                  WeightSchedulePoint(step=1000, weights={"code": 0.6, "text": 0.4})],
                        interpolation="linear")

How a global batch `s` of `G` rows is made, identically on every process:

1. Counts: `easydata.reader.schedule.allocate` splits `G` into integer counts `n_i` that track the
   cumulative target `sum over steps of G * w_i(step)`, so small weights get their share over steps.
2. Rows: source `i` gives the positions `[consumed_i, consumed_i + n_i)` of its own endless stream,
   epoch after epoch (position `q` is row `q % num_rows` of epoch `q // num_rows` in that reader's
   order: its `seed`, `shuffle` and `window_blocks`). Each source row appears once per source epoch.
3. Arrangement: the `G` rows (sources concatenated in name order) are placed by a seeded permutation
   that depends on `s`, so every process's slice holds a mix of sources, and process `p` of `P` takes
   slots `[p*G/P, (p+1)*G/P)`, reading only the rows of its slots; together the processes read each
   selected row once.

The whole state is `{"version", "step", "consumed", "expected", ...}` (a few numbers per source):
resuming from `state_dict()` continues with exactly the batches an uninterrupted run would have
produced, whatever the prefetch depth, also with another process count. Memory: each source keeps its
own window cache and read-ahead thread, as a `TokenReader` does. Importing this module imports neither Beam nor JAX.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Optional, Sequence, Union

import numpy as np

from easydata.config import WeightSchedulePoint
from easydata.reader.layouts import apply_layout
from easydata.reader.permutation import derive_key, permute
from easydata.reader.schedule import WeightSchedule, allocate
from easydata.reader.batches import JaxBatches, check_prefetch, check_state
from easydata.reader.token_reader import EpochRows, TokenReader

__all__ = ["MixedReader"]

STATE_VERSION = 1
_ARRANGE_KEY = 0x4D4958  # "MIX": keeps the arrangement's keys apart from the sources' epoch-order keys
_SAME = ("batch_size", "seq_length", "layout", "dtype", "process_index", "process_count")  # must agree across sources

_State = tuple[int, tuple[int, ...], tuple[float, ...], tuple[int, ...]]  # step, consumed, expected, counts


class MixedReader(JaxBatches):
    """Iterates global batches mixed from several `TokenReader`s by a weight schedule.

    Each source is read as an endless sequence of its epochs in its own order (its `seed`, `shuffle`,
    `window_blocks`); its `drop_remainder`, `prefetch` and own iteration state play no part. A source
    with a finite `num_epochs` ends the mix at the first global batch that would need more rows than
    its epochs hold. Rows of sources without a `loss_mask` get a `loss_mask` of 1s when another source
    has one (every real token trained, which is what such a source means). The layout is applied to the
    mixed batch, with the pad id of the first source by name (it fills only target positions the
    layouts mask out).

    Args:
      readers: source name -> `TokenReader`; all with the same `batch_size` (the GLOBAL batch), row
        length, layout, `process_index` / `process_count`, columns (`loss_mask` aside) and tokenizer.
      schedule: `WeightSchedulePoint`s (or mappings with `step` and `weights`); see `WeightSchedule`.
      interpolation: `step` (a point's weights hold until the next point), `linear` or `cosine`.
      seed: selects the arrangement of rows inside each global batch.
      prefetch: shuffle windows of each source read ahead on a background thread per source (0: none;
        see `TokenReader`).

    Raises:
      ValueError: no readers, a reader that is not a `TokenReader`, readers that differ in batch size,
        row length, layout, processes, columns or tokenizer, or an invalid schedule.
    """

    drop_remainder = True  # every mixed batch is full, so `as_jax` always applies

    def __init__(self, readers: Mapping[str, TokenReader],
                 schedule: Sequence[Union[WeightSchedulePoint, Mapping[str, Any]]], interpolation: str = "step", *,
                 seed: int = 0, prefetch: int = 1):
        if not readers:
            raise ValueError("MixedReader needs at least one source, got no readers.")
        check_prefetch(prefetch)
        for name, reader in readers.items():
            if not isinstance(name, str) or not isinstance(reader, TokenReader):
                raise ValueError(f"`readers` must map names (str) to TokenReaders, got {name!r}:"
                                 f" {type(reader).__name__}.")
        self.names: tuple[str, ...] = tuple(sorted(readers))
        self.readers: dict[str, TokenReader] = {name: readers[name] for name in self.names}
        _check_compatible(self.readers)
        self.schedule = WeightSchedule(schedule, self.names, interpolation)
        first = self.readers[self.names[0]]
        self.batch_size, self.seq_length, self.layout = first.batch_size, first.seq_length, first.layout
        self.dtype = first.dtype
        self.process_index, self.process_count = first.process_index, first.process_count
        self.local_batch_size = first.local_batch_size
        self.pad_id = first.pad_id
        self.keys: tuple[str, ...] = tuple(dict.fromkeys(k for r in self.readers.values() for k in _raw_keys(r)))
        self.seed, self.prefetch = seed, prefetch
        self._step = 0
        self._consumed: tuple[int, ...] = (0,) * len(self.names)
        self._expected: tuple[float, ...] = (0.0,) * len(self.names)
        # Rows each source gave to the last global batch yielded (all 0 before the first): for logging.
        self.last_counts: dict[str, int] = dict.fromkeys(self.names, 0)

    def weights_at(self, step: int) -> dict[str, float]:
        """The normalised weights of every source at training step `step`."""
        return self.schedule.weights_at(step)

    # ---- state ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable position of the next batch this reader yields."""
        return {"version": STATE_VERSION, "step": self._step,
                "consumed": dict(zip(self.names, self._consumed)),
                "expected": dict(zip(self.names, self._expected)),
                "global_batch_size": self.batch_size, "seed": self.seed,
                "interpolation": self.schedule.interpolation, "schedule": self.schedule.to_json(),
                "sources": {name: _source_fingerprint(r) for name, r in self.readers.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues from `state`; refuses a state of other sources, schedule, batch size or seed.

        Raises:
          ValueError: naming what differs.
        """
        expected = self.state_dict()
        check_state(state, expected, (), "mixed reader", counters=("step",))
        if sorted(state["sources"]) != list(self.names):
            raise ValueError(f"mixed reader state mixes sources {sorted(state['sources'])}, this reader mixes"
                             f" {list(self.names)}.")
        for name in self.names:
            for key, value in expected["sources"][name].items():
                if state["sources"][name].get(key) != value:
                    raise ValueError(f"mixed reader state is for source {name!r} with {key}="
                                     f"{state['sources'][name].get(key)!r}, this reader's {name!r} has {value!r}.")
        check_state(state, expected, ("global_batch_size", "seed", "interpolation", "schedule"), "mixed reader")
        for key in ("consumed", "expected"):
            if sorted(state[key]) != list(self.names):
                raise ValueError(f"mixed reader state has `{key}` for {sorted(state[key])}, expected"
                                 f" {list(self.names)}.")
        self._step = int(state["step"])
        self._consumed = tuple(int(state["consumed"][n]) for n in self.names)
        self._expected = tuple(float(state["expected"][n]) for n in self.names)
        self.last_counts = dict.fromkeys(self.names, 0)

    # ---- reading -------------------------------------------------------------------------------

    def _read_step(self, step: int, counts: Sequence[int], consumed: Sequence[int],
                   sources: dict[str, EpochRows]) -> dict[str, np.ndarray]:
        """This process's rows of global batch `step` (raw arrays, before the layout)."""
        slots = np.arange(self.process_index * self.local_batch_size,
                          (self.process_index + 1) * self.local_batch_size, dtype=np.int64)
        # Slot -> index into the sources' rows concatenated in name order.
        picked = permute(slots, self.batch_size, derive_key(self.seed, _ARRANGE_KEY, step))
        ends = np.cumsum(np.asarray(counts, dtype=np.int64))
        source_of = np.searchsorted(ends, picked, side="right")
        out = {key: np.empty((len(slots), self.seq_length), dtype=np.int32) for key in self.keys}
        for i, name in enumerate(self.names):
            where = np.flatnonzero(source_of == i)
            if not where.size:
                continue
            stream = consumed[i] + picked[where] - (ends[i] - counts[i])  # positions in the endless stream
            order = np.argsort(stream, kind="stable")  # ascending: each window loads once, in order
            where, stream = where[order], stream[order]
            num_rows = self.readers[name].num_rows
            epochs = stream // num_rows
            for epoch in np.unique(epochs).tolist():
                in_epoch = epochs == epoch
                rows = sources[name].read(epoch, stream[in_epoch] - epoch * num_rows)
                for key in self.keys:
                    out[key][where[in_epoch]] = rows[key] if key in rows else 1  # only loss_mask can be absent
        return out

    def _batches(self, sources: dict[str, EpochRows], step: int, consumed: tuple[int, ...],
                 expected: tuple[float, ...]) -> Iterator[tuple[dict[str, np.ndarray], _State]]:
        """Yields `(batch, state after it)` from the given state on."""
        limits = [None if r.num_epochs is None else r.num_epochs * r.num_rows for r in self.readers.values()]
        while True:
            counts, after = allocate(self.schedule.vector_at(step), expected, consumed, self.batch_size)
            if any(limit is not None and c + n > limit for c, n, limit in zip(consumed, counts, limits)):
                return  # a source with finite num_epochs ran out: every process stops at the same step
            batch = self._read_step(step, counts, consumed, sources)
            consumed = tuple(c + n for c, n in zip(consumed, counts))
            expected, step = tuple(after), step + 1
            yield apply_layout(self.layout, batch, self.pad_id, self.dtype), (step, consumed, expected, tuple(counts))

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        """Batches of `[batch_size // process_count, L]` arrays, from the current state on."""
        sources = {name: EpochRows(reader, read_ahead=self.prefetch, num_epochs=reader.num_epochs)
                   for name, reader in self.readers.items()}
        try:
            for batch, (self._step, self._consumed, self._expected, counts) in self._batches(
                    sources, self._step, self._consumed, self._expected):
                self.last_counts = dict(zip(self.names, counts))
                yield batch
        finally:
            for rows in sources.values():
                rows.close()

    def __repr__(self) -> str:
        return (f"MixedReader({list(self.names)}, batch_size={self.batch_size}, {self.schedule!r},"
                f" step={self._step})")


def _raw_keys(reader: TokenReader) -> list[str]:
    """The arrays of the reader's raw batches (what `EpochRows.read` returns)."""
    return list(reader.row_spec.keys)


def _tokenizer_of(reader: TokenReader) -> tuple[Optional[str], Optional[int]]:
    """`(content_hash, vocab_size)` of the tokenizer that wrote the reader's dataset."""
    manifest = reader.index.manifest
    info = (manifest.get("tokenizers") or {}).get(reader.index.name) or manifest.get("tokenizer") or {}
    return info.get("content_hash"), info.get("vocab_size")


def _source_fingerprint(reader: TokenReader) -> dict[str, Any]:
    """What fixes a source's stream: its dataset and its epoch order (from its own state_dict)."""
    state = reader.state_dict()
    return {key: state[key] for key in ("dataset", "seed", "shuffle", "window_blocks")}


def _check_compatible(readers: dict[str, TokenReader]) -> None:
    """Raises ValueError naming the first property in which the sources' batches could not be mixed."""
    for attr in _SAME:
        values = {name: getattr(r, attr) for name, r in readers.items()}
        if len(set(values.values())) > 1:
            raise ValueError(f"MixedReader sources differ in `{attr}`: {values}; build every TokenReader with the"
                             f" same {attr}.")
    keys = {name: sorted(set(_raw_keys(r)) - {"loss_mask"}) for name, r in readers.items()}
    if len({tuple(k) for k in keys.values()}) > 1:
        raise ValueError(f"MixedReader sources have different columns: {keys}.")
    tokenizers = {name: _tokenizer_of(r) for name, r in readers.items()}
    if len(set(tokenizers.values())) > 1:
        described = ", ".join(f"{name!r} content_hash={h!r} vocab_size={v!r}" for name, (h, v) in tokenizers.items())
        raise ValueError(f"MixedReader sources were tokenized with different tokenizers ({described}); token ids"
                         " would mean different things. Prepare every output with the same tokenizer.")
