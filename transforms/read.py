"""`ReadDocuments`: work units of input splits -> batches of documents, with dead letters and counters.

A thin Beam wrapper over `easydata.io.sources`: a dataset's splits are planned before the job is built (so a
bad glob fails before it starts) and grouped into work units (`easydata.io.sources.work_units`: a split of a
large file, or several whole small files), which the launcher writes to the staging directory
(`easydata.run.staged_units`). The units' ids are distributed over workers with a reshuffle; each worker
looks its units' splits up and reads them into `DocumentBatch`es. Records that cannot become documents are
written, per unit, to `<staging>/rejected/<dataset>/split-<index>.jsonl` (its first split's index: a
deterministic name, so a retried bundle rewrites the same file) and counted.

A resumed run reads the same way: a unit the interrupted run tokenized (`resumed`) is loaded from its checkpoint,
each batch a `DocumentBatch` holding its token rows, with the counters and dead letters its reading gave.

Outputs (tagged):
  main: `DocumentBatch`
  `stats`: a `RunCounters` per work unit: `documents_in`, `documents_rejected`, `input_bytes`, and the
    `partial_inputs` when a file of the unit could be read only in part
  `rejected_files`: relative paths of dead-letter files written
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Iterator, Optional

import apache_beam as beam

from easydata.errors import InputError
from easydata.run.checkpoint import completed_units, write_unit
from easydata.config import DatasetConfig
from easydata.io.dead_letters import dead_letter_path, write_dead_letters
from easydata.run.counters import RunCounters
from easydata.memory import return_free_memory
from easydata.run.progress import ProgressSink
from easydata.io.sources import DocumentBatch, Reject, read_splits
from easydata.run.staged_units import StagedUnits
from transforms.counters import STATS_TAG
from transforms.failures import classified_failures

__all__ = ["ReadDocuments", "STATS_TAG", "REJECTED_TAG"]

REJECTED_TAG = "rejected_files"


@dataclasses.dataclass(frozen=True)
class _ReadSettings:
    """What every worker needs to read a dataset's work units (see `ReadDocuments`)."""

    dataset: DatasetConfig
    batch_size: int
    max_document_bytes: Optional[int]
    staging: str
    progress_dir: Optional[str]
    messages_field: str
    checkpoint: bool
    resumed: frozenset[int] = frozenset()


