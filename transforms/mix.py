"""`WeightedMix`: several datasets' token rows -> one stream mixed by share of output tokens.

Wiring only; the algorithm is `easydata.ops.mixing` (see its docstring):

  tokenized rows[dataset] --selection bucket, token histogram--> CombinePerKey(sum) --> plan (side input)
  work units (dataset, unit) --read the unit's checkpointed batches, copies per document (plan)--> mixed rows

The rows are measured as they are tokenized and then dropped: the selection reads them back from the
checkpoints `Tokenize` writes for `--resume` (`easydata.run.checkpoint`), one batch at a time, once the
plan is known. So no step holds the tokenized corpus while the plan waits for every dataset's measure
(a side input would make the runner keep every row of its main input until then), a mixed run's memory
is an unmixed run's, and no token data crosses a step boundary before the shuffle. The selection's input
is the planned list of work units, fixed before the job starts, so what it reads does not depend on
which of a runner's buffers delivered what (`docs/architecture.md`, mixing).

Every decision is a pure function of the data, the weights and the seed, so the mixed rows are the
same whatever the runner, worker count or bundle sizes. The mixed rows then go through `Pack` and
`WriteShards` like any dataset's rows.

Outputs (a dict):
  `rows`: mixed `pa.RecordBatch`es (with the hidden shuffle columns)
  `stats`: a `RunCounters` per work unit: `mix_documents`, `mix_tokens`, `mix_copies`, `mix_selected`,
    `mix_tokens_out` for the manifest
  `mix_plan`: the `MixPlan` (one element)
"""

from __future__ import annotations

import collections
from typing import Any, Iterable, Iterator, Mapping, Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa

from easydata.errors import RunInconsistent
from easydata.ops.mixing import MIXED_NAME, MixPlan, measure_batch, plan_mix, select_batch
from easydata.run.checkpoint import completed_units, read_batch
from easydata.run.counters import RunCounters
from transforms.counters import STATS_TAG
from transforms.failures import classified_failures

__all__ = ["WeightedMix", "MIX_PLAN_TAG", "MIXED_NAME"]

MIX_PLAN_TAG = "mix_plan"


@classified_failures
class _MeasureFn(beam.DoFn):
    """Token histogram over selection buckets of one batch: `(dataset, histogram)`."""

    def __init__(self, dataset: str, seed: int):
        self._dataset, self._seed = dataset, seed

    def process(self, batch: pa.RecordBatch) -> Iterator[tuple[str, np.ndarray]]:
        if batch.num_rows:
            yield self._dataset, measure_batch(batch, self._dataset, self._seed)


@classified_failures
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


@classified_failures
def _plan(_: None, weights: Mapping[str, float], stop_strategy: str, total_tokens: Optional[int],
          *histograms: Optional[tuple[str, np.ndarray]]) -> MixPlan:
    """The plan from each dataset's summed histogram (a side input each; None: the dataset gave no rows)."""
    return plan_mix(dict(h for h in histograms if h is not None), weights, stop_strategy=stop_strategy,
                    total_tokens=total_tokens)


@classified_failures
class _SelectUnitFn(beam.DoFn):
    """Reads one work unit's checkpointed batches and repeats or drops each document as the plan says."""

    def __init__(self, staging: str, seed: int):
        self._staging, self._seed = staging, seed

    def process(self, unit: tuple[str, int], plan: MixPlan) -> Iterator[Any]:
        dataset, index = unit
        done = completed_units(self._staging, dataset, [index]).get(index)
        if done is None:  # tokenizing wrote every unit before the plan existed: a bug, never committed
            raise RunInconsistent(f"mix: work unit {index} of dataset '{dataset}' has no complete checkpoint in"
                                  f" {self._staging}; refusing to select")
        totals: collections.Counter = collections.Counter()
        for path in done.batch_paths:
            batch, _ = read_batch(path)
            if not batch.num_rows:
                continue
            rows, stats = select_batch(batch, dataset, self._seed, plan.sources[dataset])
            totals.update(stats)
            del batch
            if rows is not None:
                yield rows
        yield beam.pvalue.TaggedOutput(STATS_TAG, RunCounters.of(dataset, totals))


class WeightedMix(beam.PTransform):
    """Mixes datasets' token rows by share of output tokens (see module docstring).

    Input: a dict `{dataset name: PCollection of token row batches}` (the `Tokenize` outputs, and a
    resumed run's checkpointed rows, which `ReadDocuments` loads), measured only.

    Args:
      weights: dataset -> weight (normalised); datasets missing here get nothing.
      stop_strategy: `first_exhausted`, `all_exhausted` or `restart`.
      total_tokens: an explicit output token budget (overrides the stop strategy).
      seed: the pipeline seed.
      staging: the run's staging directory, whose checkpoints hold every tokenized batch.
      units: dataset -> its work units (`easydata.io.sources.work_units`, by first split index): the
        checkpoints the selection reads.
    """

    def __init__(self, *, weights: Mapping[str, float], stop_strategy: str, total_tokens: Optional[int], seed: int,
                 staging: str, units: Mapping[str, Iterable[int]]):
        super().__init__()
        self._staging, self._units = staging, {name: sorted(set(u)) for name, u in units.items()}
        self._weights, self._stop_strategy = dict(weights), stop_strategy
        self._total_tokens, self._seed = total_tokens, seed

    def expand(self, rows: dict[str, beam.PCollection]) -> dict[str, beam.PCollection]:
        names = sorted(rows)
        # Each dataset's histograms are summed on their own and reach the plan as side inputs, not through a
        # Flatten: Beam's local FnApiRunner with several workers loses elements of a Flatten of several steps'
        # large outputs (`ReadDocuments`), and a 512 KB histogram per batch is such an output at scale.
        sums = [rows[name]
                | f"Measure[{name}]" >> beam.ParDo(_MeasureFn(name, self._seed))
                | f"SumHistograms[{name}]" >> beam.CombinePerKey(_SumArrays()) for name in names]
        plan = (rows[names[0]].pipeline
                | "PlanMix" >> beam.Create([None])
                | "Plan" >> beam.Map(_plan, self._weights, self._stop_strategy, self._total_tokens,
                                     *[beam.pvalue.AsSingleton(total, default_value=None) for total in sums]))
        units = [(name, index) for name in names for index in self._units.get(name, ())]
        selected = (rows[names[0]].pipeline
                    | "Units" >> beam.Create(units)
                    | "DistributeUnits" >> beam.Reshuffle()
                    | "Select" >> beam.ParDo(_SelectUnitFn(self._staging, self._seed),
                                             plan=beam.pvalue.AsSingleton(plan))
                    .with_output_types(pa.RecordBatch).with_outputs(STATS_TAG, main="rows"))
        return {"rows": selected.rows, STATS_TAG: selected[STATS_TAG], MIX_PLAN_TAG: plan}

    def display_data(self) -> dict[str, Any]:
        return {"weights": str(self._weights), "stop_strategy": self._stop_strategy,
                "total_tokens": str(self._total_tokens)}
