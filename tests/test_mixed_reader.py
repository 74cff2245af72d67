"""`MixedReader` and its schedule: weights at any step, exact row counts per batch, rows from the right
source in each source's own epoch order, disjoint processes, exact resume, refusals, layouts, JAX.

Sources are small synthetic packed outputs whose rows carry their identity: every token of row `r` of
a source with base `b` is `b + r`, so a row tells its source (`id // 1000`) and its row number.
JAX runs on 8 simulated CPU devices (`XLA_FLAGS` is set in conftest before JAX loads).
"""

from __future__ import annotations

import collections
import itertools
import json
import math
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from easydata.reader import MixedReader, TokenReader, WeightSchedule, WeightSchedulePoint
from easydata.reader.layouts import apply_layout
from easydata.reader.token_reader import EpochRows
from easydata.reader.schedule import allocate
from tests.conftest import SYNTHETIC_TOKENIZER, write_synthetic_output

L = 8
TOKENS = pa.list_(pa.int32())
BASES = {"code": 1000, "text": 2000, "rare": 3000, "masked": 4000}
ROWS = {"code": 20, "text": 28, "rare": 12, "masked": 16}  # not multiples of the batch: epochs straddle batches


def _row(token: int, loss_mask: bool) -> dict[str, Any]:
    """A packed row of two segments (5 + 3 tokens), every token `token`."""
    row = {"input_ids": [token] * L, "segment_ids": [1] * 5 + [2] * 3, "positions": [0, 1, 2, 3, 4, 0, 1, 2]}
    if loss_mask:
        row["loss_mask"] = [0, 0, 1, 1, 1, 0, 1, 1]
    return row


def write_source(out: Path, name: str, *, loss_mask: bool = False,
                 tokenizer: Optional[dict[str, Any]] = None) -> Path:
    """A packed output with one dataset `name` of `ROWS[name]` rows over 2 shards, 3 rows per block."""
    columns = ["input_ids", "segment_ids", "positions"] + (["loss_mask"] if loss_mask else [])
    rows = [_row(BASES[name] + r, loss_mask) for r in range(ROWS[name])]
    half = len(rows) // 2
    write_synthetic_output(str(out), {name: [rows[:half], rows[half:]]}, pa.schema([(c, TOKENS) for c in columns]),
                           seq_length=L, tokenizer=tokenizer, row_group_size=3)
    return out


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mixed")
    paths = {name: write_source(root / name, name, loss_mask=name == "masked") for name in BASES}
    other_vocab = {**SYNTHETIC_TOKENIZER, "content_hash": "sha256:11", "vocab_size": 1000}
    paths["other-vocab"] = write_source(root / "other-vocab", "text", tokenizer=other_vocab)
    return paths


def reader(outputs: dict[str, Path], name: str, *, batch_size: int = 8, seed: int = 1, **kwargs: Any) -> TokenReader:
    kwargs = {"process_index": 0, "process_count": 1, "window_blocks": 2, **kwargs}
    return TokenReader(str(outputs[name]), batch_size=batch_size, seed=seed, drop_remainder=False, **kwargs)


SCHEDULE = [WeightSchedulePoint(step=0, weights={"code": 1, "text": 3}),
            WeightSchedulePoint(step=4, weights={"code": 3, "text": 1}),
            WeightSchedulePoint(step=8, weights={"code": 1, "text": 1, "rare": 0.3})]


def mixed(outputs: dict[str, Path], names: tuple[str, ...] = ("code", "text", "rare"), *,
          schedule: Any = SCHEDULE, interpolation: str = "linear", prefetch: int = 2, seed: int = 0,
          **reader_kwargs: Any) -> MixedReader:
    return MixedReader({n: reader(outputs, n, **reader_kwargs) for n in names}, schedule=schedule,
                       interpolation=interpolation, seed=seed, prefetch=prefetch)


def take(it: Any, n: int) -> list[dict[str, np.ndarray]]:
    return list(itertools.islice(it, n))


def source_of(ids: np.ndarray) -> np.ndarray:
    return ids[:, 0] // 1000


# ---- schedule ------------------------------------------------------------------------------------

POINTS = [WeightSchedulePoint(step=110, weights={"a": 3, "b": 1}),  # given out of order on purpose
          WeightSchedulePoint(step=10, weights={"a": 1, "b": 3}),
          WeightSchedulePoint(step=210, weights={"a": 2})]  # "b" absent: weight 0


