"""`WeightedMix` wiring: what Beam produces (measured from the rows, selected from their checkpoints) equals the
pure selection, whatever the batching."""

from __future__ import annotations

import pytest
import collections

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.testing.util import assert_that, equal_to

from beam_pipelines.runners import OfflineDirectRunner
from easydata.run.checkpoint import batch_path, write_batch, write_unit
from easydata.ops.mixing import mixed_keys, plan_mix, select_copies, selection_buckets, token_histogram
from easydata.ops.sharding import HASH_COLUMN, KEY_COLUMN, row_hashes
from easydata.run.counters import RunCounters
from transforms.counters import STATS_TAG, SumCounters
from transforms.mix import MIX_PLAN_TAG, WeightedMix

pytestmark = pytest.mark.slow

SEED = 5


def _documents(name: str, n: int, rng: np.random.Generator) -> tuple[list[str], list[list[int]]]:
    keys = [f"{name}.jsonl@{i * 100}" for i in range(n)]
    return keys, [rng.integers(0, 1000, size=int(rng.integers(1, 60))).tolist() for _ in range(n)]


def _batches(name: str, keys: list[str], ids: list[list[int]], size: int) -> list[pa.RecordBatch]:
    return [pa.RecordBatch.from_pydict({
        "input_ids": pa.array(ids[i:i + size], pa.list_(pa.int32())),
        KEY_COLUMN: pa.array(keys[i:i + size], pa.string()),
        HASH_COLUMN: pa.array(row_hashes(SEED, name, keys[i:i + size]), pa.uint64()),
    }) for i in range(0, len(keys), size)]


def _expected(data, weights):
    buckets = {n: selection_buckets(SEED, n, keys) for n, (keys, _) in data.items()}
    lengths = {n: np.array([len(x) for x in ids]) for n, (_, ids) in data.items()}
    plan = plan_mix({n: token_histogram(buckets[n], lengths[n]) for n in data}, weights,
                    stop_strategy="all_exhausted")
    rows = []
    for n, (keys, ids) in data.items():
        copies = select_copies(buckets[n], plan.sources[n])
        by_key = dict(zip(keys, ids))
        rows.extend((k, tuple(by_key[k.split("/", 1)[1].rsplit("#", 1)[0]])) for k in mixed_keys(n, keys, copies))
    return sorted(rows), plan


def _checkpoint(staging: str, data, batch_size: int) -> dict[str, list[int]]:
    """Writes each source's batches as `Tokenize` and `ReadDocuments` checkpoint them (units of 3 batches)."""
    units: dict[str, list[int]] = {}
    for n, (keys, ids) in data.items():
        batches = _batches(n, keys, ids, batch_size)
        for u, start in enumerate(range(0, len(batches), 3)):
            part = batches[start:start + 3]
            for i, b in enumerate(part):
                write_batch(batch_path(staging, n, u, i), b, {})
            write_unit(staging, n, u, batches=len(part), stats=RunCounters().to_json(), rejected_file=None)
            units.setdefault(n, []).append(u)
    return units


def _run(data, weights, batch_size: int, staging: str):
    def rows_of(batch: pa.RecordBatch):
        keys = batch.column(KEY_COLUMN).to_pylist()
        hashes = batch.column(HASH_COLUMN).to_numpy()
        np.testing.assert_array_equal(hashes, row_hashes(SEED, "mixed", keys))  # re-hashed for the shuffle
        return list(zip(keys, map(tuple, batch.column("input_ids").to_pylist())))

    expected, plan = _expected(data, weights)
    tokens_out = {n: p.planned_tokens for n, p in plan.sources.items()}
    units = _checkpoint(staging, data, batch_size)
    with beam.Pipeline(runner=OfflineDirectRunner()) as p:
        inputs = {n: p | f"Create[{n}]" >> beam.Create(_batches(n, keys, ids, batch_size))
                  for n, (keys, ids) in data.items()}
        mixed = inputs | WeightedMix(weights=weights, stop_strategy="all_exhausted", total_tokens=None, seed=SEED,
                                     staging=staging, units=units)
        assert_that(mixed["rows"] | beam.FlatMap(rows_of), equal_to(expected), label="Rows")
        stats = (mixed[STATS_TAG] | beam.CombineGlobally(SumCounters())
                 | beam.FlatMap(lambda c: [(n, c.count(n)["mix_tokens_out"]) for n in c.counts]))
        assert_that(stats, equal_to(sorted(tokens_out.items())), label="Stats")
        assert_that(mixed[MIX_PLAN_TAG], equal_to([plan]), label="Plan")
    return expected


def test_mixed_rows_equal_the_pure_selection_for_any_batching(tmp_path):
    rng = np.random.default_rng(1)
    data = {"big": _documents("big", 300, rng), "small": _documents("small", 40, rng)}
    weights = {"big": 0.5, "small": 0.5}
    expected = _run(data, weights, batch_size=64, staging=str(tmp_path / "a"))
    _run(data, weights, batch_size=7, staging=str(tmp_path / "b"))  # same rows, other bundles (checked inside)
    per_source = collections.Counter(k.split("/", 1)[0] for k, _ in expected)
    assert per_source["big"] == 300 and per_source["small"] > 40  # the small source is repeated
