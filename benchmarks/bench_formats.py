"""Write throughput and bytes per token of every row output format, on the same rows, in one run.

Takes the rows of an existing output (default: the packed output `bench_engines.py` or `bench_pipeline.py`
left in benchmarks/_work; `--output DIR` for another), and writes them with the pipeline's own shard
writer (`easydata.io.formats.ShardWriter`, the format's default compression) into each format in turn:
Parquet (zstd), Arrow IPC (zstd), TFRecord (none and gzip), ArrayRecord (zstd), JSONL. Prints seconds,
tokens written per second and bytes per token; Parquet is the baseline of the ratios.

Usage: python benchmarks/bench_formats.py [--output DIR] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa  # noqa: E402

from easydata.io.formats import ShardWriter, iter_shard_batches  # noqa: E402

FORMATS = [("parquet", "zstd"), ("arrow", "zstd"), ("tfrecord", "none"), ("tfrecord", "gzip"),
           ("arrayrecord", "zstd"), ("jsonl", "none")]


def find_output(work: Path) -> Optional[Path]:
    for candidate in sorted(work.rglob("manifest.json")):
        manifest = json.loads(candidate.read_text())
        if manifest.get("format") == "parquet" and (manifest.get("schema") or {}).get("packed"):
            return candidate.parent
    return None


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    output = args.output or find_output(Path(__file__).resolve().parent / "_work")
    if output is None:
        sys.exit("no packed Parquet output found: run benchmarks/bench_engines.py first, or pass --output DIR")
    manifest = json.loads((output / "manifest.json").read_text())
    shards = [output / s["path"] for d in manifest["datasets"].values() for s in d["shards"]]
    table = pa.Table.from_batches([b for p in shards for b in iter_shard_batches(str(p), "parquet")])
    tokens = int(manifest["totals"]["tokens"])
    print(f"rows of {output}: {table.num_rows:,} rows, {tokens:,} tokens, columns {table.schema.names}")
    results = []
    with tempfile.TemporaryDirectory(prefix="easydata-formats-") as tmp:
        for fmt, codec in FORMATS:
            times, size = [], 0
            for attempt in range(args.repeat):
                path = Path(tmp) / f"{fmt}-{codec}-{attempt}"
                began = time.perf_counter()
                writer = ShardWriter(str(path), fmt, table.schema, compression=codec, row_group_size=1000)
                writer.write(table)
                writer.close()
                times.append(time.perf_counter() - began)
                size = path.stat().st_size
                path.unlink()
            results.append((fmt, codec, sorted(times)[len(times) // 2], size))
    base = results[0]
    print(f"\n{'format':<12} {'compression':<11} {'seconds':>8} {'tokens/s':>14} {'bytes/token':>12} {'vs parquet':>11}")
    for fmt, codec, seconds, size in results:
        print(f"{fmt:<12} {codec:<11} {seconds:>8.2f} {tokens / seconds:>14,.0f} {size / tokens:>12.2f}"
              f" {base[2] / seconds:>10.2f}x")
    print("\n  seconds: one shard of all the rows written with the pipeline's shard writer, median of --repeat;"
          "\n  vs parquet: Parquet's seconds over the format's (above 1: faster to write).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
