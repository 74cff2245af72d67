"""The README's nanoGPT-style worked example, run for real with the installed CLI: train a tokenizer,
tokenize to train/validation `.bin` token streams, `np.memmap` them and sample batches as nanoGPT's
`get_batch` does; the reader gives the same windows; `stats --plot` summarises the output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from easydata.reader import TokenReader
from tests.conftest import make_texts, write_jsonl

pytestmark = pytest.mark.slow


def _cli(*args: str, cwd: Path) -> str:
    result = subprocess.run([sys.executable, "-m", "easydata", *args], cwd=cwd, capture_output=True, text=True,
                            env={**os.environ}, timeout=600)
    assert result.returncode == 0, result.stderr
    return result.stdout


def get_batch(data: np.ndarray, batch_size: int, block_size: int, rng: np.random.Generator):
    """nanoGPT's `get_batch` (numpy instead of torch)."""
    ix = rng.integers(len(data) - block_size, size=batch_size)
    x = np.stack([data[i:i + block_size].astype(np.int64) for i in ix])
    y = np.stack([data[i + 1:i + 1 + block_size].astype(np.int64) for i in ix])
    return x, y


@pytest.mark.slow
def test_train_tokenizer_then_bin_splits_then_memmap(tmp_path):
    texts = [f"doc {i}: {t}" for i, t in enumerate(make_texts(400, seed=61, max_words=120))]
    write_jsonl(tmp_path / "data" / "corpus.jsonl", ({"text": t} for t in texts))
    _cli("train-tokenizer", "--data-files", "data/*.jsonl", "--vocab-size", "600", "--output", "tok", cwd=tmp_path)
    _cli("tokenize", "--data-files", "data/*.jsonl", "--tokenizer", "tok", "--output", "out", "--format", "bin",
         "--num-shards", "1", "--validation-fraction", "0.1", cwd=tmp_path)
    assert "OK" in _cli("validate", "out", cwd=tmp_path)
    assert "per split:" in _cli("stats", "out", "--plot", "stats.png", cwd=tmp_path)
    assert (tmp_path / "stats.png").read_bytes()[:4] == b"\x89PNG"

    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    dtype = manifest["schema"]["token_dtype"]
    assert dtype == "uint16"
    train = np.memmap(tmp_path / "out/data/train/part-00000-of-00001.bin", dtype=dtype, mode="r")
    val = np.memmap(tmp_path / "out/data/validation/part-00000-of-00001.bin", dtype=dtype, mode="r")
    tokenizer = Tokenizer.from_file(str(tmp_path / "tok" / "tokenizer.json"))
    eos = manifest["tokenizer"]["eos_token_id"]
    everything = sorted(e.ids + [eos] for e in tokenizer.encode_batch(texts))
    documents = []
    for split, stream in (("train", train), ("validation", val)):
        index = np.fromfile(tmp_path / f"out/data/{split}/part-00000-of-00001.idx", dtype=np.int64)
        documents += [stream[a:b].tolist() for a, b in zip(index[:-1], index[1:])]
        assert len(stream) == manifest["datasets"][f"data/{split}"]["tokens"]
    assert sorted(documents) == everything  # every document once, in exactly one split
    assert 0.03 < len(val) / (len(train) + len(val)) < 0.2

    x, y = get_batch(train, 12, 64, np.random.default_rng(0))
    assert x.shape == (12, 64) and np.array_equal(x[:, 1:], y[:, :-1])
    reader = TokenReader.random_windows(str(tmp_path / "out"), batch_size=12, seq_length=64, name="data/train")
    batch = next(iter(reader))
    shard, start = reader.starts(0)
    assert np.array_equal(batch["input_ids"], np.stack([train[s:s + 64] for s in start]))
    val_reader = TokenReader(str(tmp_path / "out"), batch_size=4, seq_length=256, name="data/validation",
                             num_epochs=1, drop_remainder=False)
    assert sum(int((b["segment_ids"].sum(axis=1) > 0).sum()) for b in val_reader) == \
        manifest["datasets"]["data/validation"]["rows"]
