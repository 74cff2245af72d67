"""Packed rows keep `additional_fields`: per segment, the document's key (`segment_sources`) and its
fields, so every token traces back to its document (they used to be dropped silently)."""

from __future__ import annotations

import pytest
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings, strategies as st

from easydata.config import PackStageConfig
from easydata.io.formats import token_list_array
from easydata.ops.pack_stage import pack_group
from easydata.ops.sharding import HASH_COLUMN, KEY_COLUMN
from tests.conftest import make_texts, write_jsonl

ROOT = Path(__file__).resolve().parents[1]


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=30), seq_length=st.integers(4, 32),
       strategy=st.sampled_from(["greedy", "first_fit", "best_fit", "pool"]), shuffled=st.booleans())
def test_every_segment_names_its_document(lengths: list[int], seq_length: int, strategy: str, shuffled: bool) -> None:
    n = len(lengths)
    tokens = np.concatenate([np.full(length, 1000 + d, dtype=np.int32) for d, length in enumerate(lengths)])
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    table = pa.table({"input_ids": token_list_array(tokens, offsets),
                      "url": [f"u{d}" for d in range(n)], "score": [float(d) / 2 for d in range(n)],
                      KEY_COLUMN: [f"f.jsonl@{d}" for d in range(n)], HASH_COLUMN: pa.array(range(n), pa.uint64())})
    order = np.random.default_rng(len(lengths)).permutation(n) if shuffled else None
    batches, _ = pack_group(table, config=PackStageConfig(enabled=True, seq_length=seq_length, strategy=strategy),
                            pad_id=0, seed=1, dataset="d", group=0, order=order)
    seen = {d: 0 for d in range(n)}
    for row in pa.Table.from_batches(list(batches)).to_pylist():
        ids, segments = np.array(row["input_ids"]), np.array(row["segment_ids"])
        assert len(row["segment_sources"]) == len(row["url"]) == len(row["score"]) == segments.max()
        for k, (source, url, score) in enumerate(zip(row["segment_sources"], row["url"], row["score"]), start=1):
            d = int(source.split("@")[1])
            assert url == f"u{d}" and score == d / 2
            piece = ids[segments == k]
            assert (piece == 1000 + d).all()  # the segment's tokens are that document's
            seen[d] += len(piece)
    assert seen == dict(enumerate(lengths))  # and all of them, once


@pytest.mark.slow
def test_cli_packed_run_keeps_fields(tmp_path: Path, tokenizer_dir: Path) -> None:
    write_jsonl(tmp_path / "a.jsonl", ({"text": t, "url": f"https://x/{i}"} for i, t in enumerate(make_texts(80))))
    config = {"default_tokenizer": str(tokenizer_dir),
              "datasets": [{"name": "web", "data_files": str(tmp_path / "a.jsonl"), "additional_fields": ["url"]}],
              "pack": {"enabled": True, "seq_length": 64}, "save": {"output_dir": str(tmp_path / "out")}}
    (tmp_path / "job.json").write_text(json.dumps(config))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "easydata", "run", str(tmp_path / "job.json"), "--quiet",
                           "--direct_num_workers=1"], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr
    table = pq.read_table(sorted((tmp_path / "out" / "web").glob("*.parquet")))
    urls = [u for row in table.column("url").to_pylist() for u in row]
    assert sorted(set(urls)) == sorted(f"https://x/{i}" for i in range(80))  # every document's field is there
    assert all(len(s) == max(g) for s, g in zip(table.column("segment_sources").to_pylist(),
                                                table.column("segment_ids").to_pylist()))
    checked = subprocess.run([sys.executable, "-m", "easydata", "validate", str(tmp_path / "out")],
                             capture_output=True, text=True, timeout=300, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
