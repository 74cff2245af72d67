"""`TokenReader`: every row once per epoch, disjoint processes, exact resume, layouts, JAX layouts.

JAX runs on 8 simulated CPU devices (`XLA_FLAGS` is set in conftest before JAX loads).
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from beam_pipelines.batch import run_batch
from easydata.config import PipelineConfig
from easydata.reader import GrainSource, TokenReader
from tests.conftest import make_texts, write_jsonl

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
