"""`WeightedMix`: several datasets' token rows -> one stream mixed by share of output tokens.

Wiring only; the algorithm is `easydata.ops.mixing` (see its docstring):

  rows[dataset] --selection bucket, token histogram--> CombinePerKey(sum) --> plan (side input)
  rows[dataset] --copies per document (plan)--> mixed rows (new keys and shuffle hashes)

Every decision is a pure function of the data, the weights and the seed, so the mixed rows are the
same whatever the runner, worker count or bundle sizes. The mixed rows then go through `Pack` and
`WriteShards` like any dataset's rows.

Outputs (a dict):
  `rows`: mixed `pa.RecordBatch`es (with the hidden shuffle columns)
  `mix_stats`: `(dataset, counters)` with `mix_documents`, `mix_tokens`, `mix_copies`,
    `mix_selected`, `mix_tokens_out` for the manifest
  `mix_plan`: the `MixPlan` (one element)
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping, Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa

from easydata.io.formats import take_rows
from easydata.ops.mixing import MIXED_NAME, MixPlan, mixed_keys, plan_mix, select_copies, selection_buckets, token_histogram
from easydata.ops.sharding import HASH_COLUMN, KEY_COLUMN, row_hashes
from easydata.ops.splits import document_keys
from easydata.text.windows import piece_counts

__all__ = ["WeightedMix", "MIX_STATS_TAG", "MIX_PLAN_TAG", "MIXED_NAME"]

MIX_STATS_TAG = "mix_stats"
MIX_PLAN_TAG = "mix_plan"


def _lengths(batch: pa.RecordBatch) -> np.ndarray:
    return np.diff(batch.column("input_ids").offsets.to_numpy()).astype(np.int64)


def _keys(batch: pa.RecordBatch) -> list[str]:
    return batch.column(KEY_COLUMN).to_pylist()


class _MeasureFn(beam.DoFn):
    """Token histogram over selection buckets of one batch: `(dataset, histogram)`."""

    def __init__(self, dataset: str, seed: int):
        self._dataset, self._seed = dataset, seed

    def process(self, batch: pa.RecordBatch) -> Iterator[tuple[str, np.ndarray]]:
        if batch.num_rows:
            buckets = selection_buckets(self._seed, self._dataset, document_keys(_keys(batch)))
            yield self._dataset, token_histogram(buckets, _lengths(batch))


class _SumArrays(beam.CombineFn):
    """Sums int64 histograms (exact, order-independent)."""

    def create_accumulator(self) -> Optional[np.ndarray]:
        return None

    def add_input(self, total: Optional[np.ndarray], histogram: np.ndarray) -> np.ndarray:
        return histogram.copy() if total is None else np.add(total, histogram, out=total)

    def merge_accumulators(self, accumulators: Iterable[Optional[np.ndarray]]) -> Optional[np.ndarray]:
        total = None
        for acc in accumulators:
            if acc is not None:
                total = acc.copy() if total is None else total + acc
        return total

    def extract_output(self, total: Optional[np.ndarray]) -> Optional[np.ndarray]:
        return total


def _plan(histograms: list[tuple[str, np.ndarray]], weights: Mapping[str, float], stop_strategy: str,
          total_tokens: Optional[int]) -> MixPlan:
    return plan_mix(dict(histograms), weights, stop_strategy=stop_strategy, total_tokens=total_tokens)


class _SelectFn(beam.DoFn):
    """Repeats or drops each document of a batch as the plan says; re-keys the copies."""

    def __init__(self, dataset: str, seed: int):
        self._dataset, self._seed = dataset, seed

    def process(self, batch: pa.RecordBatch, plan: MixPlan) -> Iterator[Any]:
        if not batch.num_rows:
            return
        keys = _keys(batch)
        copies = select_copies(selection_buckets(self._seed, self._dataset, document_keys(keys)),
                               plan.sources[self._dataset])
        lengths = _lengths(batch)
        yield beam.pvalue.TaggedOutput(MIX_STATS_TAG, (self._dataset, {
            "mix_documents": piece_counts(batch).documents, "mix_tokens": int(lengths.sum()),
            "mix_copies": int(copies.sum()), "mix_selected": int(np.count_nonzero(copies)),
            "mix_tokens_out": int((lengths * copies).sum())}))
        if not copies.any():
            return
        rows = take_rows(batch, np.repeat(np.arange(batch.num_rows), copies))
        new_keys = mixed_keys(self._dataset, keys, copies)
        rows = rows.set_column(rows.schema.get_field_index(KEY_COLUMN), KEY_COLUMN, pa.array(new_keys, pa.string()))
        rows = rows.set_column(rows.schema.get_field_index(HASH_COLUMN), HASH_COLUMN,
                               pa.array(row_hashes(self._seed, MIXED_NAME, new_keys), pa.uint64()))
        yield rows


class WeightedMix(beam.PTransform):
    """Mixes datasets' token rows by share of output tokens (see module docstring).

    Input: a dict `{dataset name: PCollection of token row batches}` (the `Tokenize` outputs).

    Args:
      weights: dataset -> weight (normalised); datasets missing here get nothing.
      stop_strategy: `first_exhausted`, `all_exhausted` or `restart`.
      total_tokens: an explicit output token budget (overrides the stop strategy).
      seed: the pipeline seed.
    """

    def __init__(self, *, weights: Mapping[str, float], stop_strategy: str, total_tokens: Optional[int], seed: int):
        super().__init__()
        self._weights, self._stop_strategy = dict(weights), stop_strategy
        self._total_tokens, self._seed = total_tokens, seed

    def expand(self, rows: dict[str, beam.PCollection]) -> dict[str, beam.PCollection]:
        names = sorted(rows)
        histograms = ([rows[name] | f"Measure[{name}]" >> beam.ParDo(_MeasureFn(name, self._seed)) for name in names]
                      | "AllHistograms" >> beam.Flatten()
                      | "SumHistograms" >> beam.CombinePerKey(_SumArrays()))
        plan = (histograms
                | "CollectHistograms" >> beam.combiners.ToList()
                | "Plan" >> beam.Map(_plan, self._weights, self._stop_strategy, self._total_tokens))
        selected = [rows[name] | f"Select[{name}]" >> beam.ParDo(
                        _SelectFn(name, self._seed), plan=beam.pvalue.AsSingleton(plan)
                    ).with_output_types(pa.RecordBatch).with_outputs(MIX_STATS_TAG, main="rows") for name in names]
        return {
            "rows": [s.rows for s in selected] | "MixedRows" >> beam.Flatten(),
            MIX_STATS_TAG: [s[MIX_STATS_TAG] for s in selected] | "MixStats" >> beam.Flatten(),
            MIX_PLAN_TAG: plan,
        }

    def display_data(self) -> dict[str, Any]:
        return {"weights": str(self._weights), "stop_strategy": self._stop_strategy,
                "total_tokens": str(self._total_tokens)}
