"""`Pack`: unpacked token rows -> fixed-length packed rows, deterministically.

Documents are routed to hash groups (the same groups as the shuffle, sized to fit a worker), each
group is sorted by (hash, key) and packed by `easydata.ops.pack_stage.pack_group`. A group's content and
order depend only on the data and the seed, so the packed rows are the same whatever the runner,
worker count or bundle sizes. The packed rows keep hashes in their group's range and come out in
their final order, so each group's rows are staged at once as a sorted group file for `WriteShards`
(no second routing and sort, unlike unpacked rows, which go through `SortGroups`).

Outputs:
  `groups`: `SortedGroup`, one per group
  `stats`: a `RunCounters` per group (`PackStats.as_dict()` under the output's name), and the
    shuffle's byte counts (`transforms.shuffle`)
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Optional

import apache_beam as beam
import pyarrow as pa

from easydata.config import PackStageConfig
from easydata.ops.pack_stage import pack_group, uint16_columns
from easydata.io.formats import write_staged_batches
from easydata.io.staged_columns import SEGMENTS_COLUMN, derived_bytes
from easydata.memory import return_free_memory
from easydata.ops.sharding import SortedGroup, data_bytes, group_order, group_table, serialize_schema
from transforms.shuffle import ShuffleRows
from easydata.rows import HIDDEN_COLUMNS
from transforms.write import sorted_group_path
from easydata.run.counters import RunCounters
from transforms.counters import STATS_TAG
from easydata.run.progress import report_stage
from transforms.failures import classified_failures

__all__ = ["Pack"]



@classified_failures
class _PackGroupFn(beam.DoFn):
    def __init__(self, name: str, config: PackStageConfig, pad_id: int, seed: int, num_groups: int, staging: str,
                 progress_dir: Optional[str] = None):
        self._name, self._config, self._pad_id, self._seed = name, config, pad_id, seed
        self._num_groups, self._staging, self._progress_dir = num_groups, staging, progress_dir
        self._rows = beam.metrics.Metrics.counter("easydata", "packed_rows")

    def process(self, element: tuple[int, Iterable[pa.RecordBatch]]) -> Iterator[Any]:
        group, batches = element
        table = group_table(batches)
        packed, stats = pack_group(table, config=self._config, pad_id=self._pad_id, seed=self._seed,
                                   dataset=self._name, group=group, order=group_order(table),
                                   num_groups=self._num_groups, staged=True)
        measured = {"bytes": 0}

        def measure(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:  # the bytes of the rows as written, segment ids and positions included
                measured["bytes"] += data_bytes(batch, (*HIDDEN_COLUMNS, SEGMENTS_COLUMN)) + derived_bytes(batch)
                yield batch

        path = sorted_group_path(self._staging, self._name, group)
        narrow = uint16_columns(table, config=self._config, pad_id=self._pad_id)
        rows, schema = write_staged_batches(measure(packed), path, narrow=narrow)
        if rows:
            yield SortedGroup(dataset=self._name, group=group, path=path, rows=rows, data_bytes=measured["bytes"],
                              schema=serialize_schema(schema))
        self._rows.inc(stats.rows)
        del table, packed
        return_free_memory()
        report_stage(self._progress_dir, groups=1)
        yield beam.pvalue.TaggedOutput(STATS_TAG, RunCounters.of(self._name, stats.as_dict()))


class Pack(beam.PTransform):
    """Packs one dataset's token rows (see module docstring).

    Args:
      name: dataset (output) name; part of the packed rows' shuffle keys.
      config: pack stage settings.
      pad_id: id written on padding.
      seed: the pipeline seed.
      num_groups: hash groups (`easydata.ops.sharding.choose_num_groups`).
      staging: the run's staging directory (sorted group files go below it).
      group_dir: group the documents through files in this directory (`GroupViaFiles`, for
        runners whose workers share this machine's files); None: Beam's GroupByKey.
      dictionary: the run's shuffle dictionary, if any (`easydata.ops.shuffle_dictionary`).
      progress_dir: where workers report the groups packed (None: no reporting).
    """

    def __init__(self, *, name: str, config: PackStageConfig, pad_id: int, seed: int, num_groups: int,
                 staging: str, group_dir: Optional[str] = None, dictionary: Optional[bytes] = None,
                 progress_dir: Optional[str] = None):
        super().__init__()
        self._name, self._config, self._pad_id = name, config, pad_id
        self._seed, self._num_groups, self._staging, self._group_dir = seed, num_groups, staging, group_dir
        self._dictionary, self._progress_dir = dictionary, progress_dir

    def expand(self, rows: beam.PCollection) -> dict[str, beam.PCollection]:
        shuffled = rows | "GroupDocuments" >> ShuffleRows(num_groups=self._num_groups, stage="pack",
                                                          group_dir=self._group_dir, dictionary=self._dictionary)
        packed = shuffled["groups"] | "PackGroups" >> beam.ParDo(
            _PackGroupFn(self._name, self._config, self._pad_id, self._seed, self._num_groups, self._staging,
                         self._progress_dir)
        ).with_outputs(STATS_TAG, main="groups")
        stats = (packed[STATS_TAG], shuffled[STATS_TAG]) | "AllPackStats" >> beam.Flatten()
        return {"groups": packed.groups, STATS_TAG: stats}

    def display_data(self) -> dict[str, Any]:
        return {"seq_length": self._config.seq_length, "strategy": self._config.strategy}
