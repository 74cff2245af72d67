"""`TokenReader`: every row once per epoch, disjoint processes, exact resume, layouts, JAX layouts;
batches equal to a straightforward reference on every gather path (packed / unpacked, windows of one
or several blocks and shards), fixed-size list columns, pinned shuffle keys.

JAX runs on 8 simulated CPU devices (`XLA_FLAGS` is set in conftest before JAX loads).
"""

from __future__ import annotations

import collections
import json
import re
import shutil
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_pipelines.batch import run_batch
from easydata.config import PipelineConfig
from easydata.io.formats import ShardUnreadable
from easydata.reader import GrainSource, TokenReader
from easydata.reader.blocks import BlockIndex
from easydata.reader.order import EpochOrder
from easydata.reader.permutation import derive_key, permute
from tests.conftest import SYNTHETIC_TOKENIZER, make_texts, write_jsonl, write_synthetic_output

L = 32


@pytest.fixture(scope="module", params=["parquet", "arrow"])
def packed_output(request, tmp_path_factory, tokenizer_dir) -> Path:
    root = tmp_path_factory.mktemp(f"reader-{request.param}")
    write_jsonl(root / "a.jsonl", ({"text": t} for t in make_texts(400, seed=4, max_words=30)))
    config = PipelineConfig.from_dict({
        "default_tokenizer": str(tokenizer_dir),
        "datasets": [{"name": "web", "data_files": str(root / "a.jsonl")}],
        "pack": {"enabled": True, "seq_length": L, "strategy": "greedy"},
        "save": {"output_dir": str(root / "out"), "num_shards": 3, "format": request.param, "row_group_size": 16,
                 "compression": "zstd"},
    })
    run_batch(config, ["--direct_num_workers=1"], show_progress=False)
    return root / "out"


def _all_rows(out: Path) -> collections.Counter:
    manifest = json.loads((out / "manifest.json").read_text())
    fmt = manifest["format"]
    rows = collections.Counter()
    for shard in manifest["datasets"]["web"]["shards"]:
        if fmt == "parquet":
            table = pq.read_table(out / shard["path"])
        else:
            import pyarrow as pa

            table = pa.ipc.open_file(pa.memory_map(str(out / shard["path"]))).read_all()
        rows.update(tuple(r) for r in table.column("input_ids").to_pylist())
    return rows


def _rows(batches) -> collections.Counter:
    return collections.Counter(tuple(r) for b in batches for r in b["input_ids"].tolist())


def test_one_epoch_reads_every_row_once(packed_output):
    reader = TokenReader(str(packed_output), batch_size=8, shuffle=True, seed=3, num_epochs=1,
                         drop_remainder=False, process_index=0, process_count=1)
    batches = list(reader)
    assert all(b["input_ids"].shape[1] == L for b in batches)
    assert _rows(batches) == _all_rows(packed_output)


def test_processes_read_disjoint_rows_covering_the_epoch(packed_output):
    readers = [TokenReader(str(packed_output), batch_size=8, seed=5, num_epochs=1, drop_remainder=False,
                           process_index=p, process_count=2) for p in range(2)]
    batches = [list(r) for r in readers]
    assert len(batches[0]) == len(batches[1])  # processes stay in step, even on the last partial batch
    assert all(b["input_ids"].shape[0] == 4 for b in batches[0][:-1])
    parts = [_rows(b) for b in batches]
    assert parts[0] + parts[1] == _all_rows(packed_output)  # together: every row once
    whole = list(TokenReader(str(packed_output), batch_size=8, seed=5, num_epochs=1, drop_remainder=False,
                             process_index=0, process_count=1))
    for step, batch in enumerate(whole):  # each global batch holds the same rows whatever the process count
        assert _rows([batch]) == _rows([batches[0][step], batches[1][step]])


def test_epochs_reshuffle_and_are_deterministic(packed_output):
    def order(seed, epoch_count=2):
        reader = TokenReader(str(packed_output), batch_size=8, seed=seed, num_epochs=epoch_count,
                             process_index=0, process_count=1)
        return [tuple(b["input_ids"][:, 0].tolist()) for b in reader]

    first = order(1)
    assert first == order(1)
    steps = len(first) // 2
    assert first[:steps] != first[steps:]  # epoch 2 is a different order
    assert first != order(2)


