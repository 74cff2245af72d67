"""`Pack` in the real pipeline: exact rows, every token once, deterministic across runners, all formats."""

from __future__ import annotations

import collections
import hashlib
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

from beam_pipelines.batch import run_batch
from easydata.config import PipelineConfig
from tests.conftest import read_shard_table
from easydata.tools.validate import validate_output
from tests.conftest import make_texts, write_jsonl

L = 64


def _config(data: Path, tokenizer: Path, out: Path, *, strategy: str = "first_fit", fmt: str = "parquet",
            compression: str = "zstd", batch_size: int = 50) -> PipelineConfig:
    return PipelineConfig.from_dict({
        "seed": 3,
        "default_tokenizer": str(tokenizer),
        "datasets": [{"name": "web", "data_files": str(data)}],
        "tokenize": {"batch_size": batch_size},
        "pack": {"enabled": True, "seq_length": L, "strategy": strategy},
        "save": {"output_dir": str(out), "num_shards": 3, "format": fmt, "compression": compression,
                 "row_group_size": 16},
    })


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, list[str]]:
    texts = make_texts(300, seed=9, max_words=120)  # some documents longer than L tokens
    return write_jsonl(tmp_path / "in" / "a.jsonl", ({"text": t} for t in texts)), texts


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["greedy", "first_fit", "best_fit", "pool"])
def test_every_token_once_in_rows_of_exactly_seq_length(corpus, tokenizer_dir, tmp_path, strategy):
    data, texts = corpus
    out = tmp_path / strategy
    result = run_batch(_config(data, tokenizer_dir, out, strategy=strategy), ["--direct_num_workers=1"],
                       show_progress=False)
    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    eos = tok.token_to_id("</s>")
    reference = [tok.encode(t).ids + [eos] for t in texts]
    table = pq.read_table(sorted((out / "web").glob("*.parquet")))
    ids = np.array(table.column("input_ids").to_pylist())
    seg = np.array(table.column("segment_ids").to_pylist())
    assert ids.shape[1] == L
    assert collections.Counter(ids[seg > 0].tolist()) == collections.Counter(t for doc in reference for t in doc)
    if strategy != "greedy":  # documents up to L tokens are whole segments
        segments: collections.Counter = collections.Counter()
        for row, s in zip(ids, seg):
            for k in range(1, s.max() + 1):
                segments[tuple(row[s == k].tolist())] += 1
        for doc in reference:
            if len(doc) <= L:
                assert segments[tuple(doc)] >= 1
    m = result.manifest
    assert m["schema"]["packed"] is True and m["schema"]["seq_length"] == L
    info = m["datasets"]["web"]
    assert info["documents_written"] == 300 and info["tokens"] == sum(map(len, reference))
    assert info["padding_tokens"] == int(np.count_nonzero(seg == 0))
    assert info["segments"] == int(seg.max(axis=1).sum())
    report = validate_output(str(out))
    assert report.ok, report.problems


def _digest(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("part-*"))}


@pytest.mark.slow
def test_packed_output_identical_across_workers_batches_and_splits(corpus, tokenizer_dir, tmp_path):
    data, _ = corpus
    run_batch(_config(data, tokenizer_dir, tmp_path / "a"), ["--direct_num_workers=1"], show_progress=False)
    run_batch(_config(data, tokenizer_dir, tmp_path / "b", batch_size=7), ["--direct_num_workers=2"],
              show_progress=False, split_bytes=2048)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert len(_digest(tmp_path / "a")) == 3


@pytest.mark.parametrize("fmt, compression", [("arrow", "zstd"), ("jsonl", "none")])
def test_packed_schema_in_every_format(corpus, tokenizer_dir, tmp_path, fmt, compression):
    data, _ = corpus
    out = tmp_path / fmt
    run_batch(_config(data, tokenizer_dir, out, fmt=fmt, compression=compression), ["--direct_num_workers=1"],
              show_progress=False)
    report = validate_output(str(out))
    assert report.ok, report.problems
    table = read_shard_table(str(sorted((out / "web").glob("part-*"))[0]), fmt)
    assert table.column_names == ["input_ids", "segment_ids", "positions"]
