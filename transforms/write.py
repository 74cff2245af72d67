"""`WriteShards`: token rows -> globally shuffled, evenly sized shard files under a staging dir.

Wiring only; the algorithm is `easydata.sharding` (see its docstring):

  rows --route by hash group--> GroupByKey(group) --sort, cut at shard bounds--> pieces
       --count rows/bytes per group--> plan (side input)
  pieces --GroupByKey(shard)--> assemble pieces in group order --> staged shard files

Shard contents and bytes depend only on the rows and the seed, never on bundling or worker count
(no use of Beam's random `num_shards` distribution). Memory is bounded by one group (sorting) and
one row group (assembling): no stage holds a whole shard.
"""

from __future__ import annotations

import posixpath
from typing import Any, Iterable, Iterator, Optional

import apache_beam as beam
import pyarrow as pa

from easydata.config import SaveStageConfig
from easydata.filesystems import file_size, join
from easydata.formats import assemble_shard, shard_file_name, write_piece
from easydata.sharding import HASH_COLUMN, KEY_COLUMN, PieceInfo, ShardInfo, cut_pieces, plan_shards, \
    serialize_schema, sort_group, split_by_group, unify_schemas
from easydata.token_files import TokenFileSpec
from easydata.windows import PIECE_COLUMN
from transforms.coders import KeyedBatch
from transforms.group_files import GroupBatchesViaFiles

__all__ = ["WriteShards"]

_HIDDEN = (HASH_COLUMN, KEY_COLUMN, PIECE_COLUMN)


def _group_counts(keyed: tuple[int, pa.RecordBatch]) -> tuple[int, tuple[int, int]]:
    group, batch = keyed
    data_bytes = sum(batch.column(name).nbytes for name in batch.schema.names if name not in _HIDDEN)
    return group, (batch.num_rows, data_bytes)


def _sum_pairs(pairs: Iterable[tuple[int, int]]) -> tuple[int, int]:
    rows = total = 0
    for r, b in pairs:
        rows += r
        total += b
    return rows, total


class _SortAndCutFn(beam.DoFn):
    """Sorts one group and writes its pieces (one per shard it overlaps)."""

    def __init__(self, name: str, num_groups: int, save: SaveStageConfig, staging: str):
        self._name, self._num_groups, self._save, self._staging = name, num_groups, save, staging

    def process(self, element: tuple[int, Iterable[pa.RecordBatch]],
                counts: dict[int, tuple[int, int]]) -> Iterator[PieceInfo]:
        group, batches = element
        plan = plan_shards({g: c[0] for g, c in counts.items()}, {g: c[1] for g, c in counts.items()},
                           self._num_groups, num_shards=self._save.num_shards,
                           max_shard_bytes=self._save.max_shard_bytes)
        table = sort_group(batches)
        for shard, piece in cut_pieces(table, group, plan):
            path = join(self._staging, "pieces", self._name, f"s{shard:05d}-g{group:06d}.arrow")
            write_piece(piece, path)
            yield PieceInfo(dataset=self._name, shard=shard, num_shards=plan.num_shards, group=group, path=path,
                            rows=piece.num_rows, schema=serialize_schema(piece.schema))


class _AssembleShardFn(beam.DoFn):
    """Concatenates a shard's pieces in group order into the output format."""

    def __init__(self, name: str, save: SaveStageConfig, staging: str, token_files: Optional[TokenFileSpec]):
        self._name, self._save, self._staging, self._token_files = name, save, staging, token_files

    def process(self, element: tuple[int, Iterable[PieceInfo]], schema: pa.Schema) -> Iterator[ShardInfo]:
        shard, pieces = element
        pieces = sorted(pieces, key=lambda p: p.group)
        num_shards = pieces[0].num_shards
        relative = f"{self._name}/{shard_file_name(shard, num_shards, self._save.format, self._save.compression)}"
        dest = join(self._staging, relative)
        done = assemble_shard([p.path for p in pieces], dest, self._save.format, schema,
                              compression=self._save.compression, row_group_size=self._save.row_group_size,
                              drop_columns=_HIDDEN, token_files=self._token_files)
        expected = sum(p.rows for p in pieces)
        if done.rows != expected:  # a bug guard: never commit a shard that lost rows
            raise RuntimeError(f"shard {relative}: wrote {done.rows} rows, pieces hold {expected}")
        companions = tuple((role, path, f"{posixpath.dirname(relative)}/{posixpath.basename(path)}")
                           for role, path in sorted(done.companions.items()))
        yield ShardInfo(dataset=self._name, shard=shard, num_shards=num_shards, temp_path=dest,
                        relative_path=relative, rows=done.rows, tokens=done.tokens,
                        bytes=file_size(dest) + sum(file_size(path) for _, path, _ in companions),
                        padding_tokens=done.padding_tokens, trained_tokens=done.trained_tokens, columns=done.columns,
                        documents=done.documents, cut_documents=done.cut_documents, companions=companions)


def _unify(serialized: list[bytes]) -> pa.Schema:
    return unify_schemas(serialized) if serialized else pa.schema([])


class WriteShards(beam.PTransform):
    """Writes one output's token rows as shuffled, even shards below `staging/<name>/`.

    Args:
      name: output name (the dataset's name, or `mixed`).
      num_groups: hash groups used for the distributed sort (`easydata.sharding.choose_num_groups`).
      save: format, compression, shard count / size, row group size.
      staging: the run's staging directory.
      token_files: dtype, row width and pad id for the `bin` / `npz` formats.
      group_dir: group the rows through files in this directory (`GroupBatchesViaFiles`, for
        runners whose workers share this machine's files); None: Beam's GroupByKey.

    Returns:
      A PCollection of `ShardInfo`, one per shard written.
    """

    def __init__(self, *, name: str, num_groups: int, save: SaveStageConfig, staging: str,
                 token_files: Optional[TokenFileSpec] = None, group_dir: Optional[str] = None):
        super().__init__()
        self._name, self._num_groups, self._save, self._staging = name, num_groups, save, staging
        self._token_files, self._group_dir = token_files, group_dir

    def expand(self, rows: beam.PCollection) -> beam.PCollection:
        keyed = rows | "RouteToGroups" >> beam.FlatMap(split_by_group, self._num_groups).with_output_types(KeyedBatch)
        counts = (keyed
                  | "MeasureGroups" >> beam.Map(_group_counts)
                  | "SumGroups" >> beam.CombinePerKey(_sum_pairs))
        pieces = (keyed
                  | "GroupRows" >> (beam.GroupByKey() if self._group_dir is None
                                    else GroupBatchesViaFiles(self._group_dir))
                  | "SortAndCut" >> beam.ParDo(_SortAndCutFn(self._name, self._num_groups, self._save,
                                                             self._staging), counts=beam.pvalue.AsDict(counts)))
        schema = (pieces
                  | "PieceSchemas" >> beam.Map(lambda p: p.schema)
                  | "AllSchemas" >> beam.combiners.ToList()
                  | "UnifySchemas" >> beam.Map(_unify))
        return (pieces
                | "KeyByShard" >> beam.Map(lambda p: (p.shard, p))
                | "GroupPieces" >> beam.GroupByKey()
                | "AssembleShards" >> beam.ParDo(_AssembleShardFn(self._name, self._save, self._staging,
                                                                  self._token_files),
                                                 schema=beam.pvalue.AsSingleton(schema)))

    def display_data(self) -> dict[str, Any]:
        return {"name": self._name, "format": self._save.format, "num_groups": self._num_groups}
