"""Packing: property-based invariants for every strategy, plus literal layouts for edge sizes.

For random document lengths (including 0, 1, L-1, L, L+1 and 10L) every strategy must produce rows of
exactly L tokens in which each document's tokens appear exactly once and in order, segment ids run
1..k with 0 only as trailing padding, and positions restart at 0 in every segment.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from easydata.ops import packing
from easydata.ops.packing import STRATEGIES, PackedRows, fill_rows, plan_packing
from tests.conftest import pack_documents

L = 16
PAD = -1


def _documents(lengths: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Token i of document d is d * 1000 + i: every token is unique and names its place."""
    tokens = np.concatenate([np.arange(n, dtype=np.int32) + 1000 * d for d, n in enumerate(lengths)] or
                            [np.zeros(0, np.int32)]).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return tokens, offsets


def assert_packed_invariants(rows, lengths: list[int], seq_length: int, max_segments=None) -> None:
    ids, seg, pos = rows.input_ids, rows.segment_ids, rows.positions
    assert ids.shape == seg.shape == pos.shape == (rows.num_rows, seq_length)
    pad = seg == 0
    assert np.all(ids[pad] == PAD)
    # padding only at the tail of a row
    assert not np.any(np.maximum.accumulate(pad, axis=1) & ~pad)
    # segment ids 1..k in order, no gaps
    for r in range(rows.num_rows):
        real = seg[r][~pad[r]]
        assert len(real) > 0, "no empty rows"
        k = real.max()
        assert list(np.unique(real)) == list(range(1, k + 1))
        assert np.all(np.diff(real) >= 0)
        if max_segments is not None:
            assert k <= max_segments
        for s in range(1, k + 1):
            assert list(pos[r][seg[r] == s]) == list(range(int(np.sum(seg[r] == s))))
    # every token exactly once, each document's pieces in order
    flat = ids[~pad]
    assert len(flat) == sum(lengths)
    for d, n in enumerate(lengths):
        placed = flat[(flat >= 1000 * d) & (flat < 1000 * d + 1000)] if n else np.zeros(0)
        assert sorted(placed.tolist()) == list(range(1000 * d, 1000 * d + n))
        # in order across rows and segments: reading rows in order gives 0..n-1 for greedy; for the
        # bin strategies pieces of one document are full chunks then the remainder, also in order
        assert placed.tolist() == sorted(placed.tolist())


EDGE = st.sampled_from([0, 1, L - 1, L, L + 1, 10 * L])
LENGTHS = st.lists(st.one_of(EDGE, st.integers(0, 3 * L)), max_size=40)


@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lengths=LENGTHS, cap=st.one_of(st.none(), st.integers(1, 4)), pool=st.integers(1, 5))
def test_invariants_hold_for_every_strategy(strategy, lengths, cap, pool):
    tokens, offsets = _documents(lengths)
    rows = pack_documents(tokens, offsets, L, strategy=strategy, pad_id=PAD, max_segments=cap, pool_size=pool)
    assert_packed_invariants(rows, lengths, L, cap)


@contextlib.contextmanager
def _fill_path(threshold: int) -> Iterator[None]:
    """Forces `fill_rows` onto its slice-per-piece path (0) or its per-token index path (huge)."""
    saved = packing._MIN_MEAN_PIECE_FOR_SLICES
    packing._MIN_MEAN_PIECE_FOR_SLICES = threshold
    try:
        yield
    finally:
        packing._MIN_MEAN_PIECE_FOR_SLICES = saved


FILL_PATHS = (0, 10**9)


def _masked_documents(lengths: list[int], masked: bool) -> tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
    """`_documents`, with a loss mask on every third token id when `masked`."""
    tokens, offsets = _documents(lengths)
    return tokens, offsets, (tokens % 3 == 0).astype(np.int32) if masked else None


def _assert_same_rows(got, want, context: object) -> None:
    for name in ("input_ids", "segment_ids", "positions", "loss_mask"):
        a, b = getattr(got, name), getattr(want, name)
        assert (a is None and b is None) or np.array_equal(a, b), (context, name)


