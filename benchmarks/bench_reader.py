"""Reader throughput: `TokenReader` (shuffled, one process) vs plain pyarrow reading the same shards.

    python benchmarks/bench_reader.py [--batch-size 64] [--repeat 7] [--formats parquet,arrow]

Uses a packed output of the benchmark corpus of `bench_pipeline.py` (built once, then reused), packed
to 2048 with `easydata tokenize`, in Parquet (zstd) and in Arrow IPC (uncompressed), under
`benchmarks/_work/`. For each format it times, alternating, `--repeat` times:

* baseline: plain pyarrow reading every shard's token columns (`pq.read_table`, or
  `pa.ipc.open_file(pa.memory_map(...)).read_all()`) into one numpy `[rows, L]` int32 array per
  column and shard, in storage order: one copy out of Arrow, as the reader's batches are owned
  arrays too (a zero-copy view of a memory map would read nothing);
* reader: one shuffled epoch of `TokenReader` (batch `--batch-size`, one process, its default
  `prefetch=1`: the next shuffle window loads on a background thread; drop_remainder), from
  construction (manifest and footers) to the last batch;
* no prefetch: the same epoch with `prefetch=0` (every window loads on the calling thread when a batch
  first needs it), for reference.

It prints the median tokens/s of each, the ratios to the baseline, the reader's median time to the
first batch (construction included) and the ratio of every run. Targets (issue 6): ratio >= 0.8 for
both formats, >= 20M tokens/s from Arrow.
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
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=7, help="timed runs of each side (medians are shown)")
    parser.add_argument("--formats", default="parquet,arrow")
    args = parser.parse_args()
    outputs = {fmt: _prepare(fmt) for fmt in args.formats.split(",")}
    print(f"{'format':8} {'baseline tok/s':>15} {'reader tok/s':>13} {'ratio':>6} {'first batch':>12}"
          f" {'no prefetch':>12} {'ratio':>6}   ratio per run")
    for fmt, out in outputs.items():
        _baseline(out), _reader(out, args.batch_size)  # warm-up: page cache, imports
        base, read, first, alone = [], [], [], []
        for _ in range(args.repeat):
            seconds, tokens = _baseline(out)
            base.append(tokens / seconds)
            seconds, first_s, tokens = _reader(out, args.batch_size)
            read.append(tokens / seconds)
            first.append(first_s)
            seconds, _, tokens = _reader(out, args.batch_size, prefetch=0)
            alone.append(tokens / seconds)
        base_rate, rate, alone_rate = statistics.median(base), statistics.median(read), statistics.median(alone)
        runs = " ".join(f"{r / b:.2f}" for b, r in zip(base, read))
        print(f"{fmt:8} {base_rate:>15,.0f} {rate:>13,.0f} {rate / base_rate:>6.2f} {statistics.median(first):>11.3f}s"
              f" {alone_rate:>12,.0f} {alone_rate / base_rate:>6.2f}   {runs}")
    print(f"medians of {args.repeat} alternating runs. baseline: plain pyarrow, storage order, every shard into numpy"
          f" [rows, L] int32 ({len(COLUMNS)} columns); reader: TokenReader, shuffled, one epoch (drop_remainder),"
          f" batch {args.batch_size}, prefetch 1 (one window read ahead); no prefetch: the same with prefetch=0 (windows"
          " load on the calling thread).")


if __name__ == "__main__":
    main()
