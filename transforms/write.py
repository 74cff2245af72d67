"""`SortGroups` and `WriteShards`: token rows -> globally shuffled, evenly sized shard files under a staging dir.

Wiring only; the algorithm is `easydata.ops.sharding` (see its docstring):

  SortGroups:  rows --route by hash group--> GroupByKey(group) --sort--> one staged file per group (`SortedGroup`)
  WriteShards: sorted groups --count rows/bytes per group--> plan (side input)
               sorted groups --cut at shard bounds--> pieces (row ranges) --GroupByKey(shard)-->
               assemble pieces in group order --> staged shard files

`Pack` emits `SortedGroup`s itself (a group's packed rows are made sorted), so packed rows skip
`SortGroups`. Shard contents and bytes depend only on the rows and the seed, never on bundling or
worker count (no use of Beam's random `num_shards` distribution). Memory is bounded by one group
(sorting) and one row group (assembling): no stage holds a whole shard.
"""

from __future__ import annotations

import posixpath
from typing import Any, Iterable, Iterator, Optional

import apache_beam as beam
import pyarrow as pa

from easydata.config import SaveStageConfig
from easydata.io.filesystems import file_size
from easydata.io.formats import assemble_shard, shard_file_name, write_piece
from easydata.io.staging import Staging
from easydata.rows import HIDDEN_COLUMNS
from easydata.ops.sharding import PieceInfo, ShardInfo, SortedGroup, cut_ranges, data_bytes, \
    plan_shards, serialize_schema, sort_group, unify_schemas
from easydata.memory import return_free_memory
from easydata.io.token_files import TokenFileSpec
from transforms.shuffle import ShuffleRows
from transforms.counters import STATS_TAG
from easydata.run.progress import report_stage
from transforms.failures import classified_failures

__all__ = ["SortGroups", "WriteShards", "sorted_group_path", "HIDDEN_COLUMNS"]



def sorted_group_path(staging: str, name: str, group: int) -> str:
    """Where a group's sorted rows are staged (one deterministic name: a retried bundle rewrites it)."""
    return Staging(staging).sorted_group(name, group)


@classified_failures
class _SortGroupFn(beam.DoFn):
    """Sorts one group's rows by (hash, key) and stages them in one file."""

    def __init__(self, name: str, staging: str, progress_dir: Optional[str] = None):
        self._name, self._staging, self._progress_dir = name, staging, progress_dir

    def process(self, element: tuple[int, Iterable[pa.RecordBatch]]) -> Iterator[SortedGroup]:
        group, batches = element
        table = sort_group(batches)
        if table.num_rows == 0:
            return
        path = sorted_group_path(self._staging, self._name, group)
        write_piece(table, path)
        done = SortedGroup(dataset=self._name, group=group, path=path, rows=table.num_rows,
                           data_bytes=data_bytes(table, HIDDEN_COLUMNS), schema=serialize_schema(table.schema))
        del table
        return_free_memory()
        report_stage(self._progress_dir, groups=1)
        yield done


class SortGroups(beam.PTransform):
    """Routes one output's token rows to hash groups and stages each group sorted (see module docstring).

    Args:
      name: output name (the dataset's name, or `mixed`).
      num_groups: hash groups (`easydata.ops.sharding.choose_num_groups`).
      staging: the run's staging directory.
      group_dir: group the rows through files in this directory (`GroupViaFiles`, for
        runners whose workers share this machine's files); None: Beam's GroupByKey.
      dictionary: the run's shuffle dictionary, if any (`easydata.ops.shuffle_dictionary`).
      progress_dir: where workers report the groups sorted (None: no reporting).

    Returns:
      Outputs `groups`, `SortedGroup` per non-empty group, and `stats` (`transforms.shuffle`).
    """

    def __init__(self, *, name: str, num_groups: int, staging: str, group_dir: Optional[str] = None,
                 dictionary: Optional[bytes] = None, progress_dir: Optional[str] = None):
        super().__init__()
        self._name, self._num_groups, self._staging, self._group_dir = name, num_groups, staging, group_dir
        self._dictionary, self._progress_dir = dictionary, progress_dir

    def expand(self, rows: beam.PCollection) -> dict[str, beam.PCollection]:
        shuffled = rows | "GroupRows" >> ShuffleRows(num_groups=self._num_groups, stage="sort",
                                                     group_dir=self._group_dir, dictionary=self._dictionary)
        return {"groups": shuffled["groups"] | "SortGroup" >> beam.ParDo(_SortGroupFn(self._name, self._staging,
                                                                                          self._progress_dir)),
                STATS_TAG: shuffled[STATS_TAG]}


@classified_failures
def _group_counts(group: SortedGroup) -> tuple[int, tuple[int, int]]:
    return group.group, (group.rows, group.data_bytes)