@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=100, deadline=None)
@given(lengths=LENGTHS, seed=st.integers(0, 2**32 - 1), masked=st.booleans())
def test_both_fill_paths_pack_documents_in_the_given_order_in_place(strategy, lengths, seed, masked):
    tokens, offsets, mask = _masked_documents(lengths, masked)
    order = np.random.default_rng(seed).permutation(len(lengths))
    # Reference: the documents first copied into `order`, then packed in storage order.
    moved = [np.arange(offsets[d], offsets[d + 1]) for d in order]
    at = np.concatenate(moved) if moved else np.zeros(0, np.int64)
    reference = pack_documents(tokens[at], np.concatenate([[0], np.cumsum([len(m) for m in moved])]), L,
                               strategy=strategy, pad_id=PAD, loss_mask=None if mask is None else mask[at])
    for threshold in FILL_PATHS:
        with _fill_path(threshold):
            rows = pack_documents(tokens, offsets, L, strategy=strategy, pad_id=PAD, loss_mask=mask, order=order)
        _assert_same_rows(rows, reference, threshold)
        assert_packed_invariants(rows, lengths, L)  # tokens name their original document


@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=100, deadline=None)
@given(lengths=LENGTHS, seed=st.integers(0, 2**32 - 1), masked=st.booleans())
def test_both_fill_paths_write_rows_straight_into_their_slots(strategy, lengths, seed, masked):
    tokens, offsets, mask = _masked_documents(lengths, masked)
    plan = plan_packing(np.diff(offsets), L, strategy)
    reference = fill_rows(plan, tokens, offsets, L, PAD, mask)
    slots = np.random.default_rng(seed).permutation(plan.num_rows)
    for threshold in FILL_PATHS:
        with _fill_path(threshold):
            rows = fill_rows(plan, tokens, offsets, L, PAD, mask, row_slots=slots)
        unshuffled = PackedRows(*(None if a is None else a[slots] for a in
                                  (rows.input_ids, rows.segment_ids, rows.positions, rows.loss_mask)))
        _assert_same_rows(unshuffled, reference, threshold)  # planned row r sits in slot slots[r]


@pytest.mark.parametrize("slots", [[0, 0, 1], [0, 1], [1, 2, 3]])
def test_row_slots_must_be_a_permutation_of_the_rows(slots):
    tokens, offsets = _documents([L, L, L])
    plan = plan_packing(np.diff(offsets), L, "first_fit")
    with pytest.raises(ValueError, match="permutation of the plan's 3 rows"):
        fill_rows(plan, tokens, offsets, L, PAD, row_slots=np.array(slots))


