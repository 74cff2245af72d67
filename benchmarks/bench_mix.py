"""A weighted mix against the same datasets unmixed: peak memory of the whole process tree and wall time.

What one run does (nothing is downloaded):

1. Corpus. `bench_pipeline.py`'s generated corpus of each `--sizes-mb` size, dealt into three datasets
   `a`, `b`, `c` of about 50 %, 30 % and 20 % of its documents (document i goes to the dataset of
   `i mod 10` in 0-4, 5-7, 8-9), written once under `--workdir`.
2. Two jobs per size, packed (first_fit at 2048, Parquet/zstd), each `easydata run CONFIG --quiet` in a
   subprocess measured as `bench_pipeline.run_measured` measures (the largest summed RSS and PSS over the
   command's process tree, sampled every 0.2 s; wall time of the whole command):
     unmixed  the three datasets, each its own output;
     mixed    the same three mixed 0.5 / 0.3 / 0.2 by output tokens (`--strategy`, default
              `first_exhausted`, so the mix writes about what the unmixed run writes).
   With `--repeat N` the pairs alternate N times and the medians are printed.
3. The ratios mixed / unmixed of peak PSS and of wall time per size, and each size's peak PSS against
   the first size's (flatness in corpus size), and the shuffled bytes per token of each manifest.

Usage, from the repository root (with the project's virtualenv active):
  python benchmarks/bench_mix.py [--sizes-mb 150,400] [--tokenizer DIR] [--repeat N] [--strategy S]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_pipeline as bp  # noqa: E402  (the corpus, the tokenizer and the measured command)

SHARES = {"a": range(0, 5), "b": range(5, 8), "c": range(8, 10)}
WEIGHTS = {"a": 0.5, "b": 0.3, "c": 0.2}


def split_corpus(corpus: Path, workdir: Path) -> dict[str, Path]:
    """The corpus dealt into three JSONL files (see the module docstring), written once."""
    paths = {name: workdir / f"{corpus.stem}-{name}.jsonl" for name in SHARES}
    if all(p.is_file() for p in paths.values()):
        return paths
    files = {name: open(path.with_suffix(".tmp"), "w", encoding="utf-8") for name, path in paths.items()}
    try:
        with open(corpus, encoding="utf-8") as f:
            for i, line in enumerate(f):
                name = next(n for n, r in SHARES.items() if i % 10 in r)
                files[name].write(line)
    finally:
        for handle in files.values():
            handle.close()
    for path in paths.values():
        path.with_suffix(".tmp").replace(path)
    return paths


def write_config(path: Path, parts: dict[str, Path], tokenizer: Path, output: Path, mixed: bool,
                 strategy: str) -> Path:
    config: dict[str, Any] = {
        "seed": 42, "default_tokenizer": str(tokenizer),
        "datasets": [{"name": name, "data_files": str(p), "type": "jsonl"} for name, p in parts.items()],
        "pack": {"enabled": True, "seq_length": bp.SEQ_LENGTH, "strategy": "first_fit"},
        "save": {"output_dir": str(output), "format": "parquet", "compression": "zstd", "overwrite": True},
    }
    if mixed:
        config["mix"] = {"weights": WEIGHTS, "stop_strategy": strategy}
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def run_job(label: str, config: Path, output: Path, workdir: Path) -> dict[str, Any]:
    cmd = [*bp.easydata_command(), "run", str(config), "--quiet"]
    result = bp.run_measured(cmd, bp.mode_env({}), workdir / f"log-mix-{label}.txt", staging_of=output)
    if result["returncode"] != 0:
        raise SystemExit(f"bench: {label} failed (exit {result['returncode']}); see {workdir / f'log-mix-{label}.txt'}")
    manifest = json.loads((output / "manifest.json").read_text())
    result["tokens"] = manifest["totals"]["tokens"]
    result["shuffle_bytes_per_token"] = (manifest.get("shuffle") or {}).get("bytes_per_token")
    if manifest.get("mix"):
        result["shares"] = manifest["mix"]["realized_token_share"]
    return result


def median(results: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in results if r.get(key) is not None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-mb", default="150,400", help="corpus sizes, comma-separated (default 150,400)")
    parser.add_argument("--tokenizer", help="tokenizer dir (default: as bench_pipeline.py)")
    parser.add_argument("--workdir", type=bp.absolute_path, default=bp.DEFAULT_WORKDIR)
    parser.add_argument("--repeat", type=int, default=1, help="alternate the pair N times; medians")
    parser.add_argument("--strategy", default="first_exhausted", help="mix.stop_strategy of the mixed job")
    args = parser.parse_args(argv)
    workdir = args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    tokenizer = bp.resolve_tokenizer(args.tokenizer)
    print(f"tokenizer: {tokenizer}")
    rows = []
    for size in [float(s) for s in args.sizes_mb.split(",")]:
        corpus, meta = bp.ensure_corpus(workdir, size)
        parts = split_corpus(corpus, workdir)
        results: dict[str, list[dict[str, Any]]] = {"unmixed": [], "mixed": []}
        for _ in range(args.repeat):
            for label in results:
                output = workdir / f"out-mix-{label}"
                config = write_config(workdir / f"config-mix-{label}.json", parts, tokenizer, output,
                                      label == "mixed", args.strategy)
                results[label].append(run_job(f"{label}-{size:g}mb", config, output, workdir))
        row = {"size_mb": size, "documents": meta["documents"]}
        for label, runs in results.items():
            row[label] = {"seconds": median(runs, "seconds"), "peak_tree_pss": median(runs, "peak_tree_pss"),
                          "peak_tree_rss": median(runs, "peak_tree_rss"), "tokens": runs[-1]["tokens"],
                          "shuffle_bytes_per_token": runs[-1]["shuffle_bytes_per_token"],
                          "shares": runs[-1].get("shares")}
        rows.append(row)
        m, u = row["mixed"], row["unmixed"]
        print(f"{size:g} MB ({meta['documents']:,} documents), medians of {args.repeat}:")
        for label in ("unmixed", "mixed"):
            r = row[label]
            print(f"  {label:8} {r['seconds']:7.1f} s   peak PSS {bp.fmt_bytes(r['peak_tree_pss'])}"
                  f"   peak RSS {bp.fmt_bytes(r['peak_tree_rss'])}   {r['tokens']:,} tokens"
                  f"   shuffle {r['shuffle_bytes_per_token']} B/token")
        print(f"  mixed / unmixed: time {m['seconds'] / u['seconds']:.2f}x, peak PSS"
              f" {m['peak_tree_pss'] / u['peak_tree_pss']:.2f}x; realized shares {m['shares']}")
    if len(rows) > 1:
        first = rows[0]
        for row in rows[1:]:
            print(f"peak PSS at {row['size_mb']:g} MB / at {first['size_mb']:g} MB: unmixed"
                  f" {row['unmixed']['peak_tree_pss'] / first['unmixed']['peak_tree_pss']:.2f}x, mixed"
                  f" {row['mixed']['peak_tree_pss'] / first['mixed']['peak_tree_pss']:.2f}x")
    (workdir / "bench_mix.json").write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
