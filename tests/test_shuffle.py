"""`transforms.shuffle.ShuffleRows`: what crosses the shuffle is counted exactly as its coder encodes it,
reported per stage in the manifest, and well under the 6 bytes per token of the cost model's target."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that, equal_to

from beam_pipelines.runners import OfflineDirectRunner
from easydata.io.compact_rows import encode_rows
from easydata.io.formats import documents_to_batch
from easydata.ops.sharding import HASH_COLUMN, KEY_COLUMN
from tests.conftest import split_by_group
from tests.conftest import make_texts, write_jsonl
from transforms.counters import STATS_TAG, SumCounters
from transforms.shuffle import KEYED_ROWS_CODER, ShuffleRows


def _batches(count: int, seed: int) -> list[pa.RecordBatch]:
    rng = np.random.default_rng(seed)
    batches = []
    for b in range(count):
        lengths = rng.integers(0, 300, 20)
        flat = rng.integers(0, 32_000, int(lengths.sum())).astype(np.int32)
        keys = [f"doc-{b}-{i}" for i in range(20)]
        batches.append(documents_to_batch(flat, np.concatenate([[0], np.cumsum(lengths)]), {}, {
            KEY_COLUMN: pa.array(keys), HASH_COLUMN: pa.array(rng.integers(0, 2**63, 20), pa.uint64())}))
    return batches


@pytest.mark.slow
@pytest.mark.parametrize("via_files", [False, True])
def test_counted_bytes_equal_the_coders_encoded_sizes(tmp_path: Path, via_files: bool) -> None:
    batches, num_groups = _batches(6, seed=1), 4
    elements = [(g, encode_rows(part)) for batch in batches for g, part in split_by_group(batch, num_groups)]
    encoded = sum(len(KEYED_ROWS_CODER.encode(e)) for e in elements)
    assert all(KEYED_ROWS_CODER.estimate_size(e) == len(KEYED_ROWS_CODER.encode(e)) for e in elements)
    rows_per_group = {g: sum(p.num_rows for b in batches for h, p in split_by_group(b, num_groups) if h == g)
                      for g in range(num_groups)}
    with beam.Pipeline(runner=OfflineDirectRunner()) as pipeline:
        shuffled = (pipeline | beam.Create(batches)
                    | ShuffleRows(num_groups=num_groups, stage="pack",
                                  group_dir=str(tmp_path / "groups") if via_files else None))
        totals = (shuffled[STATS_TAG] | beam.CombineGlobally(SumCounters()) | beam.Map(lambda c: c.shuffled_bytes))
        assert_that(totals, equal_to([{"pack": encoded}]), label="bytes")
        rows = shuffled["groups"] | beam.Map(lambda g: (g[0], sum(b.num_rows for b in g[1])))
        assert_that(rows, equal_to([(g, n) for g, n in rows_per_group.items() if n]), label="rows")


@pytest.mark.slow
@pytest.mark.parametrize("pack", [True, False])
def test_the_manifest_reports_shuffled_bytes_per_stage(tokenizer_dir, tmp_path: Path, pack: bool) -> None:
    data = write_jsonl(tmp_path / "a.jsonl", ({"text": t} for t in make_texts(400, seed=3, max_words=200)))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "easydata", "tokenize", "--data-files", str(data), "--tokenizer", str(tokenizer_dir),
                           "--output", str(out), *(["--pack", "--seq-length", "128"] if pack else []), "--quiet"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "shuffle:" in done.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    shuffle, tokens = manifest["shuffle"], manifest["totals"]["tokens"]
    stage = "pack" if pack else "sort"
    assert list(shuffle["stages"]) == [stage]
    assert shuffle["bytes"] == shuffle["stages"][stage]["bytes"] > 0
    assert shuffle["bytes_per_token"] == round(shuffle["bytes"] / tokens, 4)
    # 2 bytes per id (a small vocabulary), 4 per row length, the hidden key and hash per document,
    # then compressed: under 2 bytes per token, where the issue asked for at most 6.
    assert 0.3 < shuffle["bytes_per_token"] < 2.0


def test_the_shuffle_benchmark_measures_more_bytes_per_token_as_groups_multiply(tokenizer_dir, tmp_path: Path,
                                                                                  capsys) -> None:
    """`benchmarks/bench_shuffle.py` (the cost model's `s` at scale) sizes what routing would emit."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        import bench_shuffle
    finally:
        sys.path.pop(0)
    data = write_jsonl(tmp_path / "a.jsonl", ({"text": t} for t in make_texts(300, seed=5, max_words=120)))
    batches = list(bench_shuffle.tokenized_batches(data, str(tokenizer_dir), batch_size=100, max_mb=None))
    assert sum(b.num_rows for b in batches) == 300
    one, many = bench_shuffle.measure(batches, [1, 4096])
    assert one[1] == len(batches) and many[1] > 250  # about one element per document at 4,096 groups
    assert one[2] > one[3] and many[2] > many[3]  # compression pays at both
    assert many[3] > one[3]  # per-element headers, keys and frames: more bytes per token when spread out
    expected = sum(KEYED_ROWS_CODER.estimate_size((g, encode_rows(p))) for b in batches
                   for g, p in split_by_group(b, 4096))
    assert many[3] == expected / sum(len(b.column("input_ids").values) for b in batches)
    assert bench_shuffle.main(["--data", str(data), "--tokenizer", str(tokenizer_dir), "--groups", "2,64",
                               "--doc-chars", "200"]) == 0
    out = capsys.readouterr().out
    assert "cut to 200 chars" in out and "B/token zstd" in out
