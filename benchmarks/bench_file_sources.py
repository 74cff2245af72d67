"""gigatoken's own file readers against our read path feeding the same engine: is there time to win by
letting the engine read whole input files itself (issue 47: "where an engine can read and encode whole
input files natively, use that path")?

On the same documents, one thread (`RAYON_NUM_THREADS=1`, as in one of our worker processes), gigatoken
encoding Mistral (the tokenizer `auto` gives gigatoken), plain ids without special tokens:

- `jsonl`: the corpus as one JSON lines file. Ours: `easydata.io.sources.read_splits` over the file's
  work units (the block parser, dead-letter checks, document keys, the default `max_document_bytes`), then `GigatokenEngine.encode` of each
  batch. gigatoken's: `Tokenizer.encode_files(JsonlFileSource([file], field="text"))`.
- `txt`: every document as a file of its own (`type: txt`, `sample_by: document`: the many small
  plain-text files the file sources suit best). Ours: `read_splits` of each work unit (whole small files
  read together, `easydata.io.sources.work_units`), then `encode` of each batch. gigatoken's: `encode_files(TextFileSource(paths))` per batch of
  paths, and `encode_batch(BytesSource(buffers))` over the files' bytes read in Python.

Each variant's CPU seconds per run (`--repeat` rounds, alternated, the first round's are shown but the
median is over all), the ratio of each gigatoken path to ours, and whether every path gave the same ids
(a digest of the flat ids and of the lengths; documents that differ are counted and explained). Only read and
encode are timed: nothing here is written.

Usage, from the repository root: python benchmarks/bench_file_sources.py [--size-mb 48] [--repeat 3]
[--tokenizer-dir DIR] [--workdir DIR]. Timings on a shared host drift: compare within one run.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Optional

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # before gigatoken starts its pool: one worker's thread

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_pipeline as bp  # noqa: E402  (the corpus is shared)
import numpy as np  # noqa: E402

BATCH = 1000  # documents per encode call: read_split's default batch


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def ours(engine: Any, dataset: Any) -> tuple[np.ndarray, np.ndarray]:
    """Our read path (the dataset's work units, in order, as `ReadDocuments` reads them) into the engine,
    batch by batch."""
    from easydata.io.sources import plan_input, read_splits, work_units

    from easydata.config import TokenizeStageConfig

    plan = plan_input(dataset)
    flats, lengths = [], []
    limit = TokenizeStageConfig().max_document_byte_limit  # what a run reads with by default
    for unit in work_units(dataset, plan.splits, plan.split_bytes):
        for batch in read_splits(unit, dataset, batch_size=BATCH, max_document_bytes=limit):
            flat, length = engine.encode(batch.texts, add_special_tokens=False)
            flats.append(flat)
            lengths.append(length)
    return np.concatenate(flats), np.concatenate(lengths)


def differing(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> list[int]:
    """Indexes of the documents whose ids differ (all of them when the counts do)."""
    if len(a[1]) != len(b[1]):
        return list(range(max(len(a[1]), len(b[1]))))
    a_starts, b_starts = np.concatenate([[0], np.cumsum(a[1])]), np.concatenate([[0], np.cumsum(b[1])])
    return [i for i in range(len(a[1]))
            if not np.array_equal(a[0][a_starts[i]:a_starts[i + 1]], b[0][b_starts[i]:b_starts[i + 1]])]


def flat_of(engine: Any, encoded: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    parts = [engine._flat(e) for e in encoded]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def digest(result: tuple[np.ndarray, np.ndarray]) -> str:
    flat, lengths = result
    h = hashlib.sha256(np.ascontiguousarray(flat, dtype=np.int32).tobytes())
    h.update(np.ascontiguousarray(lengths, dtype=np.int64).tobytes())
    return h.hexdigest()[:16]


def write_txt_files(texts: list[str], directory: Path) -> list[str]:
    """Each document as a file of its own (names sort in corpus order); kept between runs."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, text in enumerate(texts):
        path = directory / f"{i:06d}.txt"
        if not path.exists():
            path.write_bytes(text.encode("utf-8"))
        paths.append(str(path))
    return paths


def measure(variants: dict[str, Callable[[], tuple[np.ndarray, np.ndarray]]], repeat: int
            ) -> dict[str, dict[str, Any]]:
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    results: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for _ in range(repeat):
        for name, run in variants.items():
            start = cpu_seconds()
            results[name] = run()
            seconds[name].append(cpu_seconds() - start)
    return {name: {"cpu_s": statistics.median(seconds[name]), "rounds": seconds[name], "digest": digest(results[name]),
                   "differing": differing(results[name], results["ours"])} for name in variants}


def report(title: str, results: dict[str, dict[str, Any]], megabytes: float, texts: list[str]) -> None:
    base = results["ours"]["cpu_s"]
    print(f"\n{title} ({megabytes:.0f} MB), CPU seconds, median of {len(results['ours']['rounds'])}:")
    for name, r in results.items():
        rounds = " / ".join(f"{s:.2f}" for s in r["rounds"])
        print(f"  {name:<28} {r['cpu_s']:6.2f} s  ({rounds})  x{base / r['cpu_s']:.2f} of ours  {r['digest']}")
    for name, r in results.items():
        if r["differing"]:
            bom = sum(texts[i].startswith("\ufeff") for i in r["differing"] if i < len(texts))
            print(f"  {name}: {len(r['differing'])} documents' ids differ from ours; {bom} of them open with a"
                  " UTF-8 byte-order mark, which our reader drops as encoding (not text) and the file source keeps")
    if not any(r["differing"] for r in results.values()):
        print("  same ids from every path")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=48)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tokenizer-dir", type=Path,
                        default=bp.REPO_ROOT.parent / "shared" / "tokenizers" / "mistral-7b-v0.1")
    parser.add_argument("--workdir", type=bp.absolute_path, default=bp.REPO_ROOT / "benchmarks" / "_work")
    args = parser.parse_args(argv)

    import gigatoken
    from tokenizers import Tokenizer

    from easydata.config import DatasetConfig
    from easydata.text.engines import GigatokenEngine, engine_version

    tokenizer_file = args.tokenizer_dir / "tokenizer.json"
    engine = GigatokenEngine(tokenizer_file, Tokenizer.from_file(str(tokenizer_file)))
    native = engine._tokenizer
    corpus, _ = bp.ensure_corpus(args.workdir, args.size_mb)
    texts = bp.load_texts(corpus)
    megabytes = corpus.stat().st_size / 1e6
    print(f"gigatoken {engine_version('gigatoken')}, {args.tokenizer_dir.name}, {len(texts):,} documents, "
          f"RAYON_NUM_THREADS={os.environ['RAYON_NUM_THREADS']}")

    jsonl = DatasetConfig(name="corpus", data_files=str(corpus), type="jsonl")
    report("one JSON lines file", measure({
        "ours": lambda: ours(engine, jsonl),
        "gigatoken JsonlFileSource": lambda: flat_of(engine, [native.encode_files(
            gigatoken.JsonlFileSource([str(corpus)], field="text"))]),
    }, args.repeat), megabytes, texts)

    paths = write_txt_files(texts, args.workdir / f"txt-{corpus.stem}")
    txt = DatasetConfig(name="corpus", data_files=paths, type="txt", sample_by="document")
    batches = [paths[i:i + BATCH] for i in range(0, len(paths), BATCH)]

    def buffers() -> tuple[np.ndarray, np.ndarray]:
        encoded = []
        for batch in batches:
            data = []
            for path in batch:
                with open(path, "rb") as f:
                    data.append(f.read())
            encoded.append(native.encode_batch(gigatoken.BytesSource(data)))
        return flat_of(engine, encoded)

    report(f"{len(paths):,} plain-text files, a document each", measure({
        "ours": lambda: ours(engine, txt),
        "gigatoken TextFileSource": lambda: flat_of(engine, [native.encode_files(gigatoken.TextFileSource(b))
                                                           for b in batches]),
        "gigatoken BytesSource": buffers,
    }, args.repeat), sum(len(t.encode("utf-8")) for t in texts) / 1e6, texts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