@classified_failures
class _CutFn(beam.DoFn):
    """Cuts one sorted group at the shard boundaries: one piece (row range of its file) per shard it overlaps."""

    def __init__(self, num_groups: int, save: SaveStageConfig):
        self._num_groups, self._save = num_groups, save

    def process(self, group: SortedGroup, counts: dict[int, tuple[int, int]]) -> Iterator[PieceInfo]:
        plan = plan_shards({g: c[0] for g, c in counts.items()}, {g: c[1] for g, c in counts.items()},
                           self._num_groups, num_shards=self._save.num_shards,
                           max_shard_bytes=self._save.max_shard_bytes)
        for shard, start, stop in cut_ranges(group.group, group.rows, plan):
            yield PieceInfo(dataset=group.dataset, shard=shard, num_shards=plan.num_shards, group=group.group,
                            path=group.path, rows=stop - start, schema=group.schema, start=start)


@classified_failures
class _AssembleShardFn(beam.DoFn):
    """Concatenates a shard's pieces in group order into the output format."""

    def __init__(self, name: str, save: SaveStageConfig, staging: str, token_files: Optional[TokenFileSpec],
                 progress_dir: Optional[str] = None):
        self._name, self._save, self._staging, self._token_files = name, save, staging, token_files
        self._progress_dir = progress_dir

    def process(self, element: tuple[int, Iterable[PieceInfo]], schema: pa.Schema) -> Iterator[ShardInfo]:
        shard, pieces = element
        pieces = sorted(pieces, key=lambda p: p.group)
        num_shards = pieces[0].num_shards
        relative = f"{self._name}/{shard_file_name(shard, num_shards, self._save.format, self._save.codec)}"
        dest = Staging(self._staging).file(relative)
        done = assemble_shard([(p.path, p.start, p.start + p.rows) for p in pieces], dest, self._save.format, schema,
                              compression=self._save.codec, row_group_size=self._save.row_group_size,
                              drop_columns=HIDDEN_COLUMNS, token_files=self._token_files)
        return_free_memory()
        expected = sum(p.rows for p in pieces)
        if done.rows != expected:  # a bug guard: never commit a shard that lost rows
            raise RuntimeError(f"shard {relative}: wrote {done.rows} rows, pieces hold {expected}")
        companions = tuple((role, path, f"{posixpath.dirname(relative)}/{posixpath.basename(path)}")
                           for role, path in sorted(done.companions.items()))
        report_stage(self._progress_dir, shards=1)
        yield ShardInfo(dataset=self._name, shard=shard, num_shards=num_shards, temp_path=dest,
                        relative_path=relative, rows=done.rows, tokens=done.tokens,
                        bytes=file_size(dest) + sum(file_size(path) for _, path, _ in companions),
                        padding_tokens=done.padding_tokens, trained_tokens=done.trained_tokens, columns=done.columns,
                        documents=done.documents, cut_documents=done.cut_documents, companions=companions)


@classified_failures
def _unify(serialized: list[bytes]) -> pa.Schema:
    return unify_schemas(serialized) if serialized else pa.schema([])


class WriteShards(beam.PTransform):
    """Writes one output's sorted groups as shuffled, even shards below `staging/<name>/`.

    Args:
      name: output name (the dataset's name, or `mixed`).
      num_groups: hash groups used for the distributed sort (`easydata.ops.sharding.choose_num_groups`).
      save: format, compression, shard count / size, row group size.
      staging: the run's staging directory.
      token_files: dtype, row width and pad id for the `bin` / `npz` formats.
      progress_dir: where workers report the shards written (None: no reporting).

    Returns:
      A PCollection of `ShardInfo`, one per shard written.
    """

    def __init__(self, *, name: str, num_groups: int, save: SaveStageConfig, staging: str,
                 token_files: Optional[TokenFileSpec] = None, progress_dir: Optional[str] = None):
        super().__init__()
        self._name, self._num_groups, self._save, self._staging = name, num_groups, save, staging
        self._token_files, self._progress_dir = token_files, progress_dir

    def expand(self, groups: beam.PCollection) -> beam.PCollection:
        counts = groups | "MeasureGroups" >> beam.Map(_group_counts)
        pieces = groups | "Cut" >> beam.ParDo(_CutFn(self._num_groups, self._save),
                                              counts=beam.pvalue.AsDict(counts))
        schema = (groups
                  | "GroupSchemas" >> beam.Map(lambda g: g.schema)
                  | "AllSchemas" >> beam.combiners.ToList()
                  | "UnifySchemas" >> beam.Map(_unify))
        return (pieces
                | "KeyByShard" >> beam.Map(lambda p: (p.shard, p))
                | "GroupPieces" >> beam.GroupByKey()
                | "AssembleShards" >> beam.ParDo(_AssembleShardFn(self._name, self._save, self._staging,
                                                                  self._token_files, self._progress_dir),
                                                 schema=beam.pvalue.AsSingleton(schema)))

    def display_data(self) -> dict[str, Any]:
        return {"name": self._name, "format": self._save.format, "num_groups": self._num_groups}
