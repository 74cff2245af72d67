"""The pack stage's unit of work: one sorted group of token rows in, packed Arrow rows out.

The Beam `Pack` transform groups documents by their shuffle hash (so a group's content does not
depend on bundling), orders each group by (hash, key) (`easydata.ops.sharding.group_order`), and calls
`pack_group`, which runs `easydata.ops.packing` and returns `list<int32>` columns `input_ids`,
`segment_ids`, `positions` (and `loss_mask` when the input had one; for a staged group, each row's piece
lengths may stand for `segment_ids` and `positions`, which its reader makes: `easydata.io.staged_columns`),
each row exactly `seq_length` long, plus the hidden shuffle columns: a row's key is `<group>:<row>` and
its hash derives from the seed and lies in the group's hash range (`easydata.ops.sharding.hashes_in_group`).
The rows come out sorted by that hash: the group's packed rows are already in their final shuffled order,
ready to be staged and cut into shards.

Provenance: when documents carry `additional_fields`, every packed row also gets, per segment (list
item `k - 1` for segment id `k`), `segment_sources` (the document's key: its input file, relative
to the dataset's files, and its position there, `path@position`, with `#w<n>` for a later window)
and each field's value, as list columns: any token can be traced back to its document and fields.
A document split over rows repeats its provenance in each.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Optional

import numpy as np
import pyarrow as pa

from easydata.config import PackStageConfig
from easydata.io.staged_columns import SEGMENTS_COLUMN, UINT16_MAX, fits_uint16
from easydata.io.token_arrays import list_column_values, token_list_array
from easydata.ops.packing import PackedRows, PackPlan, document_lengths, fill_rows, fills_by_slices, \
    pieces_fill_rows_in_order, plan_packing, row_piece_lengths
from easydata.ops.sharding import HASH_COLUMN, KEY_COLUMN, hashes_in_group, row_hashes
from easydata.rows import PIECE_COLUMN, piece_counts

__all__ = ["PackStats", "pack_group", "uint16_columns", "resolve_pad_id", "PACKED_COLUMNS", "SOURCES_COLUMN"]

PACKED_COLUMNS = ("input_ids", "segment_ids", "positions", "loss_mask")
#: Per packed row, each segment's document key (`path@position`): where its tokens came from.
SOURCES_COLUMN = "segment_sources"
_NOT_FIELDS = {"input_ids", "attention_mask", "loss_mask", KEY_COLUMN, HASH_COLUMN, PIECE_COLUMN}
_ROWS_PER_BATCH = 1024


@dataclasses.dataclass
class PackStats:
    """Counters of one packed group (summed per dataset for the manifest)."""

    documents: int = 0
    cut_documents: int = 0
    pieces: int = 0  # rows packed: documents, or their windows
    rows: int = 0
    segments: int = 0
    tokens: int = 0
    padding_tokens: int = 0

    def as_dict(self) -> dict[str, int]:
        """Counters named `packed_<field>`, to sit beside the reader's counters of a dataset."""
        return {f"packed_{k}": v for k, v in dataclasses.asdict(self).items()}


def resolve_pad_id(config: PackStageConfig, tokenizer_pad: Optional[int], tokenizer_eos: Optional[int]) -> int:
    """The padding id: configured, else the tokenizer's pad token, else its EOS, else 0."""
    for candidate in (config.pad_token_id, tokenizer_pad, tokenizer_eos):
        if candidate is not None:
            return int(candidate)
    return 0


def pack_group(table: pa.Table, *, config: PackStageConfig, pad_id: int, seed: int, dataset: str,
               group: int, order: Optional[np.ndarray] = None, num_groups: int = 1, staged: bool = False
               ) -> tuple[Iterator[pa.RecordBatch], PackStats]:
    """Packs one group's documents (rows of `table`, in `order`, default storage order) into
    fixed-length rows; with `order`, the documents are read in place, not first copied in order.

    Args:
      group, num_groups: which hash group of how many this is (the packed rows' hashes stay in it).
      staged: the rows go to a staged file (`easydata.io.formats.write_staged_batches`), whose reader makes
        `segment_ids` and `positions` from each row's piece lengths: when the pieces are long enough for that
        to be cheap, the batches carry those lengths (`SEGMENTS_COLUMN`) instead of the two columns.

    Returns:
      Record batches of at most 1024 packed rows, sorted by their (hash, key), and the group's counters.
    """
    tokens, offsets = list_column_values(table.column("input_ids"))
    loss_mask = list_column_values(table.column("loss_mask"))[0] if "loss_mask" in table.column_names else None
    plan = plan_packing(document_lengths(offsets, order), config.seq_length, config.strategy,
                        max_segments=config.max_segments_per_row, pool_size=config.pool_rows)
    keys, hashes, by_hash = _row_keys(plan.num_rows, seed=seed, dataset=dataset, group=group, num_groups=num_groups)
    slots = np.empty(plan.num_rows, dtype=np.int64)
    slots[by_hash] = np.arange(plan.num_rows)  # planned row by_hash[i] is written as row i
    derive = staged and _derivable(plan)
    rows = fill_rows(plan, tokens, offsets, config.seq_length, pad_id, loss_mask, order, row_slots=slots,
                     segments=not derive)
    provenance = _provenance(table, plan, order, slots)
    lengths = token_list_array(*row_piece_lengths(plan, slots)) if derive else None
    pieces = piece_counts(table)  # windows of one document are packed as pieces but counted once
    segments, padding = (_plan_counts(plan, config.seq_length) if derive else
                         (rows.num_segments, rows.padding_tokens))
    stats = PackStats(documents=pieces.documents, cut_documents=pieces.cut_documents, pieces=table.num_rows,
                      rows=rows.num_rows, segments=segments, tokens=int(len(tokens)), padding_tokens=padding)
    return _batches(rows, keys[by_hash], hashes[by_hash], seq_length=config.seq_length, extra=provenance,
                    piece_lengths=lengths), stats