@pytest.mark.parametrize("strategy", ["first_fit", "best_fit", "pool"])
@settings(max_examples=100, deadline=None)
@given(lengths=LENGTHS)
def test_bin_strategies_never_split_a_short_document(strategy, lengths):
    plan = plan_packing(np.array(lengths, dtype=np.int64), L, strategy)
    for d, n in enumerate(lengths):
        pieces = np.flatnonzero(plan.doc == d)
        expected = -(-n // L)
        assert len(pieces) == expected  # documents <= L stay whole; longer: full chunks + remainder
        assert len(set(plan.row[pieces].tolist())) == expected


@settings(max_examples=100, deadline=None)
@given(lengths=LENGTHS)
def test_greedy_wastes_at_most_the_last_row(lengths):
    rows = pack_documents(*_documents(lengths), L, strategy="greedy", pad_id=PAD)
    assert rows.num_rows == -(-sum(lengths) // L)
    assert rows.padding_tokens == rows.num_rows * L - sum(lengths)


def test_literal_layouts():
    tokens, offsets = _documents([3, 17, 5])
    greedy = pack_documents(tokens, offsets, 8, strategy="greedy", pad_id=PAD)
    assert greedy.segment_ids.tolist() == [[1, 1, 1, 2, 2, 2, 2, 2], [1] * 8, [1, 1, 1, 1, 2, 2, 2, 2],
                                           [1, 0, 0, 0, 0, 0, 0, 0]]
    assert greedy.positions.tolist()[2] == [0, 1, 2, 3, 0, 1, 2, 3]
    first = pack_documents(tokens, offsets, 8, strategy="first_fit", pad_id=PAD)
    # items longest first: 8, 8 (doc 1 chunks), 5 (doc 2), 3 (doc 0), 1 (doc 1 remainder)
    assert first.input_ids.tolist() == [
        list(range(1000, 1008)), list(range(1008, 1016)),
        [2000, 2001, 2002, 2003, 2004, 0, 1, 2], [1016, PAD, PAD, PAD, PAD, PAD, PAD, PAD]]
    assert first.segment_ids.tolist()[2] == [1, 1, 1, 1, 1, 2, 2, 2]


def test_best_fit_picks_the_tightest_row_first_fit_the_first():
    # Longest first into rows of 10: 10 -> row 0; 8 -> row 1 (2 free); 5 -> row 2; 4 -> row 2 (1 free);
    # the last item (1 token, document 2) goes to row 1 under first fit, to the tighter row 2 under best fit.
    lengths = np.array([4, 5, 1, 8, 10])
    first = plan_packing(lengths, 10, "first_fit")
    best = plan_packing(lengths, 10, "best_fit")
    assert dict(zip(first.doc.tolist(), first.row.tolist())) == {4: 0, 3: 1, 1: 2, 0: 2, 2: 1}
    assert dict(zip(best.doc.tolist(), best.row.tolist())) == {4: 0, 3: 1, 1: 2, 0: 2, 2: 2}


def test_loss_mask_travels_with_its_tokens():
    tokens, offsets = _documents([5, 9, 2])
    mask = (tokens % 2).astype(np.int32)
    for strategy in STRATEGIES:
        rows = pack_documents(tokens, offsets, 8, strategy=strategy, pad_id=PAD, loss_mask=mask)
        real = rows.segment_ids > 0
        assert np.array_equal(rows.loss_mask[real], rows.input_ids[real] % 2)
        assert np.all(rows.loss_mask[~real] == 0)


@pytest.mark.parametrize("kwargs, message", [
    ({"seq_length": 0}, "`seq_length` must be positive, got 0."),
    ({"strategy": "next_fit"}, "`strategy` must be one of greedy, first_fit, best_fit, pool, got 'next_fit'."),
    ({"max_segments": 0}, "`max_segments` must be positive or None, got 0."),
])
def test_arguments_are_checked(kwargs, message):
    args = {"seq_length": 8, "strategy": "greedy", **kwargs}
    with pytest.raises(ValueError) as info:
        plan_packing(np.array([1, 2]), args.pop("seq_length"), args.pop("strategy"), **args)
    assert str(info.value) == message


def test_no_documents_no_rows():
    for strategy in STRATEGIES:
        rows = pack_documents(np.zeros(0, np.int32), np.zeros(1, np.int64), 8, strategy=strategy)
        assert rows.num_rows == 0 and rows.input_ids.shape == (0, 8)
        assert fill_rows(plan_packing(np.array([0, 0]), 8, strategy), np.zeros(0, np.int32),
                         np.zeros(3, np.int64), 8, 0).num_rows == 0


@settings(max_examples=200, deadline=None)
@given(size=st.integers(1, 40), fill=st.sampled_from([-1, 0]),
       steps=st.lists(st.tuples(st.integers(0, 39), st.integers(-1, 9), st.integers(0, 39), st.integers(1, 10)),
                      max_size=60))
def test_max_tree_answers_as_a_scan_of_its_slots(size, fill, steps):
    """The segment tree behind first-fit and best-fit (its `set` stops walking up at the first unchanged
    maximum): after every update each node holds its children's maximum and `leftmost` equals a plain scan."""
    tree = packing._MaxTree(size, fill)
    slots = [fill] * size
    for slot, value, lo, x in steps:
        slot %= size
        tree.set(slot, value)
        slots[slot] = value
        assert all(tree.tree[i] == max(tree.tree[2 * i], tree.tree[2 * i + 1]) for i in range(1, tree.n))
        expected = next((i for i in range(lo, size) if slots[i] >= x), -1)
        assert tree.leftmost(lo, x) == expected


def _first_fit_by_scan(sizes: list[int], capacity: int, max_segments: Optional[int]) -> list[list[int]]:
    """First-fit as its definition reads: each item into the first open bin with room, else a new bin."""
    bins: list[list[int]] = []
    free: list[int] = []
    for item, size in enumerate(sizes):
        b = next((b for b in range(len(bins)) if free[b] >= size and free[b] > 0
                  and (max_segments is None or len(bins[b]) < max_segments)), len(bins))
        if b == len(bins):
            bins.append([])
            free.append(capacity)
        bins[b].append(item)
        free[b] -= size
    return bins


@settings(max_examples=300, deadline=None)
@given(capacity=st.integers(1, 12), whole=st.integers(0, 6),
       sizes=st.lists(st.integers(1, 12), max_size=40), cap=st.sampled_from([None, 1, 2, 3]))
def test_first_fit_places_items_as_a_scan_of_the_bins_would(capacity, whole, sizes, cap):
    """The segment tree (and the shortcut for a leading run of bin-long items) decide as a scan would."""
    items = [capacity] * whole + sorted((min(s, capacity) for s in sizes), reverse=True)
    assigned = packing._assign_bins(np.array(items, dtype=np.int64), capacity, cap, best=False)
    assert assigned == _first_fit_by_scan(items, capacity, cap)


@settings(max_examples=150, deadline=None)
@given(lengths=st.lists(st.integers(0, 40), max_size=30), strategy=st.sampled_from(STRATEGIES),
       cap=st.sampled_from([None, 1, 2, 3]), seed=st.integers(0, 3))
def test_segments_made_from_piece_lengths_are_the_ones_fill_rows_writes(lengths, strategy, cap, seed):
    """Every strategy's rows hold their pieces back to back in segment order, so each row's piece lengths
    (`row_piece_lengths`, shuffled rows too) are enough to make `segment_ids` and `positions` again."""
    from easydata.io.token_arrays import segments_from_lengths
    from easydata.ops.packing import pieces_fill_rows_in_order, row_piece_lengths

    lengths = np.array(lengths, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    tokens = np.arange(int(offsets[-1]), dtype=np.int32) + 1
    plan = plan_packing(lengths, 16, strategy, max_segments=cap)
    slots = np.random.default_rng(seed).permutation(plan.num_rows)
    full = fill_rows(plan, tokens, offsets, 16, PAD, row_slots=slots)
    bare = fill_rows(plan, tokens, offsets, 16, PAD, row_slots=slots, segments=False)
    assert bare.segment_ids is None and bare.positions is None and np.array_equal(bare.input_ids, full.input_ids)
    assert pieces_fill_rows_in_order(plan)
    pieces, piece_offsets = row_piece_lengths(plan, slots)
    segments, positions = segments_from_lengths(pieces, piece_offsets, np.arange(plan.num_rows + 1) * 16)
    assert np.array_equal(segments, full.segment_ids.ravel()) and np.array_equal(positions, full.positions.ravel())


def test_a_plan_whose_pieces_leave_gaps_is_not_taken_for_back_to_back():
    from easydata.ops.packing import PackPlan, pieces_fill_rows_in_order

    one = np.array([0, 0])
    assert pieces_fill_rows_in_order(PackPlan(num_rows=1, doc=np.array([0, 1]), start=np.zeros(2, np.int64),
                                              length=np.array([3, 4]), row=one, col=np.array([0, 3]),
                                              segment=np.array([1, 2])))
    assert not pieces_fill_rows_in_order(PackPlan(num_rows=1, doc=np.array([0, 1]), start=np.zeros(2, np.int64),
                                                  length=np.array([3, 4]), row=one, col=np.array([0, 5]),
                                                  segment=np.array([1, 2])))


@pytest.mark.parametrize("widths, pieces, segments, positions", [
    ([4, 6], [[4], [3, 2]], [1, 1, 1, 1, 1, 1, 1, 2, 2, 0], [0, 1, 2, 3, 0, 1, 2, 0, 1, 0]),  # rows of two widths
    ([3, 3, 3], [[3], [], [1, 0, 2]], [1, 1, 1, 0, 0, 0, 1, 3, 3], [0, 1, 2, 0, 0, 0, 0, 0, 1]),  # whole, empty, a gap
])
def test_segments_from_lengths_literal_rows(widths, pieces, segments, positions):
    from easydata.io.token_arrays import segments_from_lengths

    lengths = np.array([n for row in pieces for n in row], dtype=np.int64)
    piece_offsets = np.concatenate([[0], np.cumsum([len(row) for row in pieces])]).astype(np.int64)
    made = segments_from_lengths(lengths, piece_offsets, np.concatenate([[0], np.cumsum(widths)]))
    assert [m.tolist() for m in made] == [segments, positions]