@pytest.mark.parametrize("interpolation, expected", [
    ("step", {0: 0.25, 10: 0.25, 35: 0.25, 60: 0.25, 109: 0.25, 110: 0.75, 160: 0.75, 210: 1.0, 10**6: 1.0}),
    ("linear", {0: 0.25, 10: 0.25, 35: 0.375, 60: 0.5, 109: 0.745, 110: 0.75, 160: 0.875, 210: 1.0, 10**6: 1.0}),
    ("cosine", {0: 0.25, 10: 0.25, 35: 0.25 + 0.5 * (1 - math.cos(math.pi / 4)) / 2, 60: 0.5, 110: 0.75,
                160: 0.875, 210: 1.0, 10**6: 1.0}),
])
def test_schedule_values(interpolation: str, expected: dict[int, float]) -> None:
    schedule = WeightSchedule(POINTS, ["a", "b"], interpolation)
    for step, a in expected.items():
        weights = schedule.weights_at(step)
        assert weights == {"a": pytest.approx(a, abs=1e-12), "b": pytest.approx(1 - a, abs=1e-12)}, step
    assert WeightSchedule(POINTS, ["a", "b"], "cosine").weights_at(35)["a"] == pytest.approx(0.3232233047, abs=1e-9)


def point(step: int, **weights: float) -> WeightSchedulePoint:
    return WeightSchedulePoint(step=step, weights=weights)


