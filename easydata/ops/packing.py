"""Packing token sequences into fixed-length rows without losing or duplicating a token.

Planning is separate from filling. `plan_packing(lengths, seq_length, strategy)` decides where every
piece of every document goes (pure integer bookkeeping); `fill_rows` then writes the token,
segment-id, position and loss-mask arrays with numpy: one slice copy per piece when pieces are long
(the usual case: a few thousand pieces per million tokens), vectorised per-token index arrays when
they are short (no per-token Python loop either way).

Guarantees, for every strategy:
  * every row is exactly `seq_length` long; padding is only at the row's tail;
  * every token of every document appears exactly once, documents' pieces in order;
  * `segment_ids` number the pieces of a row 1..k and are 0 only on padding;
  * `positions` count 0, 1, ... from the start of each segment.

Strategies:
  greedy     concatenate all documents and cut every `seq_length` tokens; a document crossing a row
             boundary continues in the next row as a new segment (positions restart). Least padding.
  first_fit  first-fit decreasing bin packing: documents longer than `seq_length` are cut into full
             rows plus a remainder; the remaining pieces, longest first, go into the first row with
             room. A document shorter than `seq_length` is never split.
  best_fit   the same, but each piece goes into the row whose free space fits it most tightly.
  pool       streaming: keeps `pool_size` rows open and puts each piece (in arrival order) into the
             open row it fits most tightly; when none fits, the fullest row is closed. Bounded state,
             for inputs too large to sort.

`max_segments` caps documents (segments) per row. First/best fit run in O(n log n) with a segment
tree over rows (or over free-space values); greedy without a cap is fully vectorised.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

__all__ = ["STRATEGIES", "PackPlan", "PackedRows", "plan_packing", "fill_rows", "fills_by_slices",
           "row_piece_lengths", "pieces_fill_rows_in_order", "document_lengths"]

STRATEGIES = ("greedy", "first_fit", "best_fit", "pool")


@dataclasses.dataclass(frozen=True)
class PackPlan:
    """Where each piece of each document goes. All arrays have one entry per piece.

    Attributes:
      num_rows: rows produced.
      doc: document index of the piece.
      start: offset of the piece within its document.
      length: tokens in the piece.
      row: row the piece is placed in.
      col: offset of the piece within its row.
      segment: segment id of the piece within its row (1-based).
    """

    num_rows: int
    doc: np.ndarray
    start: np.ndarray
    length: np.ndarray
    row: np.ndarray
    col: np.ndarray
    segment: np.ndarray


@dataclasses.dataclass(frozen=True)
class PackedRows:
    """Packed rows as `[num_rows, seq_length]` int32 arrays (`loss_mask` None when absent)."""

    input_ids: np.ndarray
    segment_ids: Optional[np.ndarray]  # None: not written (`fill_rows(segments=False)`)
    positions: Optional[np.ndarray]
    loss_mask: Optional[np.ndarray]

    @property
    def num_rows(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def padding_tokens(self) -> int:
        return int(np.count_nonzero(self.segment_ids == 0))

    @property
    def num_segments(self) -> int:
        return int(self.segment_ids.max(axis=1, initial=0).sum()) if self.num_rows else 0


def _check(lengths: np.ndarray, seq_length: int, strategy: str, max_segments: Optional[int],
           pool_size: int) -> None:
    if seq_length <= 0:
        raise ValueError(f"`seq_length` must be positive, got {seq_length}.")
    if strategy not in STRATEGIES:
        raise ValueError(f"`strategy` must be one of {', '.join(STRATEGIES)}, got {strategy!r}.")
    if max_segments is not None and max_segments <= 0:
        raise ValueError(f"`max_segments` must be positive or None, got {max_segments}.")
    if pool_size <= 0:
        raise ValueError(f"`pool_size` must be positive, got {pool_size}.")
    if lengths.ndim != 1 or (len(lengths) and lengths.min() < 0):
        raise ValueError("`lengths` must be a 1-D array of non-negative integers.")


def plan_packing(lengths: np.ndarray, seq_length: int, strategy: str = "first_fit", *,
                 max_segments: Optional[int] = None, pool_size: int = 8) -> PackPlan:
    """Plans the placement of documents of the given token `lengths` (see the module docstring)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    _check(lengths, seq_length, strategy, max_segments, pool_size)
    if strategy == "greedy" and max_segments is None:
        return _plan_greedy(lengths, seq_length)
    if strategy == "greedy":
        return _plan_greedy_capped(lengths, seq_length, max_segments)
    items_doc, items_start, items_len = _cut_long_documents(lengths, seq_length)
    if strategy == "pool":
        bins = _assign_pool(items_len, seq_length, max_segments, pool_size)
    else:
        order = np.argsort(-items_len, kind="stable")  # longest first, ties in input order
        assigned = _assign_bins(items_len[order], seq_length, max_segments, best=strategy == "best_fit")
        bins = [[int(order[i]) for i in members] for members in assigned]
    return _plan_from_bins(bins, items_doc, items_start, items_len)


