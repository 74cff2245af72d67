"""Reader throughput: `TokenReader` (shuffled, one process) vs plain pyarrow reading the same shards.

    python benchmarks/bench_reader.py [--output DIR] [--batch-size 64]

Uses a packed output (default: writes one from the benchmark corpus of `bench_pipeline.py`, packed to
2048, in Parquet and in Arrow IPC, under `benchmarks/_work/`). For each format it times, in the same
run: the baseline, reading every shard with plain pyarrow into numpy `[rows, L]` arrays in storage
order; and one shuffled epoch of `TokenReader` (prefetch on). It prints tokens/s, the ratio to the
baseline and the time to the first batch. Targets (issue 6): ratio >= 0.8, >= 20M tokens/s from Arrow.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "benchmarks" / "_work"


def _prepare(fmt: str) -> Path:
    out = WORK / f"reader-{fmt}"
    if (out / "manifest.json").exists():
        return out
    corpus = WORK / "corpus-24mb.jsonl"
    if not corpus.exists():
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_pipeline.py")], check=True)
    tokenizer = ROOT.parent / "shared" / "tokenizers" / "mistral-7b-v0.1"
    if not tokenizer.exists():
        from easydata.sample import ensure_sample

        tokenizer = ensure_sample() / "tokenizer"
    subprocess.run([sys.executable, "-m", "easydata", "tokenize", "--data-files", str(corpus), "--tokenizer",
                    str(tokenizer), "--output", str(out), "--pack", "--seq-length", "2048", "--format", fmt,
                    "--compression", "zstd" if fmt == "parquet" else "none", "--num-shards", "4", "--overwrite",
                    "--quiet"], check=True)
    return out


def _baseline(out: Path) -> tuple[float, int]:
    manifest = json.loads((out / "manifest.json").read_text())
    L = manifest["schema"]["seq_length"]
    start, tokens = time.perf_counter(), 0
    for shard in next(iter(manifest["datasets"].values()))["shards"]:
        path = str(out / shard["path"])
        table = pq.read_table(path) if manifest["format"] == "parquet" else \
            pa.ipc.open_file(pa.memory_map(path)).read_all()
        for column in ("input_ids", "segment_ids", "positions"):
            values = table.column(column).combine_chunks().values.to_numpy()
            tokens += values.size if column == "input_ids" else 0
            values.reshape(-1, L).copy()
    return time.perf_counter() - start, tokens


def _reader(out: Path, batch_size: int) -> tuple[float, float, int]:
    from easydata.reader import TokenReader

    start = time.perf_counter()
    reader = TokenReader(str(out), batch_size=batch_size, shuffle=True, seed=0, num_epochs=1,
                         process_index=0, process_count=1)
    first, tokens = None, 0
    for batch in reader:
        if first is None:
            first = time.perf_counter() - start
        tokens += batch["input_ids"].size
    return time.perf_counter() - start, first or 0.0, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    print(f"{'format':8} {'baseline tok/s':>15} {'reader tok/s':>13} {'ratio':>6} {'first batch':>12}")
    for fmt in ("parquet", "arrow"):
        out = _prepare(fmt)
        base_s, base_tokens = _baseline(out)
        read_s, first, tokens = _reader(out, args.batch_size)
        base_rate, rate = base_tokens / base_s, tokens / read_s
        print(f"{fmt:8} {base_rate:>15,.0f} {rate:>13,.0f} {rate / base_rate:>6.2f} {first:>11.3f}s")
    print("baseline: plain pyarrow, storage order, every shard into numpy [rows, L] (3 columns);"
          " reader: TokenReader, shuffled, one epoch (drop_remainder), prefetch 2.")


if __name__ == "__main__":
    main()