@pytest.mark.parametrize("prefetch", [0, 3])
def test_resume_equals_uninterrupted(packed_output, prefetch):
    kwargs = dict(batch_size=8, seed=9, num_epochs=2, process_index=0, process_count=1, prefetch=prefetch)
    full = [b["input_ids"] for b in TokenReader(str(packed_output), **kwargs)]
    for stop in (0, 1, len(full) // 2 + 1, len(full) - 1):
        reader = TokenReader(str(packed_output), **kwargs)
        it = iter(reader)
        for _ in range(stop):
            next(it)
        state = json.loads(json.dumps(reader.state_dict()))
        it.close()
        resumed = TokenReader(str(packed_output), **kwargs)
        resumed.load_state_dict(state)
        rest = [b["input_ids"] for b in resumed]
        assert len(rest) == len(full) - stop
        assert all(np.array_equal(a, b) for a, b in zip(rest, full[stop:]))


def _read_ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("easydata-read-ahead")]


@pytest.mark.parametrize("prefetch", [1, 3])
def test_read_ahead_yields_the_same_batches_and_stops_its_thread(packed_output, prefetch):
    # One block per window: the read-ahead crosses many windows and, at each epoch's end, into the next epoch.
    kwargs = dict(batch_size=8, seed=9, num_epochs=3, drop_remainder=False, process_index=0, process_count=1,
                  window_blocks=1)
    expected = list(TokenReader(str(packed_output), prefetch=0, **kwargs))
    got = list(TokenReader(str(packed_output), prefetch=prefetch, **kwargs))
    assert len(got) == len(expected) > 3 * 8
    for a, b in zip(got, expected):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert not _read_ahead_threads()  # an exhausted iterator has joined its thread
    it = iter(TokenReader(str(packed_output), prefetch=prefetch, **kwargs))
    next(it), next(it)
    assert len(_read_ahead_threads()) == 1
    it.close()  # what an abandoned iterator's garbage collection does too
    assert not _read_ahead_threads()