# ---- greedy ------------------------------------------------------------------------------------------


def _plan_greedy(lengths: np.ndarray, seq_length: int) -> PackPlan:
    ends = np.cumsum(lengths)
    starts = ends - lengths
    total = int(ends[-1]) if len(ends) else 0
    docs = np.flatnonzero(lengths > 0)
    first_row = starts[docs] // seq_length
    last_row = (ends[docs] - 1) // seq_length
    count = last_row - first_row + 1
    doc = np.repeat(docs, count)
    rank = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    row = np.repeat(first_row, count) + rank
    begin = np.maximum(starts[doc], row * seq_length)
    end = np.minimum(ends[doc], (row + 1) * seq_length)
    segment = _segments_in_row(row)
    return PackPlan(num_rows=-(-total // seq_length), doc=doc, start=begin - starts[doc], length=end - begin,
                    row=row, col=begin - row * seq_length, segment=segment)


def _segments_in_row(row: np.ndarray) -> np.ndarray:
    """1-based rank of each piece within its row (pieces sorted by row)."""
    if len(row) == 0:
        return np.zeros(0, dtype=np.int64)
    new_row = np.concatenate([[True], row[1:] != row[:-1]])
    idx = np.arange(len(row))
    return idx - np.maximum.accumulate(np.where(new_row, idx, 0)) + 1


def _plan_greedy_capped(lengths: np.ndarray, seq_length: int, max_segments: int) -> PackPlan:
    """Greedy with a cap on segments per row: a row also closes when it holds `max_segments` pieces."""
    doc, start, length, row, col, segment = ([] for _ in range(6))
    r, used, segs = 0, 0, 0
    for d, n in enumerate(lengths.tolist()):
        offset = 0
        while offset < n:
            if used == seq_length or segs == max_segments:
                r, used, segs = r + 1, 0, 0
            take = min(n - offset, seq_length - used)
            for out, value in zip((doc, start, length, row, col, segment), (d, offset, take, r, used, segs + 1)):
                out.append(value)
            offset, used, segs = offset + take, used + take, segs + 1
    arrays = [np.asarray(a, dtype=np.int64) for a in (doc, start, length, row, col, segment)]
    return PackPlan(r + 1 if doc else 0, *arrays)


# ---- bin strategies --------------------------------------------------------------------------------


def _cut_long_documents(lengths: np.ndarray, seq_length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Items to pack: documents up to `seq_length` whole; longer ones as full chunks + remainder."""
    pieces = -(-lengths // seq_length)  # 0 for empty documents: nothing to place
    doc = np.repeat(np.arange(len(lengths)), pieces)
    rank = np.arange(int(pieces.sum())) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    start = rank * seq_length
    length = np.minimum(lengths[doc] - start, seq_length)
    return doc, start, length


class _MaxTree:
    """Segment tree of maxima over `size` slots, answering "leftmost slot >= lo holding >= x"."""

    def __init__(self, size: int, fill: int):
        self.n = 1
        while self.n < max(size, 1):
            self.n *= 2
        self.tree = [fill] * (2 * self.n)

    def set(self, i: int, value: int) -> None:
        """Sets slot `i`; the walk up stops at the first node whose maximum is unchanged, since its ancestors'
        are then unchanged too (a long document's full-row chunks, each closing its own new bin, stop at once)."""
        tree = self.tree
        i += self.n
        tree[i] = value
        i //= 2
        while i:
            highest = max(tree[2 * i], tree[2 * i + 1])
            if tree[i] == highest:
                break
            tree[i] = highest
            i //= 2

    def leftmost(self, lo: int, x: int) -> int:
        """The smallest slot index >= lo whose value is >= x, or -1."""
        return self._search(1, 0, self.n, lo, x)

    def _search(self, node: int, left: int, right: int, lo: int, x: int) -> int:
        if right <= lo or self.tree[node] < x:
            return -1
        if right - left == 1:
            return left
        mid = (left + right) // 2
        found = self._search(2 * node, left, mid, lo, x)
        return found if found >= 0 else self._search(2 * node + 1, mid, right, lo, x)


def _assign_bins(sizes: np.ndarray, capacity: int, max_segments: Optional[int], *, best: bool) -> list[list[int]]:
    """First-fit or best-fit over items in the given order; returns the item indices of each bin."""
    bins: list[list[int]] = []
    free: list[int] = []
    if best:
        # by_free[f]: open bins with exactly f free slots, lowest index first; the tree marks which
        # free-space values have an open bin, to find the tightest fit >= size.
        import heapq

        by_free: list[list[int]] = [[] for _ in range(capacity + 1)]
        present = _MaxTree(capacity + 1, 0)
        for item, size in enumerate(sizes.tolist()):
            f = present.leftmost(size, 1) if size > 0 else -1
            if f < 0:
                b = len(bins)
                bins.append([])
                free.append(capacity)
            else:
                b = heapq.heappop(by_free[f])
                if not by_free[f]:
                    present.set(f, 0)
            bins[b].append(item)
            free[b] -= size
            if free[b] > 0 and (max_segments is None or len(bins[b]) < max_segments):
                heapq.heappush(by_free[free[b]], b)
                present.set(free[b], 1)
        return bins
    tree = _MaxTree(len(sizes), -1)
    # A leading run of items as long as a bin (a longest-first order starts with long documents' full-row
    # chunks) each closes a new bin of its own, which the loop would find one item at a time.
    short = np.flatnonzero(sizes != capacity)
    whole = int(short[0]) if len(short) else len(sizes)
    bins.extend([item] for item in range(whole))
    free.extend([0] * whole)
    for item, size in enumerate(sizes[whole:].tolist(), whole):
        b = tree.leftmost(0, size)
        if b < 0 or b >= len(bins):
            b = len(bins)
            bins.append([])
            free.append(capacity)
        bins[b].append(item)
        free[b] -= size
        full = free[b] == 0 or (max_segments is not None and len(bins[b]) >= max_segments)
        tree.set(b, -1 if full else free[b])
    return bins


def _assign_pool(sizes: np.ndarray, capacity: int, max_segments: Optional[int], pool_size: int) -> list[list[int]]:
    """Items in arrival order into at most `pool_size` open rows (tightest fit); closes the fullest."""
    closed: list[list[int]] = []
    open_rows: list[tuple[list[int], int]] = []  # (items, free), in opening order
    for item, size in enumerate(sizes.tolist()):
        fits = [i for i, (members, f) in enumerate(open_rows)
                if f >= size and (max_segments is None or len(members) < max_segments)]
        if fits:
            i = min(fits, key=lambda j: (open_rows[j][1], j))
        else:
            if len(open_rows) == pool_size:
                fullest = min(range(len(open_rows)), key=lambda j: (open_rows[j][1], j))
                closed.append(open_rows.pop(fullest)[0])
            open_rows.append(([], capacity))
            i = len(open_rows) - 1
        members, f = open_rows[i]
        members.append(item)
        open_rows[i] = (members, f - size)
        if f - size == 0 or (max_segments is not None and len(members) >= max_segments):
            closed.append(open_rows.pop(i)[0])
    closed.extend(members for members, _ in open_rows)
    return closed


def _plan_from_bins(bins: list[list[int]], items_doc: np.ndarray, items_start: np.ndarray,
                    items_len: np.ndarray) -> PackPlan:
    counts = np.fromiter((len(b) for b in bins), dtype=np.int64, count=len(bins))
    order = np.fromiter((i for b in bins for i in b), dtype=np.int64, count=int(counts.sum()))
    row = np.repeat(np.arange(len(bins)), counts)
    length = items_len[order]
    segment = _segments_in_row(row)
    col = np.cumsum(length) - length
    col -= np.repeat(col[np.cumsum(counts) - counts] if len(counts) else col[:0], counts)
    return PackPlan(num_rows=len(bins), doc=items_doc[order], start=items_start[order], length=length,
                    row=row, col=col, segment=segment)


# ---- filling ----------------------------------------------------------------------------------------


_MIN_MEAN_PIECE_FOR_SLICES = 32  # tokens per piece from which one slice copy per piece beats index arrays


def fill_rows(plan: PackPlan, tokens: np.ndarray, offsets: np.ndarray, seq_length: int, pad_id: int,
              loss_mask: Optional[np.ndarray] = None, order: Optional[np.ndarray] = None,
              row_slots: Optional[np.ndarray] = None, segments: bool = True) -> PackedRows:
    """Writes the planned rows.

    Args:
      plan: from `plan_packing` over the documents' lengths (in `order`, when given).
      tokens: all documents' tokens back to back; document `i` is `tokens[offsets[i]:offsets[i + 1]]`.
      offsets: document boundaries (length = documents + 1).
      seq_length: row length.
      pad_id: id written on padding.
      loss_mask: per-token mask aligned with `tokens`, or None.
      order: the documents in the order the plan numbers them (`plan.doc == j` is document
        `order[j]`); None: storage order. Packs a sorted group without first copying it sorted.
      row_slots: where each planned row goes (planned row `r` is written as output row
        `row_slots[r]`; a permutation of the plan's rows); None: plan order. Writes the rows in
        their final (e.g. shuffled) order without copying them into it afterwards.
      segments: False: `segment_ids` and `positions` are not written (None), for a caller that keeps each
        row's piece lengths instead (`row_piece_lengths`) and makes them later
        (`easydata.io.token_arrays.segments_from_lengths`).
    """
    rows = plan.num_rows
    if row_slots is not None and (len(row_slots) != rows or
                                  not np.array_equal(np.sort(row_slots), np.arange(rows))):
        raise ValueError(f"`row_slots` must be a permutation of the plan's {rows} rows.")
    ids = np.full(rows * seq_length, pad_id, dtype=np.int32)
    segment_ids = np.zeros(rows * seq_length, dtype=np.int32) if segments else None
    positions = np.zeros(rows * seq_length, dtype=np.int32) if segments else None
    mask = np.zeros(rows * seq_length, dtype=np.int32) if loss_mask is not None else None
    starts = np.asarray(offsets, dtype=np.int64)[:-1]
    if order is not None:
        starts = starts[np.asarray(order, dtype=np.int64)]
    source = starts[plan.doc] + plan.start
    row = plan.row if row_slots is None else np.asarray(row_slots)[plan.row]
    target = row.astype(np.int64) * seq_length + plan.col
    total = int(plan.length.sum())
    if fills_by_slices(plan):
        count = np.arange(seq_length, dtype=np.int32)  # a piece is at most one row long
        for src, dst, n, segment in zip(source.tolist(), target.tolist(), plan.length.tolist(), plan.segment.tolist()):
            ids[dst:dst + n] = tokens[src:src + n]
            if segment_ids is not None:
                segment_ids[dst:dst + n] = segment
                positions[dst:dst + n] = count[:n]
            if mask is not None:
                mask[dst:dst + n] = loss_mask[src:src + n]
    else:
        rank = np.arange(total) - np.repeat(np.cumsum(plan.length) - plan.length, plan.length)
        src = np.repeat(source, plan.length) + rank
        dst = np.repeat(target, plan.length) + rank
        ids[dst] = tokens[src]
        if segment_ids is not None:
            segment_ids[dst] = np.repeat(plan.segment, plan.length)
            positions[dst] = rank
        if mask is not None:
            mask[dst] = loss_mask[src]
    shape = (rows, seq_length)
    return PackedRows(ids.reshape(shape), None if segment_ids is None else segment_ids.reshape(shape),
                      None if positions is None else positions.reshape(shape),
                      None if mask is None else mask.reshape(shape))


def fills_by_slices(plan: PackPlan) -> bool:
    """Whether `fill_rows` copies the plan's pieces one slice each (long pieces: `_MIN_MEAN_PIECE_FOR_SLICES`
    tokens or more on average) rather than through per-token index arrays."""
    return len(plan.length) * _MIN_MEAN_PIECE_FOR_SLICES <= int(plan.length.sum())


def row_piece_lengths(plan: PackPlan, row_slots: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
    """Each written row's piece lengths in segment order (`row_slots` as for `fill_rows`), as flat lengths and
    row offsets: from them `easydata.io.token_arrays.segments_from_lengths` makes the `segment_ids` and
    `positions` `fill_rows` writes (when `pieces_fill_rows_in_order`)."""
    row = plan.row if row_slots is None else np.asarray(row_slots)[plan.row]
    placed = np.lexsort((plan.segment, row))
    offsets = np.zeros(plan.num_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=plan.num_rows), out=offsets[1:])
    return plan.length[placed].astype(np.int32), offsets


def pieces_fill_rows_in_order(plan: PackPlan) -> bool:
    """Whether every row's pieces lie back to back from its first column in segment order, numbered 1, 2, ...
    (what `segments_from_lengths` makes): true of every strategy's plan, checked before relying on it."""
    if len(plan.row) == 0:
        return True
    if np.any(np.diff(plan.row) < 0):
        return False
    first = np.concatenate([[True], plan.row[1:] != plan.row[:-1]])
    ends = np.cumsum(plan.length)
    row_start = np.maximum.accumulate(np.where(first, ends - plan.length, 0))
    return bool(np.array_equal(plan.col, ends - plan.length - row_start) and
                np.array_equal(plan.segment, _segments_in_row(plan.row)))


def document_lengths(offsets: np.ndarray, order: Optional[np.ndarray] = None) -> np.ndarray:
    """Token counts of the documents bounded by `offsets`, in `order` (None: storage order): what
    `plan_packing` takes for documents `fill_rows` reads in that order."""
    lengths = np.diff(np.asarray(offsets, dtype=np.int64))
    return lengths if order is None else lengths[np.asarray(order, dtype=np.int64)]
