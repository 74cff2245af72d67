"""Reading `bin` outputs: document-aligned rows through `TokenReader`, nanoGPT-style random windows
through `WindowReader` (exact resume, process split, layouts), checked against plain `np.memmap`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from beam_pipelines.batch import run_batch
from easydata.config import PipelineConfig
from easydata.reader import TokenReader
from easydata.reader.bin_reader import WindowReader
from tests.conftest import make_texts, write_jsonl

L = 16


@pytest.fixture(scope="module")
def bin_output(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("bin-output")
    write_jsonl(root / "in.jsonl", ({"text": t} for t in make_texts(90, seed=21)))
    config = PipelineConfig.from_dict({
        "default_tokenizer": str(tokenizer_dir), "datasets": [{"name": "data", "data_files": str(root / "in.jsonl")}],
        "save": {"output_dir": str(root / "out"), "format": "bin", "num_shards": 3, "row_group_size": 8}})
    manifest = run_batch(config, ["--direct_num_workers=1"], show_progress=False).manifest
    return root / "out", manifest


def _streams(out: Path, manifest: dict) -> list[np.ndarray]:
    return [np.memmap(out / s["path"], dtype=manifest["schema"]["token_dtype"], mode="r")
            for s in manifest["datasets"]["data"]["shards"]]


def _documents(out: Path, manifest: dict) -> list[list[int]]:
    docs = []
    for stream, shard in zip(_streams(out, manifest), manifest["datasets"]["data"]["shards"]):
        index = np.fromfile(out / shard["index_path"], dtype=np.int64)
        docs += [stream[a:b].tolist() for a, b in zip(index[:-1], index[1:])]
    return docs


@pytest.mark.slow
@pytest.mark.parametrize("process_count", [1, 2])
def test_token_reader_reads_every_document_once_per_epoch(bin_output, process_count):
    out, manifest = bin_output
    read = []
    for p in range(process_count):
        reader = TokenReader(str(out), batch_size=6, seq_length=200, num_epochs=1, drop_remainder=False,
                             process_index=p, process_count=process_count, seed=3)
        for batch in reader:
            lengths = batch["segment_ids"].sum(axis=1)
            read += [row[:n].tolist() for row, n in zip(batch["input_ids"], lengths)]
    assert sorted(read) == sorted(_documents(out, manifest))
    assert len(read) == 90


def test_windows_are_slices_of_the_stream_and_targets_are_shifted(bin_output):
    out, manifest = bin_output
    streams = _streams(out, manifest)
    reader = WindowReader(str(out), batch_size=8, seq_length=L, seed=5, num_steps=4)
    for step, batch in enumerate(reader):
        shard, start = reader.starts(step)
        for row, (s, first) in enumerate(zip(shard, start)):
            window = streams[s][first:first + L + 1]
            assert len(window) == L + 1
            assert batch["input_ids"][row].tolist() == window[:-1].tolist()
            assert batch["targets"][row].tolist() == window[1:].tolist()
    assert reader.state_dict()["step"] == 4
    shards = np.concatenate([reader.starts(s)[0] for s in range(200)])
    assert set(shards.tolist()) == {0, 1, 2}  # every shard is sampled


def test_window_reader_int64_batches(bin_output):
    out, _ = bin_output
    narrow = WindowReader(str(out), batch_size=4, seq_length=L, seed=2, layout="hf").get_batch(3)
    wide = WindowReader(str(out), batch_size=4, seq_length=L, seed=2, layout="hf", dtype="int64").get_batch(3)
    assert {k: v.dtype for k, v in wide.items()} == {k: np.dtype(np.int64) for k in narrow}
    assert all(np.array_equal(narrow[k], wide[k]) for k in narrow)


def test_window_reader_resumes_exactly_and_splits_over_processes(bin_output):
    out, _ = bin_output
    whole = WindowReader(str(out), batch_size=4, seq_length=L, seed=1, num_steps=6, process_count=1, process_index=0)
    expected = [b["input_ids"] for b in whole]
    for stop in range(6):  # restore at every step
        first = WindowReader(str(out), batch_size=4, seq_length=L, seed=1, num_steps=6, process_count=1,
                             process_index=0)
        got = [b["input_ids"] for _, b in zip(range(stop), first)]
        resumed = WindowReader(str(out), batch_size=4, seq_length=L, seed=1, num_steps=6, process_count=1,
                               process_index=0)
        resumed.load_state_dict(first.state_dict())
        got += [b["input_ids"] for b in resumed]
        assert all(np.array_equal(a, b) for a, b in zip(got, expected)) and len(got) == 6
    halves = [list(WindowReader(str(out), batch_size=4, seq_length=L, seed=1, num_steps=6, process_index=p,
                                process_count=2)) for p in range(2)]
    for step, batch in enumerate(expected):
        assert np.array_equal(np.concatenate([halves[0][step]["input_ids"], halves[1][step]["input_ids"]]), batch)


def test_window_reader_layouts_and_errors(bin_output):
    out, _ = bin_output
    maxtext = next(iter(WindowReader(str(out), batch_size=2, seq_length=L, layout="maxtext")))
    assert sorted(maxtext) == ["inputs", "inputs_position", "inputs_segmentation", "targets", "targets_position",
                               "targets_segmentation"]
    hf = next(iter(WindowReader(str(out), batch_size=2, seq_length=L, layout="hf")))
    assert np.array_equal(hf["labels"], hf["input_ids"]) and hf["position_ids"][0].tolist() == list(range(L))
    with pytest.raises(ValueError, match="no shard holds seq_length \\+ 1"):
        WindowReader(str(out), batch_size=2, seq_length=10**7)
    reader = WindowReader(str(out), batch_size=2, seq_length=L)
    with pytest.raises(ValueError, match="window reader state is for seed=9"):
        reader.load_state_dict({**reader.state_dict(), "seed": 9})


@pytest.mark.parametrize("options, message", [
    (dict(num_steps=-1), "`num_steps` must be a positive integer or None"),   # read nothing, silently
    (dict(num_steps=0), "`num_steps` must be a positive integer or None"),
    (dict(num_steps=1.5), "`num_steps` must be a positive integer or None"),  # read two steps
    (dict(seq_length=2.5), "`seq_length` must be a positive integer, got 2.5"),  # a TypeError from numpy
    (dict(seq_length=True), "`seq_length` must be a positive integer, got True"),  # windows of 1 token
])
def test_window_reader_settings_it_would_misread_are_refused(bin_output, options, message):
    out, _ = bin_output
    with pytest.raises(ValueError, match=message):
        WindowReader(str(out), **{"batch_size": 2, "seq_length": L, **options})


@pytest.mark.parametrize("damage", ["bin", "idx", "idx-foreign"])
def test_a_damaged_shard_is_named(bin_output, tmp_path, damage):
    """A truncated `.idx` raised numpy's "buffer size must be a multiple of element size", naming no file."""
    import shutil

    from easydata.io.formats import ShardUnreadable

    out, manifest = bin_output
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    shard = manifest["datasets"]["data"]["shards"][0]
    path = copy / (shard["path"] if damage == "bin" else shard["index_path"])
    data = path.read_bytes()
    path.write_bytes(data[::-1] if damage == "idx-foreign" else data[:len(data) // 2 + 3])
    reason = {"bin": "do not hold", "idx": "are not whole 8-byte document offsets",
              "idx-foreign": "document offsets do not rise from 0"}[damage]
    for reader in (lambda: TokenReader(str(copy), batch_size=2, seq_length=L),
                   lambda: WindowReader(str(copy), batch_size=2, seq_length=L)):
        with pytest.raises(ShardUnreadable, match=f"shard '{copy / shard['path']}' is unreadable .*{reason}"):
            next(iter(reader()))


def test_window_reader_as_jax(bin_output):
    jax = pytest.importorskip("jax")
    from jax.sharding import Mesh, PartitionSpec

    out, _ = bin_output
    mesh = Mesh(np.array(jax.devices()).reshape(-1), ("data",))
    batch = next(WindowReader(str(out), batch_size=8, seq_length=L, num_steps=1, process_index=0,
                              process_count=1).as_jax(mesh, PartitionSpec("data")))
    assert batch["input_ids"].shape == (8, L) and len(batch["targets"].sharding.device_set) == len(jax.devices())
