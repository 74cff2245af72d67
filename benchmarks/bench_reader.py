"""Reader throughput: `TokenReader` (shuffled, one process) vs plain pyarrow reading the same shards.

    python benchmarks/bench_reader.py [--batch-sizes 16,256] [--repeat 7] [--formats parquet,arrow]

Uses a packed output of the benchmark corpus of `bench_pipeline.py` (built once, then reused), packed
to 2048 with `easydata tokenize`, in Parquet (zstd) and in Arrow IPC (uncompressed), under
`benchmarks/_work/`. For each format it times, alternating, `--repeat` times:

* baseline: plain pyarrow reading every shard's token columns (`pq.read_table`, or
  `pa.ipc.open_file(pa.memory_map(...)).read_all()`) into one numpy `[rows, L]` int32 array per
  column and shard, in storage order: one copy out of Arrow, as the reader's batches are owned
  arrays too (a zero-copy view of a memory map would read nothing);
* shuffled baseline: plain pyarrow the way a hand-written loader shuffles: every shard memory-mapped
  (Arrow) or read (Parquet), its token columns as zero-copy numpy `[rows, L]` views (`to_numpy`), and
  batches gathered by a seeded permutation of the shard's rows (`array[idx]` per column), batch by batch;
* reader: one shuffled epoch of `TokenReader` (batch from `--batch-sizes`, one process, its default
  `prefetch=1`: the next shuffle window loads on a background thread; drop_remainder), from
  construction (manifest and footers) to the last batch;
* no prefetch: the same epoch with `prefetch=0` (every window loads on the calling thread when a batch
  first needs it), for reference.

It prints the median tokens/s of each, the ratios to the baseline, the reader's median time to the
first batch (construction included) and the ratio of every run, for each batch size (16 and a
training-size 256 by default). Targets: ratio >= 0.8 against both baselines for both formats at every
batch size (issues 6 and 25), >= 20M tokens/s from Arrow.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "benchmarks" / "_work"
COLUMNS = ["input_ids", "segment_ids", "positions"]
SEQ_LENGTH = 2048


def _prepare(fmt: str) -> Path:
    """The packed benchmark output in `fmt`, written once with the easydata CLI."""
    out = WORK / f"reader-{fmt}"
    if (out / "manifest.json").exists():
        return out
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_pipeline import ensure_corpus, resolve_tokenizer  # corpus only, not the pipeline benchmark

    WORK.mkdir(parents=True, exist_ok=True)
    corpus, _ = ensure_corpus(WORK, 24)
    tokenizer = resolve_tokenizer(None)
    print(f"writing {out.relative_to(ROOT)} (once) ...", flush=True)
    subprocess.run([sys.executable, "-m", "easydata", "tokenize", "--data-files", str(corpus), "--tokenizer",
                    str(tokenizer), "--output", str(out), "--pack", "--seq-length", str(SEQ_LENGTH), "--format", fmt,
                    "--compression", "zstd" if fmt == "parquet" else "none", "--num-shards", "4", "--overwrite",
                    "--quiet"], check=True)
    return out


def _baseline(out: Path) -> tuple[float, int]:
    """Seconds and `input_ids` tokens for plain pyarrow: every shard into numpy `[rows, L]` per column."""
    manifest = json.loads((out / "manifest.json").read_text())
    L = manifest["schema"]["seq_length"]
    start, tokens = time.perf_counter(), 0
    for shard in next(iter(manifest["datasets"].values()))["shards"]:
        path = str(out / shard["path"])
        table = pq.read_table(path, columns=COLUMNS) if manifest["format"] == "parquet" else \
            pa.ipc.open_file(pa.memory_map(path)).read_all()
        for column in COLUMNS:
            # One copy per column (not `combine_chunks()` then a copy: that would copy twice).
            rows = np.concatenate([chunk.values.to_numpy().reshape(-1, L) for chunk in table.column(column).chunks])
            tokens += rows.size if column == "input_ids" else 0
    return time.perf_counter() - start, tokens


def _columns(out: Path, path: str, fmt: str, L: int) -> dict[str, np.ndarray]:
    """A shard's token columns as `[rows, L]` numpy arrays: zero-copy views for Arrow IPC."""
    table = pq.read_table(path, columns=COLUMNS) if fmt == "parquet" else \
        pa.ipc.open_file(pa.memory_map(path)).read_all()
    columns = {}
    for column in COLUMNS:
        chunks = [chunk.values.to_numpy().reshape(-1, L) for chunk in table.column(column).chunks]
        columns[column] = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
    return columns


