"""`LoadCheckpoints`: a resumed run's already tokenized work units -> token rows, counters, dead letters.

Thin wiring over `easydata.run.checkpoint`: each done unit's batches are read back from the staging
directory exactly as `Tokenize` wrote them, so they join the freshly tokenized rows and the rest of
the pipeline cannot tell them apart. The unit's reader counters and its (and its chat stage's)
dead-letter files are emitted as the reader would have.

Outputs (tagged, like `ReadDocuments` + `ChatTemplate` + `Tokenize` together):
  main: `pa.RecordBatch` token rows
  `stats`: `(dataset, counters)`
  `rejected_files`: relative dead-letter paths
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

import apache_beam as beam
import pyarrow as pa

from easydata.run.checkpoint import UnitCheckpoint
from easydata.run.progress import ProgressSink
from easydata.run.counters import RunCounters
from transforms.counters import STATS_TAG
from transforms.read import REJECTED_TAG
from transforms.failures import classified_failures

__all__ = ["LoadCheckpoints"]


@classified_failures
class _LoadUnitFn(beam.DoFn):
    def __init__(self, progress_dir: Optional[str]):
        self._progress_dir = progress_dir
        self._progress: Optional[ProgressSink] = None

    def setup(self) -> None:
        self._progress = ProgressSink(self._progress_dir)

    def process(self, unit: UnitCheckpoint) -> Iterator[Any]:
        chat_rejected = truncated = 0
        batch_bytes = 0
        for rows, info in unit.batches():
            if rows.num_rows:
                tokens = len(rows.column("input_ids").values) if "input_ids" in rows.schema.names else 0
                self._progress.add(documents=rows.num_rows, tokens=tokens)
                yield rows
            self._progress.add(input_bytes=int(info.get("input_bytes", 0)))
            batch_bytes += int(info.get("input_bytes", 0))
            chat_rejected += int(info.get("chat_rejected", 0))
            truncated += int(info.get("truncated_tokens", 0))
            if info.get("chat_rejected_file"):
                yield beam.pvalue.TaggedOutput(REJECTED_TAG, info["chat_rejected_file"])
        if chat_rejected or truncated:
            yield beam.pvalue.TaggedOutput(STATS_TAG, RunCounters.of(unit.dataset, documents_rejected=chat_rejected,
                                                                     truncated_tokens=truncated))
        if unit.rejected_file:
            yield beam.pvalue.TaggedOutput(REJECTED_TAG, unit.rejected_file)
        stats = RunCounters.from_json(unit.stats)
        # and the bytes its reading counted after its last batch (`read_splits(unbatched=)`)
        unbatched = stats.counts.get(unit.dataset, {}).get("input_bytes", 0) - batch_bytes
        self._progress.add(input_bytes=max(unbatched, 0), units=1)
        self._progress.flush()  # a resumed unit counts at once, not when the worker ends
        yield beam.pvalue.TaggedOutput(STATS_TAG, stats)

    def teardown(self) -> None:
        if self._progress is not None:
            self._progress.flush()


class LoadCheckpoints(beam.PTransform):
    """Loads one dataset's done work units (see module docstring).

    Args:
      units: the done units (`easydata.run.checkpoint.completed_units`).
      progress_dir: where workers report progress (None: no reporting).
    """

    def __init__(self, *, units: list[UnitCheckpoint], progress_dir: Optional[str] = None):
        super().__init__()
        self._units, self._progress_dir = units, progress_dir

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.pvalue.DoOutputsTuple:
        return (pbegin
                | "Units" >> beam.Create(self._units)
                | "Distribute" >> beam.Reshuffle()
                | "Load" >> beam.ParDo(_LoadUnitFn(self._progress_dir)).with_output_types(pa.RecordBatch)
                .with_outputs(STATS_TAG, REJECTED_TAG, main="rows"))

    def display_data(self) -> dict[str, Any]:
        return {"units": len(self._units)}