def _derivable(plan: PackPlan) -> bool:
    """Whether a staged group's `segment_ids` and `positions` are left to its reader: pieces long enough on
    average that making them there costs a slice each (as `fill_rows` judges), laid out as it assumes."""
    return fills_by_slices(plan) and pieces_fill_rows_in_order(plan)


def _plan_counts(plan: PackPlan, seq_length: int) -> tuple[int, int]:
    """`PackedRows.num_segments` and `.padding_tokens` of the rows `plan` makes, without the rows' arrays: the
    highest segment id that holds a token in each row, summed; the cells no piece fills."""
    highest = np.zeros(plan.num_rows, dtype=np.int64)
    real = plan.length > 0
    np.maximum.at(highest, plan.row[real], plan.segment[real])
    return int(highest.sum()), plan.num_rows * seq_length - int(plan.length.sum())


def uint16_columns(table: pa.Table, *, config: PackStageConfig, pad_id: int) -> tuple[str, ...]:
    """The packed columns `pack_group` makes of `table` whose every value lies in 0..65535, for the packed
    group to be staged in 16 bits (`easydata.io.staged_columns`): `input_ids` when the documents' ids and the
    padding id do, `segment_ids` and `positions` (each under the row's length) when rows are at most 65,535
    long, `loss_mask` when the documents' masks fit (padding adds zeros)."""
    names = []
    if fits_uint16(table.column("input_ids")) and 0 <= pad_id <= UINT16_MAX:
        names.append("input_ids")
    if config.seq_length <= UINT16_MAX:
        names += ["segment_ids", "positions"]
    if "loss_mask" in table.column_names and fits_uint16(table.column("loss_mask")):
        names.append("loss_mask")
    return tuple(names)


def _provenance(table: pa.Table, plan: Any, order: Optional[np.ndarray], slots: np.ndarray) -> dict[str, pa.Array]:
    """`segment_sources` and each additional field as list columns, one item per segment of each
    written row (empty when the documents carry no additional field)."""
    fields = [name for name in table.column_names if name not in _NOT_FIELDS]
    if not fields:
        return {}
    out_row = slots[plan.row]
    placed = np.lexsort((plan.segment, out_row))  # pieces by (written row, segment id)
    documents = plan.doc[placed] if order is None else np.asarray(order)[plan.doc[placed]]
    offsets = np.zeros(len(slots) + 1, dtype=np.int32)
    np.cumsum(np.bincount(out_row, minlength=len(slots)), out=offsets[1:])
    take = pa.array(documents, type=pa.int64())
    return {name: pa.ListArray.from_arrays(pa.array(offsets), table.column(name).take(take).combine_chunks())
            for name in (KEY_COLUMN, *fields)}


def _row_keys(num_rows: int, *, seed: int, dataset: str, group: int, num_groups: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The packed rows' keys `<group>:<row>` and hashes (in the group's range), by planned row, and the
    planned rows sorted by (hash, key)."""
    keys = np.array([f"{group:06d}:{i:09d}" for i in range(num_rows)], dtype=object)
    hashes = hashes_in_group(row_hashes(seed, f"{dataset}#packed", keys), group, num_groups)
    return keys, hashes, np.argsort(hashes, kind="stable")  # keys ascend with the row: ties fall in key order


def _batches(rows: PackedRows, keys: np.ndarray, hashes: np.ndarray, *, seq_length: int,
             extra: Optional[dict[str, pa.Array]] = None, piece_lengths: Optional[pa.ListArray] = None
             ) -> Iterator[pa.RecordBatch]:
    """Record batches of rows already in their final order: slices of the filled arrays, not copies."""
    for first in range(0, rows.num_rows, _ROWS_PER_BATCH):
        last = min(first + _ROWS_PER_BATCH, rows.num_rows)
        offsets = np.arange(last - first + 1, dtype=np.int64) * seq_length
        columns = {"input_ids": token_list_array(rows.input_ids[first:last].ravel(), offsets)}
        if piece_lengths is not None:  # they stand for the segment ids and positions (`pack_group(staged=True)`)
            columns[SEGMENTS_COLUMN] = piece_lengths.slice(first, last - first)
        else:
            columns["segment_ids"] = token_list_array(rows.segment_ids[first:last].ravel(), offsets)
            columns["positions"] = token_list_array(rows.positions[first:last].ravel(), offsets)
        if rows.loss_mask is not None:
            columns["loss_mask"] = token_list_array(rows.loss_mask[first:last].ravel(), offsets)
        for name, values in (extra or {}).items():
            columns[SOURCES_COLUMN if name == KEY_COLUMN else name] = values.slice(first, last - first)
        columns[KEY_COLUMN] = pa.array(keys[first:last], type=pa.string())
        columns[HASH_COLUMN] = pa.array(hashes[first:last], type=pa.uint64())
        yield pa.RecordBatch.from_pydict(columns)