def test_read_ahead_load_error_reaches_the_caller(packed_output, tmp_path):
    damaged = tmp_path / "out"
    shutil.copytree(packed_output, damaged)
    manifest = json.loads((damaged / "manifest.json").read_text())
    reader = TokenReader(str(damaged), batch_size=8, num_epochs=1, process_index=0, process_count=1,
                         window_blocks=1, prefetch=2)  # footers are read here, blocks later
    for shard in manifest["datasets"]["web"]["shards"]:  # every block's data, footers left intact
        path = damaged / shard["path"]
        size = path.stat().st_size
        with open(path, "r+b") as f:
            f.seek(8)
            f.write(b"\xff" * (size // 2))
    with pytest.raises(ShardUnreadable, match="is unreadable"):  # the read-ahead's error, naming the shard
        for _ in reader:
            pass
    assert not _read_ahead_threads()


def test_state_of_another_reader_is_refused(packed_output):
    reader = TokenReader(str(packed_output), batch_size=8, process_index=0, process_count=1)
    other = TokenReader(str(packed_output), batch_size=16, process_index=0, process_count=1)
    with pytest.raises(ValueError) as info:
        other.load_state_dict(reader.state_dict())
    assert str(info.value) == "reader state is for global_batch_size=8, this reader has 16."
    with pytest.raises(ValueError, match="version"):
        reader.load_state_dict({"version": 99})


def test_batch_must_divide_over_processes(packed_output):
    with pytest.raises(ValueError) as info:
        TokenReader(str(packed_output), batch_size=9, process_index=0, process_count=2)
    assert "does not divide over 2 processes" in str(info.value)


@pytest.mark.parametrize("options, message", [
    (dict(num_epochs=-1), "`num_epochs` must be a positive integer or None"),   # read nothing, silently
    (dict(num_epochs=0), "`num_epochs` must be a positive integer or None"),
    (dict(num_epochs=1.5), "`num_epochs` must be a positive integer or None"),  # read two epochs
    (dict(prefetch=-1), "`prefetch` must be a non-negative integer"),
    (dict(batch_size=2.5), "`batch_size` must be a positive integer, got 2.5"),  # "does not divide over 1 processes"
    (dict(batch_size=True), "`batch_size` must be a positive integer, got True"),  # read as 1
    (dict(process_index=1.0, process_count=2), r"`process_index` must be in \[0, 2\)"),
    (dict(seq_length=4096), "holds packed rows of 32 tokens; seq_length=4096 applies to unpacked outputs only"),
    (dict(seq_length=2.5), "`seq_length` must be a positive integer, got 2.5"),  # unpacked rows were cut to 2
])
def test_settings_it_would_misread_are_refused(packed_output, options, message):
    """Each of these was taken: a negative or fractional epoch count, a fractional or boolean batch, and a
    packed output's `seq_length=` (the batches kept the output's own length, not the one asked for)."""
    with pytest.raises(ValueError, match=message):
        TokenReader(str(packed_output), **{"batch_size": 8, "process_index": 0, "process_count": 1, **options})
    assert TokenReader(str(packed_output), batch_size=8, process_index=0, process_count=1, seq_length=L).seq_length == L


def test_maxtext_and_hf_layouts(packed_output):
    raw = next(iter(TokenReader(str(packed_output), batch_size=8, seed=0, process_index=0, process_count=1)))
    mt = next(iter(TokenReader(str(packed_output), batch_size=8, seed=0, process_index=0, process_count=1,
                               layout="maxtext")))
    hf = next(iter(TokenReader(str(packed_output), batch_size=8, seed=0, process_index=0, process_count=1,
                               layout="hf")))
    ids, seg, pos = raw["input_ids"], raw["segment_ids"], raw["positions"]
    assert np.array_equal(mt["inputs"], ids) and np.array_equal(mt["targets"][:, :-1], ids[:, 1:])
    crosses = (seg[:, 1:] != seg[:, :-1]) | (seg[:, 1:] == 0)
    assert np.all(mt["targets_segmentation"][:, :-1][crosses] == 0)
    assert np.all(mt["targets_segmentation"][:, :-1][~crosses] == seg[:, :-1][~crosses])
    assert np.all(mt["targets_segmentation"][:, -1] == 0)
    assert np.array_equal(hf["position_ids"], pos) and np.array_equal(hf["attention_mask"], (seg != 0).astype(np.int32))
    assert np.all(hf["labels"][(seg == 0) | (pos == 0)] == -100)
    assert np.array_equal(hf["labels"][(seg != 0) & (pos != 0)], ids[(seg != 0) & (pos != 0)])


@pytest.mark.parametrize("layout", ["raw", "maxtext", "hf"])
def test_int64_batches_hold_the_int32_values(packed_output, layout):
    """`dtype="int64"` widens every array of every layout (PyTorch's cross_entropy takes int64 targets only)."""
    options = dict(batch_size=8, seed=0, process_index=0, process_count=1, layout=layout, num_epochs=1)
    narrow, wide = TokenReader(str(packed_output), **options), TokenReader(str(packed_output), dtype="int64", **options)
    for a, b in zip(narrow, wide):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key].dtype == np.int32 and b[key].dtype == np.int64
            assert np.array_equal(a[key], b[key])
    with pytest.raises(ValueError, match="`dtype` must be one of int32, int64"):
        TokenReader(str(packed_output), batch_size=8, dtype="float32")


def test_grain_source_random_access(packed_output):
    source = GrainSource(str(packed_output))
    rows = collections.Counter(tuple(source[i]["input_ids"].tolist()) for i in range(len(source)))
    assert rows == _all_rows(packed_output)
    with pytest.raises(IndexError):
        source[len(source)]


def test_as_jax_global_arrays_on_meshes(packed_output):
    jax = pytest.importorskip("jax")
    from jax.sharding import Mesh, PartitionSpec

    assert jax.device_count() == 8
    for shape, spec in [((8,), PartitionSpec("data")), ((4, 2), PartitionSpec("data", "model"))]:
        axes = ("data",) if len(shape) == 1 else ("data", "model")
        mesh = Mesh(np.array(jax.devices()).reshape(shape), axes)
        reader = TokenReader(str(packed_output), batch_size=16, seed=0, process_index=0, process_count=1)
        batch = next(reader.as_jax(mesh, spec))
        arr = batch["input_ids"]
        assert arr.shape == (16, L)
        assert arr.sharding.spec == spec
        assert len(arr.addressable_shards) == 8
        expected = next(iter(TokenReader(str(packed_output), batch_size=16, seed=0, process_index=0,
                                         process_count=1)))["input_ids"]
        assert np.array_equal(np.asarray(arr), expected)


@pytest.mark.parametrize("view", ["as_jax", "as_pmap"])
def test_jax_views_refuse_a_smaller_last_batch_before_the_first(packed_output, view):
    """`as_pmap` with `drop_remainder=False` yielded a whole epoch, then failed on its last, smaller batch with
    numpy's "cannot reshape array of size 32 into shape (8,3,4)"."""
    jax = pytest.importorskip("jax")
    from jax.sharding import Mesh, PartitionSpec

    reader = TokenReader(str(packed_output), batch_size=8 * len(jax.local_devices()), process_index=0,
                         process_count=1, num_epochs=1, drop_remainder=False)
    batches = reader.as_jax(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data")) if view == "as_jax" \
        else reader.as_pmap()
    with pytest.raises(ValueError, match=f"{view} needs drop_remainder=True"):
        next(batches)


def test_as_jax_refuses_a_batch_the_mesh_axes_do_not_divide_before_the_first(packed_output):
    """A batch of 6 rows over a 4-way data axis failed on the first batch with JAX's `IndivisibleError`."""
    jax = pytest.importorskip("jax")
    from jax.sharding import Mesh, PartitionSpec

    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
    for batch_size, spec, parts, axes in ((6, PartitionSpec("data"), 4, "('data',)"),
                                          (4, PartitionSpec(("data", "model")), 8, "('data', 'model')")):
        reader = TokenReader(str(packed_output), batch_size=batch_size, process_index=0, process_count=1)
        with pytest.raises(ValueError, match=f"^batch_size {batch_size} does not divide over the {parts} devices of"
                                             f" mesh axes {re.escape(axes)} that the partition spec lays it on; use"
                                             f" a multiple of {parts}"):
            next(reader.as_jax(mesh, spec))
    reader = TokenReader(str(packed_output), batch_size=8, process_index=0, process_count=1)
    assert next(reader.as_jax(mesh, PartitionSpec(None, "data")))["input_ids"].shape == (8, L)  # L divides


@pytest.mark.slow
def test_as_pmap_shapes_and_a_jit_training_step(packed_output):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from jax.sharding import Mesh, PartitionSpec

    reader = TokenReader(str(packed_output), batch_size=16, seed=0, process_index=0, process_count=1)
    batch = next(reader.as_pmap())
    assert batch["input_ids"].shape == (8, 2, L)
    with pytest.raises(ValueError, match="does not divide over 8 local devices"):
        next(TokenReader(str(packed_output), batch_size=12, process_index=0, process_count=1).as_pmap())

    vocab = 512
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    params = {"emb": 0.1 * jax.random.normal(k1, (vocab, 8)), "out": 0.1 * jax.random.normal(k2, (8, vocab))}
    initial = params

    @jax.jit
    def step(params, batch):
        def loss(p):
            h = p["emb"][batch["inputs"]]
            logits = h @ p["out"]
            logp = jax.nn.log_softmax(logits)
            nll = -jnp.take_along_axis(logp, batch["targets"][..., None], axis=-1)[..., 0]
            weights = (batch["targets_segmentation"] != 0).astype(jnp.float32)
            return (nll * weights).sum() / jnp.maximum(weights.sum(), 1.0)
        value, grads = jax.value_and_grad(loss)(params)
        return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads), value

    mesh = Mesh(np.array(jax.devices()), ("data",))
    reader = TokenReader(str(packed_output), batch_size=16, seed=0, process_index=0, process_count=1,
                         layout="maxtext", num_epochs=1)
    losses = []
    for batch in reader.as_jax(mesh, PartitionSpec("data")):
        params, value = step(params, batch)
        losses.append(float(value))
        if len(losses) == 3:
            break
    assert len(losses) == 3 and all(np.isfinite(losses)) and losses[0] == pytest.approx(np.log(vocab), rel=0.05)
    assert not np.allclose(np.asarray(params["out"]), np.asarray(initial["out"]))  # the step trained


# ---- gathering rows: every code path against a straightforward reference -------------------------

SYNTH_L = 8
SYNTH_PAD = SYNTHETIC_TOKENIZER["pad_token_id"]


def _synthetic_rows(packed: bool, count: int, seed: int) -> list[dict[str, list[int]]]:
    """Rows whose tokens identify them (row `r` starts with `100 * (r + 1)`); unpacked rows are 0 to 12
    tokens long, so some are padded and some cut to `SYNTH_L`."""
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(count):
        size = SYNTH_L if packed else int(rng.integers(0, 13))
        ids = [100 * (r + 1) + i for i in range(size)]
        row = {"input_ids": ids, "loss_mask": [int(b) for b in rng.integers(0, 2, size)]}
        if packed:
            cut = int(rng.integers(1, SYNTH_L))
            row["segment_ids"] = [1] * cut + [2] * (SYNTH_L - cut)
            row["positions"] = list(range(cut)) + list(range(SYNTH_L - cut))
        rows.append(row)
    return rows


@pytest.fixture(scope="module", params=[(kind, fmt) for kind in ("packed", "unpacked") for fmt in ("parquet", "arrow")],
                ids=lambda p: "-".join(p))
def synthetic_output(request, tmp_path_factory) -> tuple[Path, bool]:
    """Three shards of 7, 2 and 12 rows in blocks of 3 rows (some blocks shorter): windows of several
    blocks from several shards, and blocks of different sizes."""
    kind, fmt = request.param
    packed = kind == "packed"
    rows = _synthetic_rows(packed, 21, seed=1)
    columns = ["input_ids", "segment_ids", "positions", "loss_mask"] if packed else ["input_ids", "loss_mask"]
    out = tmp_path_factory.mktemp(f"synthetic-{kind}-{fmt}")
    write_synthetic_output(str(out), {"web": [rows[:7], rows[7:9], rows[9:]]},
                           pa.schema([(c, pa.list_(pa.int32())) for c in columns]), fmt=fmt,
                           compression="zstd" if fmt == "parquet" else "none",
                           seq_length=SYNTH_L if packed else None, row_group_size=3)
    return out, packed


def _reference_batches(out: Path, packed: bool, *, batch_size: int, seed: int, shuffle: bool, window_blocks: int,
                       num_epochs: int) -> list[dict[str, np.ndarray]]:
    """The raw batches of one process, computed the obvious way: every row as Python lists, each
    epoch position mapped by the definition in `easydata.reader.order` (block permutation, windows,
    a row permutation per window), each batch's rows in storage order (window, then row in window),
    unpacked rows padded with the pad id (0 for other columns) or cut."""
    index = BlockIndex.from_output(str(out))
    columns = ["input_ids", "segment_ids", "positions", "loss_mask"] if packed else ["input_ids", "loss_mask"]
    blocks = [index.read(b, columns).to_pylist() for b in range(index.num_blocks)]
    batches = []
    for epoch in range(num_epochs):
        order = EpochOrder(index.block_rows, seed=seed, epoch=epoch, shuffle=shuffle, window_blocks=window_blocks)
        rows = []
        for position in range(index.num_rows):
            w = int(np.searchsorted(order.window_start, position, side="right") - 1)
            local, size = position - int(order.window_start[w]), int(order.window_start[w + 1] - order.window_start[w])
            if shuffle:
                local = int(permute(np.array([local]), size, derive_key(seed, epoch, 2, w))[0])
            window_rows = [row for b in order.window_blocks_of(w) for row in blocks[int(b)]]
            rows.append(((w, local), window_rows[local]))
        for start in range(0, len(rows), batch_size):
            batch: dict[str, list] = collections.defaultdict(list)
            for _, row in sorted(rows[start:start + batch_size], key=lambda keyed: keyed[0]):
                if packed:
                    for c in columns:
                        batch[c].append(row[c])
                    continue
                n = min(len(row["input_ids"]), SYNTH_L)
                batch["input_ids"].append(row["input_ids"][:n] + [SYNTH_PAD] * (SYNTH_L - n))
                batch["loss_mask"].append(row["loss_mask"][:n] + [0] * (SYNTH_L - n))
                batch["segment_ids"].append([1] * n + [0] * (SYNTH_L - n))
                batch["positions"].append(list(range(n)) + [0] * (SYNTH_L - n))
            batches.append({k: np.array(v, dtype=np.int32) for k, v in batch.items()})
    return batches


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("window_blocks", [1, 2, 3, 100])
def test_batches_equal_a_straightforward_reference(synthetic_output, shuffle, window_blocks):
    out, packed = synthetic_output
    kwargs = dict(batch_size=5, seed=4, shuffle=shuffle, window_blocks=window_blocks, num_epochs=2)
    reader = TokenReader(str(out), drop_remainder=False, process_index=0, process_count=1, prefetch=0,
                         seq_length=None if packed else SYNTH_L, **kwargs)
    got = list(reader)
    expected = _reference_batches(out, packed, **kwargs)
    assert len(got) == len(expected) == 2 * 5  # 21 rows in batches of 5, twice
    for batch, want in zip(got, expected):
        assert sorted(batch) == sorted(want)
        for key, array in batch.items():
            assert array.dtype == np.int32 and array.flags.c_contiguous
            np.testing.assert_array_equal(array, want[key], err_msg=key)


def test_batches_are_copies_the_caller_may_change(synthetic_output):
    out, packed = synthetic_output
    kwargs = dict(batch_size=4, seed=2, num_epochs=1, process_index=0, process_count=1,
                  seq_length=None if packed else SYNTH_L)
    first = list(TokenReader(str(out), **kwargs))
    kept = [{k: v.copy() for k, v in b.items()} for b in first]
    for batch in first:
        for array in batch.values():
            assert array.flags.writeable
            array[...] = -1
    again = list(TokenReader(str(out), **kwargs))
    assert all(np.array_equal(a[k], b[k]) for a, b in zip(again, kept) for k in a)


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_fixed_size_list_columns_read_like_lists(tmp_path, fmt):
    rows = _synthetic_rows(True, 10, seed=3)
    columns = ["input_ids", "segment_ids", "positions", "loss_mask"]
    for name, token_type in (("lists", pa.list_(pa.int32())), ("fixed", pa.list_(pa.int32(), SYNTH_L))):
        write_synthetic_output(str(tmp_path / name), {"web": [rows[:6], rows[6:]]},
                               pa.schema([(c, token_type) for c in columns]), fmt=fmt, seq_length=SYNTH_L,
                               row_group_size=4)
    kwargs = dict(batch_size=4, seed=1, num_epochs=1, drop_remainder=False, process_index=0, process_count=1)
    lists, fixed = (list(TokenReader(str(tmp_path / name), **kwargs)) for name in ("lists", "fixed"))
    assert len(lists) == len(fixed) == 3
    assert all(np.array_equal(a[k], b[k]) for a, b in zip(lists, fixed) for k in columns)


def test_packed_rows_of_the_wrong_length_are_refused(tmp_path):
    rows = _synthetic_rows(True, 4, seed=5)
    rows[2] = {k: v[:-1] for k, v in rows[2].items()}  # 7 tokens in an output packed to 8
    write_synthetic_output(str(tmp_path), {"web": [rows]}, pa.schema([(c, pa.list_(pa.int32())) for c in rows[0]]),
                           seq_length=SYNTH_L, row_group_size=4)
    reader = TokenReader(str(tmp_path), batch_size=2, process_index=0, process_count=1, prefetch=0)
    with pytest.raises(ValueError) as info:
        next(iter(reader))
    assert "part-00000-of-00001.parquet block 0: column 'input_ids' holds rows of [7, 8] tokens" in str(info.value)


def test_shuffle_keys_and_permutations_are_pinned():
    """Golden values: the epoch order of every saved reader state depends on them."""
    assert derive_key(0) == 16294208416658607535
    assert derive_key(1, 2, 3) == 16923298687364769832
    assert derive_key(-1, 2**70) == 5596615464619936844
    assert permute(np.arange(10), 10, derive_key(7, 0, 2, 0)).tolist() == [1, 0, 8, 9, 5, 2, 6, 7, 3, 4]
    assert permute(np.arange(13), 13, 12345).tolist() == [8, 9, 2, 3, 11, 7, 0, 5, 6, 10, 1, 12, 4]
    order = EpochOrder(np.array([3, 3, 1, 2, 3]), seed=7, epoch=1, shuffle=True, window_blocks=2)
    window, rows = order.locate(np.arange(12))
    for w in range(3):  # the cached row permutation of a window is the per-position definition
        size = int(order.window_start[w + 1] - order.window_start[w])
        local = np.arange(12)[window == w] - order.window_start[w]
        assert rows[window == w].tolist() == permute(local, size, derive_key(7, 1, 2, w)).tolist()

