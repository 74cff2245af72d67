"""The zstd dictionary a large run's shuffle compresses its elements with, trained at planning.

A run with many hash groups (a terabyte plans tens of thousands, `easydata.ops.sharding.choose_num_groups`) routes
each batch as about one element per document, and each element is compressed alone
(`easydata.io.compact_rows`): zstd starts every one with an empty history, so short documents cost
~1.29 bytes per token through the shuffle. Trained on the run's own routed rows (documents sampled
across its inputs, tokenized and routed exactly as the pipeline does), a 64 KiB dictionary gives each
element a history of ids, column directories and keys: 1.03 bytes per token there (Mistral, 65,536
groups, measured on documents it was not trained on), for no more CPU (`benchmarks/bench_shuffle.py`
measures both). Dataflow Shuffle is priced per byte, so this
is most of what a fast tokenizer engine leaves of a large run's bill (docs/dataflow.md).

Runs with fewer than `MIN_GROUPS` groups (a local run of a few GB has a handful) route large elements
that compress well on their own: they get no dictionary and pay no planning time for one. The
dictionary travels with the job's graph to every worker (the shuffle's encoder and decoder); what is
written never depends on it. Training is deterministic for the same sample.

Pure numpy/zstandard plus the pipeline's own reader and tokenizer code; no Beam.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import zstandard

from easydata.io.compact_rows import encode_row_ranges
from easydata.ops.sharding import group_ranges

__all__ = ["MIN_GROUPS", "DICTIONARY_BYTES", "train_shuffle_dictionary", "sample_routed_rows"]

#: Hash groups from which a run's shuffle gets a dictionary.
MIN_GROUPS = 1024
#: The dictionary's size: zstd's usual choice; small beside the graph each worker loads.
DICTIONARY_BYTES = 64 * 1024
#: Encoded elements a dictionary needs at least (zstd's trainer wants many samples).
_MIN_SAMPLES = 64


def sample_routed_rows(batches: Sequence[Any], num_groups: int) -> list[bytes]:
    """What the shuffle's routing step (`transforms.shuffle`) would emit for `batches` (tokenized row
    batches) with `num_groups` groups, uncompressed: the dictionary's training samples."""
    samples: list[bytes] = []
    for batch in batches:
        rows, _, starts, stops = group_ranges(batch, num_groups)
        samples.extend(encode_row_ranges(rows, starts, stops, compress=False))
    return samples


def train_shuffle_dictionary(samples: Sequence[bytes]) -> Optional[bytes]:
    """A zstd dictionary trained on `samples` (encoded shuffle elements); None when there are too few
    to train on, or zstd's trainer finds nothing to learn (then the run compresses without one)."""
    samples = [s for s in samples if s]
    if len(samples) < _MIN_SAMPLES:
        return None
    try:
        return zstandard.train_dictionary(DICTIONARY_BYTES, list(samples)).as_bytes()
    except zstandard.ZstdError:  # e.g. samples too small or too uniform
        return None