def _baseline_gather(out: Path, batch_size: int) -> tuple[float, int]:
    """Seconds and `input_ids` tokens for plain pyarrow shuffling by a permutation gather, shard by shard."""
    manifest = json.loads((out / "manifest.json").read_text())
    L = manifest["schema"]["seq_length"]
    rng = np.random.default_rng(0)
    start, tokens = time.perf_counter(), 0
    for shard in next(iter(manifest["datasets"].values()))["shards"]:
        columns = _columns(out, str(out / shard["path"]), manifest["format"], L)
        order = rng.permutation(len(columns["input_ids"]))
        for at in range(0, len(order) - batch_size + 1, batch_size):
            rows = order[at:at + batch_size]
            batch = {name: array[rows] for name, array in columns.items()}
            tokens += batch["input_ids"].size
    return time.perf_counter() - start, tokens


def _reader(out: Path, batch_size: int, prefetch: int = 1) -> tuple[float, float, int]:
    """Seconds, seconds to the first batch and `input_ids` tokens for one shuffled epoch."""
    from easydata.reader import TokenReader

    start = time.perf_counter()
    reader = TokenReader(str(out), batch_size=batch_size, shuffle=True, seed=0, num_epochs=1,
                         process_index=0, process_count=1, prefetch=prefetch)
    first, tokens = None, 0
    for batch in reader:
        if first is None:
            first = time.perf_counter() - start
        tokens += batch["input_ids"].size
    return time.perf_counter() - start, first or 0.0, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", default="16,256", help="comma-separated global batch sizes")
    parser.add_argument("--repeat", type=int, default=7, help="timed runs of each side (medians are shown)")
    parser.add_argument("--formats", default="parquet,arrow")
    args = parser.parse_args()
    outputs = {fmt: _prepare(fmt) for fmt in args.formats.split(",")}
    print(f"{'format':8} {'batch':>5} {'copy-all tok/s':>15} {'gather tok/s':>13} {'reader tok/s':>13} {'vs copy':>7}"
          f" {'vs gather':>9} {'first batch':>12} {'no prefetch':>12}   ratio vs gather per run")
    for fmt, out in outputs.items():
        for batch_size in [int(b) for b in args.batch_sizes.split(",")]:
            _baseline(out), _baseline_gather(out, batch_size), _reader(out, batch_size)  # warm-up: page cache, imports
            base, gather, read, first, alone = [], [], [], [], []
            for _ in range(args.repeat):
                seconds, tokens = _baseline(out)
                base.append(tokens / seconds)
                seconds, tokens = _baseline_gather(out, batch_size)
                gather.append(tokens / seconds)
                seconds, first_s, tokens = _reader(out, batch_size)
                read.append(tokens / seconds)
                first.append(first_s)
                seconds, _, tokens = _reader(out, batch_size, prefetch=0)
                alone.append(tokens / seconds)
            base_rate, gather_rate = statistics.median(base), statistics.median(gather)
            rate, alone_rate = statistics.median(read), statistics.median(alone)
            runs = " ".join(f"{r / g:.2f}" for g, r in zip(gather, read))
            print(f"{fmt:8} {batch_size:>5} {base_rate:>15,.0f} {gather_rate:>13,.0f} {rate:>13,.0f}"
                  f" {rate / base_rate:>7.2f} {rate / gather_rate:>9.2f} {statistics.median(first):>11.3f}s"
                  f" {alone_rate / gather_rate:>12.2f}   {runs}")
    print(f"medians of {args.repeat} alternating runs. copy-all: plain pyarrow, storage order, every shard into numpy"
          f" [rows, L] int32 ({len(COLUMNS)} columns); gather: plain pyarrow, zero-copy [rows, L] views of each shard,"
          " batches gathered by a seeded permutation of its rows; reader: TokenReader, shuffled, one epoch"
          " (drop_remainder), prefetch 1 (one window read ahead); no prefetch: the reader with prefetch=0, as a ratio"
          " to gather.")

if __name__ == "__main__":
    main()