@pytest.mark.parametrize("points, interpolation, message", [
    ([], "step", "at least one WeightSchedulePoint"),
    ([point(0, cod=1.0)], "step", "'cod', which is not a source; the sources are ['code', 'text']"),
    ([point(0, code=-1.0, text=2.0)], "step", "weight of 'code' must be finite and >= 0, got -1.0"),
    ([point(0, code=float("nan"))], "step", "weight of 'code' must be finite"),
    ([point(0, code=0, text=0)], "step", "schedule step 0: the weights are all 0"),
    ([point(5, code=1), point(5, text=1)], "step", "step 5 more than once"),
    ([point(-1, code=1)], "step", "`step` must be an int >= 0, got -1"),
    ([point(0, code=1)], "cubic", "`interpolation` must be one of step, linear, cosine, got 'cubic'"),
])
def test_schedule_validation(points: list, interpolation: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        WeightSchedule(points, ["code", "text"], interpolation)
    assert message in str(info.value)


# ---- allocation ----------------------------------------------------------------------------------

def run_allocation(vectors: Callable[[int], tuple[float, ...]], n: int, global_batch: int,
                   steps: int) -> Iterator[tuple[list[int], list[float], list[int]]]:
    """Yields `(counts, expected, consumed)` after each step."""
    expected, consumed = [0.0] * n, [0] * n
    for step in range(steps):
        counts, expected = allocate(vectors(step), expected, consumed, global_batch)
        consumed = [c + k for c, k in zip(consumed, counts)]
        yield counts, expected, consumed


def test_allocation_golden_counts() -> None:
    counts = [c for c, _, _ in run_allocation(lambda s: (0.5, 0.3, 0.2), 3, 4, 5)]
    assert counts == [[2, 1, 1], [2, 1, 1], [2, 2, 0], [2, 1, 1], [2, 1, 1]]


def test_tiny_weight_gets_its_share_and_zero_weight_nothing() -> None:
    history = list(run_allocation(lambda s: (0.98, 0.02, 0.0), 3, 8, 500))
    assert all(sum(c) == 8 for c, _, _ in history)
    assert history[-1][2] == [3920, 80, 0]  # exactly 2% of 4000 rows; the weight-0 source none
    assert all(c[1] <= 1 and c[2] == 0 for c, _, _ in history)
    assert all(abs(e - k) < 1 for _, expected, consumed in history for e, k in zip(expected, consumed))


def test_a_heavy_source_owed_as_much_as_a_light_one_gets_the_row_first() -> None:
    """Fixed weights 1 : 1 : 1/16 x 3 with one row per batch: at step 55 three sources are owed 0.6 of a row
    each; the row went to a light one (largest debt, ties by float noise), and the next step left one heavy
    source 1.06 rows behind. Earliest deadline first keeps every source within one row (hypothesis found it)."""
    history = list(run_allocation(lambda s: normalized([1, 1, 0.0625, 0.0625, 0.0625]), 5, 1, 400))
    assert max(e - k for _, expected, consumed in history for e, k in zip(expected, consumed)) <= 1 + 1e-9
    assert history[-1][2][2] >= 11  # the light sources still get their share: 400 / 35 rows each


def normalized(weights: list[float]) -> tuple[float, ...]:
    return tuple(w / sum(weights) for w in weights)


weights_strategy = st.lists(st.floats(0, 1), min_size=1, max_size=5).filter(lambda w: sum(w) > 0)


@settings(max_examples=150, deadline=None)
@given(points=st.lists(weights_strategy, min_size=1, max_size=4), data=st.data(),
       global_batch=st.integers(1, 64), interpolation=st.sampled_from(["step", "linear", "cosine"]))
def test_allocation_tracks_the_cumulative_target(points, data, global_batch, interpolation) -> None:
    n = len(points[0])
    points = [(p + [0.0] * n)[:n] for p in points]
    points = [p if sum(p) > 0 else [1.0] * n for p in points]
    names = [f"s{i}" for i in range(n)]
    steps = data.draw(st.lists(st.integers(0, 60), min_size=len(points), max_size=len(points), unique=True))
    schedule = WeightSchedule([point(s, **dict(zip(names, p))) for s, p in zip(steps, points)], names, interpolation)
    fixed = len(points) == 1
    for counts, expected, consumed in run_allocation(schedule.vector_at, n, global_batch, 80):
        assert sum(counts) == global_batch and min(counts) >= 0
        for e, k in zip(expected, consumed):
            # (float sums of G * w: a tie owed exactly one row can read 1.000000000000005)
            assert k - e < 1 + 1e-9  # never a whole row ahead
            assert e - k <= (1 if fixed or n == 2 else 2) + 1e-9  # behind: <= 1 row with fixed weights or 2 sources


# ---- rows ----------------------------------------------------------------------------------------

def epoch_stream(outputs: dict[str, Path], name: str, epochs: int, seed: int = 1) -> list[int]:
    """Row numbers of a source in its own epoch order (its rows at positions 0, 1, ...), epoch after epoch."""
    reader = TokenReader(str(outputs[name]), batch_size=ROWS[name], seed=seed, num_epochs=epochs, process_index=0,
                         process_count=1, window_blocks=2)
    rows = EpochRows(reader)
    return [int(i) - BASES[name] for epoch in range(epochs)
            for i in rows.read(epoch, np.arange(ROWS[name]))["input_ids"][:, 0]]


def test_rows_follow_each_sources_epoch_order_in_the_scheduled_counts(outputs) -> None:
    mix = mixed(outputs)
    assert mix.weights_at(0) == {"code": 0.25, "rare": 0.0, "text": 0.75}
    assert mix.names == ("code", "rare", "text")  # sorted: the order of ties and of the concatenation
    streams = {name: epoch_stream(outputs, name, epochs=12) for name in ("code", "text", "rare")}
    expected_counts = run_allocation(mix.schedule.vector_at, 3, 8, 40)
    consumed = dict.fromkeys(mix.names, 0)
    seen = {name: collections.Counter() for name in mix.names}
    for batch, (counts, _, _) in zip(iter(mix), expected_counts):  # lazily: last_counts is the current batch's
        assert mix.last_counts == dict(zip(mix.names, counts))
        ids = batch["input_ids"]
        assert ids.shape == (8, L) and np.all(ids == ids[:, :1])
        for name in mix.names:
            rows = ids[source_of(ids) == BASES[name] // 1000, 0] - BASES[name]
            n = mix.last_counts[name]
            assert len(rows) == n
            assert sorted(rows.tolist()) == sorted(streams[name][consumed[name]:consumed[name] + n])
            consumed[name] += n
            seen[name].update(rows.tolist())
    assert all(len(streams[n]) >= consumed[n] for n in mix.names)
    assert consumed["rare"] > ROWS["rare"] and consumed["code"] > 2 * ROWS["code"]  # the test crossed epochs
    for name in mix.names:  # q whole epochs and r rows into the next: every row q or q+1 times, r rows q+1 times
        q, r = divmod(consumed[name], ROWS[name])
        times = collections.Counter(seen[name][row] for row in range(ROWS[name]))
        assert sum(seen[name].values()) == consumed[name] and set(seen[name]) <= set(range(ROWS[name]))
        assert times == collections.Counter({q + 1: r, q: ROWS[name] - r}) - collections.Counter()


def test_sources_are_interleaved_across_the_batch(outputs) -> None:
    batches = take(iter(mixed(outputs, schedule=[point(0, code=1, text=1)])), 20)
    first_half = np.concatenate([source_of(b["input_ids"])[:4] for b in batches])
    assert 0.3 < np.mean(first_half == 1) < 0.7  # not all of one source in the first slots


def test_two_processes_read_disjoint_halves_of_the_global_batch(outputs) -> None:
    whole = take(iter(mixed(outputs)), 12)
    halves = [take(iter(mixed(outputs, process_index=p, process_count=2)), 12) for p in range(2)]
    for step, batch in enumerate(whole):
        for key in batch:
            assert halves[0][step][key].shape == (4, L)
            assert np.array_equal(np.concatenate([halves[0][step][key], halves[1][step][key]]), batch[key])


def test_finite_source_ends_the_mix(outputs) -> None:
    mix = mixed(outputs, ("code", "text"), schedule=[point(0, code=1, text=1)], num_epochs=1)
    batches = list(mix)
    # Half of each batch of 8 is code: its 20 rows (one epoch) last 5 batches; text's 28 would last 7.
    assert len(batches) == 5 and mix.state_dict()["consumed"] == {"code": 20, "text": 20}


def test_missing_loss_mask_is_filled_with_ones(outputs) -> None:
    mix = mixed(outputs, ("code", "masked"), schedule=[point(0, code=1, masked=1)])
    batch = next(iter(mix))
    assert list(batch) == ["input_ids", "segment_ids", "positions", "loss_mask"]
    from_code = source_of(batch["input_ids"]) == 1
    assert 0 < from_code.sum() < 8
    assert np.all(batch["loss_mask"][from_code] == 1)
    assert np.all(batch["loss_mask"][~from_code] == [0, 0, 1, 1, 1, 0, 1, 1])


# ---- resume --------------------------------------------------------------------------------------

def assert_resumes_exactly(make: Callable[[], Any], steps: int) -> None:
    """Restores at every step (JSON round trip of `state_dict`) and checks the rest equals an uninterrupted run."""
    full = take(iter(make()), steps)
    assert len(full) == steps, "the uninterrupted run is too short to check anything"
    for stop in range(steps):
        first = make()
        it = iter(first)
        take(it, stop)
        state = json.loads(json.dumps(first.state_dict()))
        it.close()
        resumed = make()
        resumed.load_state_dict(state)
        rest = take(iter(resumed), steps - stop)
        assert len(rest) == steps - stop
        for a, b in zip(rest, full[stop:]):
            assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a), f"resume at {stop}"


@pytest.mark.parametrize("prefetch", [0, 3])
def test_resume_equals_uninterrupted_across_schedule_changes(outputs, prefetch) -> None:
    readers = {n: reader(outputs, n) for n in ("code", "text", "rare")}  # sources are not mutated: share them
    assert_resumes_exactly(lambda: MixedReader(readers, SCHEDULE, "linear", prefetch=prefetch), steps=12)


def test_resume_with_another_process_count(outputs) -> None:
    whole = mixed(outputs)
    take(iter(whole), 5)
    state = json.loads(json.dumps(whole.state_dict()))
    expected = take(iter(whole), 3)
    halves = []
    for p in range(2):
        half = mixed(outputs, process_index=p, process_count=2)
        half.load_state_dict(state)
        halves.append(take(iter(half), 3))
    for step, batch in enumerate(expected):
        assert np.array_equal(np.concatenate([halves[0][step]["input_ids"], halves[1][step]["input_ids"]]),
                              batch["input_ids"])


@pytest.mark.parametrize("other, message", [
    (dict(schedule=[point(0, code=1, text=1)]), "mixed reader state is for schedule="),
    (dict(interpolation="cosine"), "mixed reader state is for interpolation='linear', this reader has 'cosine'."),
    (dict(batch_size=16), "mixed reader state is for global_batch_size=8, this reader has 16."),
    (dict(seed=5), "mixed reader state is for seed=0, this reader has 5."),
    (dict(names=("code", "text")), "mixed reader state mixes sources ['code', 'rare', 'text'], this reader mixes"),
])
def test_state_of_another_mix_is_refused(outputs, other, message) -> None:
    state = mixed(outputs, schedule=SCHEDULE[:2]).state_dict()
    other = {"schedule": SCHEDULE[:2], **other}
    with pytest.raises(ValueError) as info:
        mixed(outputs, **other).load_state_dict(state)
    assert message in str(info.value)


def test_state_of_other_source_order_is_refused(outputs) -> None:
    state = mixed(outputs).state_dict()
    other = MixedReader({"code": reader(outputs, "code", seed=2), "text": reader(outputs, "text"),
                         "rare": reader(outputs, "rare")}, SCHEDULE, "linear")
    with pytest.raises(ValueError, match="state is for source 'code' with seed=1, this reader's 'code' has 2"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="version"):
        other.load_state_dict({"version": 99})


# ---- refusals ------------------------------------------------------------------------------------

def test_different_tokenizers_are_refused(outputs) -> None:
    with pytest.raises(ValueError) as info:
        MixedReader({"code": reader(outputs, "code"), "text": reader(outputs, "other-vocab")}, SCHEDULE[:1])
    assert "different tokenizers" in str(info.value) and "vocab_size=1000" in str(info.value)


@pytest.mark.parametrize("kwargs, message", [
    (dict(batch_size=16), "sources differ in `batch_size`: {'code': 8, 'text': 16}"),
    (dict(layout="hf"), "sources differ in `layout`: {'code': 'raw', 'text': 'hf'}"),
    (dict(process_index=1, process_count=2), "sources differ in `process_index`"),
])
def test_incompatible_readers_are_refused(outputs, kwargs, message) -> None:
    with pytest.raises(ValueError) as info:
        MixedReader({"code": reader(outputs, "code"), "text": reader(outputs, "text", **kwargs)}, SCHEDULE[:1])
    assert message in str(info.value)


def test_unknown_source_in_schedule_is_refused(outputs) -> None:
    with pytest.raises(ValueError, match=r"names 'python', which is not a source; the sources are \['code', 'text'\]"):
        MixedReader({"code": reader(outputs, "code"), "text": reader(outputs, "text")},
                    [point(0, python=1.0)])


@pytest.mark.parametrize("prefetch", [-1, 1.5, True])
def test_a_read_ahead_that_is_not_a_count_is_refused(outputs, prefetch) -> None:
    """`prefetch=-1` was taken (as no read-ahead), as it was by `TokenReader`."""
    with pytest.raises(ValueError, match="`prefetch` must be a non-negative integer"):
        MixedReader({"code": reader(outputs, "code")}, [point(0, code=1.0)], prefetch=prefetch)


# ---- layouts and JAX -----------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["maxtext", "hf"])
def test_layouts_apply_to_the_mixed_batch(outputs, layout) -> None:
    names = ("code", "masked")
    schedule = [point(0, code=1, masked=1)]
    raw = take(iter(mixed(outputs, names, schedule=schedule)), 3)
    shaped = take(iter(mixed(outputs, names, schedule=schedule, layout=layout)), 3)
    for r, s in zip(raw, shaped):
        expected = apply_layout(layout, r, 0)
        assert s.keys() == expected.keys() and all(np.array_equal(s[k], expected[k]) for k in s)


def test_as_jax_and_as_pmap(outputs) -> None:
    jax = pytest.importorskip("jax")
    from jax.sharding import Mesh, PartitionSpec

    assert jax.device_count() == 8
    mesh = Mesh(np.array(jax.devices()), ("data",))
    batch = next(mixed(outputs, batch_size=16).as_jax(mesh, PartitionSpec("data")))
    expected = next(iter(mixed(outputs, batch_size=16)))
    for key, array in batch.items():
        assert array.shape == (16, L) and array.sharding.spec == PartitionSpec("data")
        assert len(array.addressable_shards) == 8
        assert np.array_equal(np.asarray(array), expected[key])
    pmapped = next(mixed(outputs, batch_size=16).as_pmap())
    assert pmapped["input_ids"].shape == (8, 2, L)
    assert np.array_equal(pmapped["input_ids"].reshape(16, L), expected["input_ids"])