@classified_failures
class _ReadSplitsFn(beam.DoFn):
    """Reads a work unit (its splits in order, in batches that run across them, sharing one `num_rows` limit)."""

    def __init__(self, settings: _ReadSettings):
        self._settings = settings
        self._progress: Optional[ProgressSink] = None
        self._units: Optional[StagedUnits] = None

    def setup(self) -> None:
        self._progress = ProgressSink(self._settings.progress_dir)
        self._units = StagedUnits(self._settings.staging, self._settings.dataset.name)

    def process(self, unit_id: int) -> Iterator[Any]:
        settings = self._settings
        if unit_id in settings.resumed:
            yield from self._load(unit_id)
            return
        unit = self._units[unit_id]
        rejects: list[Reject] = []
        unbatched: list[int] = []
        documents = 0
        input_bytes = 0
        batches = 0
        for batch in read_splits(unit, settings.dataset, batch_size=settings.batch_size,
                                 max_document_bytes=settings.max_document_bytes, limit=settings.dataset.num_rows,
                                 rejects=rejects, messages_field=settings.messages_field, unbatched=unbatched):
            documents += len(batch)
            input_bytes += batch.input_bytes
            self._progress.add(input_bytes=batch.input_bytes, documents=len(batch))  # with the bytes they came from
            batch.unit, batch.index = unit[0].index, batches
            batches += 1
            yield batch
        input_bytes += sum(unbatched)  # read after the last document: rejected records, the end of a file
        self._progress.add(input_bytes=sum(unbatched), units=1)
        return_free_memory()
        self._progress.flush()  # this unit's bytes and documents, counted now
        rel = None
        if rejects:
            rel = write_dead_letters(settings.staging,
                                     dead_letter_path(settings.dataset.name, f"split-{unit[0].index:05d}"), rejects)
            yield beam.pvalue.TaggedOutput(REJECTED_TAG, rel)
        rejected = sum(r.records for r in rejects)
        name = settings.dataset.name
        stats = RunCounters.of(name, documents_in=documents + rejected, documents_rejected=rejected,
                               input_bytes=input_bytes)
        partial = [r.partial_entry() for r in rejects if r.partial_input]
        if partial:  # files read only in part: listed in the manifest (`easydata.run.finalize`)
            stats.partial_inputs[name] = partial
        if settings.checkpoint:
            write_unit(settings.staging, name, unit[0].index, batches=batches, stats=stats.to_json(),
                       rejected_file=rel, splits=[split.index for split in unit])
        yield beam.pvalue.TaggedOutput(STATS_TAG, stats)

    def _load(self, unit_id: int) -> Iterator[Any]:
        """A unit an interrupted run tokenized: its checkpointed batches, each as a `DocumentBatch` holding its
        rows (`rows`: the tokenize step passes them on), and its counters and dead letters as reading gave them."""
        name = self._settings.dataset.name
        unit = completed_units(self._settings.staging, name, [unit_id]).get(unit_id)
        if unit is None:  # planned as done, then removed: the staging directory changed under the run
            raise InputError(f"dataset '{name}': the checkpoint of work unit {unit_id} is gone from"
                             f" {self._settings.staging}; run again without --resume")
        chat_rejected = truncated = batch_bytes = 0
        for rows, info in unit.batches():
            input_bytes = int(info.get("input_bytes", 0))
            self._progress.add(input_bytes=input_bytes, documents=rows.num_rows)
            batch_bytes += input_bytes
            chat_rejected += int(info.get("chat_rejected", 0))
            truncated += int(info.get("truncated_tokens", 0))
            if info.get("chat_rejected_file"):
                yield beam.pvalue.TaggedOutput(REJECTED_TAG, info["chat_rejected_file"])
            if rows.num_rows:
                yield DocumentBatch(dataset=name, keys=[], texts=[], fields={}, input_bytes=input_bytes, rows=rows)
        if chat_rejected or truncated:
            yield beam.pvalue.TaggedOutput(STATS_TAG, RunCounters.of(name, documents_rejected=chat_rejected,
                                                                     truncated_tokens=truncated))
        if unit.rejected_file:
            yield beam.pvalue.TaggedOutput(REJECTED_TAG, unit.rejected_file)
        stats = RunCounters.from_json(unit.stats)
        # and the bytes its reading counted after its last batch (`read_splits(unbatched=)`)
        unbatched = stats.counts.get(name, {}).get("input_bytes", 0) - batch_bytes
        self._progress.add(input_bytes=max(unbatched, 0), units=1)
        self._progress.flush()  # a resumed unit counts at once, not when the worker ends
        yield beam.pvalue.TaggedOutput(STATS_TAG, stats)

    def teardown(self) -> None:
        if self._progress is not None:
            self._progress.flush()


class ReadDocuments(beam.PTransform):
    """Reads work units of one dataset into `DocumentBatch`es (see module docstring).

    Args:
      dataset: the dataset config.
      units: the ids of the work units to read (`easydata.io.sources.work_units`, each its first split's
        index); their splits are looked up in the staging directory (`easydata.run.staged_units`: the
        launcher writes them there before the job starts), so the job graph holds ids, not file names.
      batch_size: documents per batch.
      max_document_bytes: larger documents are rejected.
      staging: the run's staging directory (the units; dead letters go below it).
      progress_dir: where workers report progress (None: no reporting).
      messages_field: field holding chat messages when the content field is absent.
      checkpoint: record each finished work unit for `--resume` (`easydata.run.checkpoint`).
      resumed: the units (of `units`) an interrupted run tokenized (`RunPlan`'s `resumed_units`): loaded from
        their checkpoints instead of read, as `DocumentBatch`es holding their token rows (`rows`).
    """

    def __init__(self, *, dataset: DatasetConfig, units: Iterable[int], batch_size: int,
                 max_document_bytes: Optional[int], staging: str, progress_dir: Optional[str] = None,
                 messages_field: str = "messages", checkpoint: bool = False, resumed: Iterable[int] = ()):
        super().__init__()
        self._settings = _ReadSettings(dataset=dataset, batch_size=batch_size, max_document_bytes=max_document_bytes,
                                       staging=staging, progress_dir=progress_dir, messages_field=messages_field,
                                       checkpoint=checkpoint, resumed=frozenset(resumed))
        self._dataset = dataset
        self._units = sorted(units)

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.pvalue.DoOutputsTuple:
        return (pbegin
                | "Splits" >> beam.Create(self._units)
                | "Distribute" >> beam.Reshuffle()
                | "Read" >> beam.ParDo(_ReadSplitsFn(self._settings)).with_output_types(DocumentBatch)
                .with_outputs(STATS_TAG, REJECTED_TAG, main="documents"))

    def display_data(self) -> dict[str, Any]:
        return {"dataset": self._dataset.name, "units": len(self._units), "resumed": len(self._settings.resumed)}
