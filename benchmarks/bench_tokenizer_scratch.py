"""gigatoken's encoding under a local job's malloc settings, with and without `tokenizer_scratch`.

    python benchmarks/bench_tokenizer_scratch.py [--corpus benchmarks/_work/corpus-48mb.jsonl] [--documents 2400]
                                                 [--batch 50] [--repeat 2] [--tokenizer DIR]

Each mode runs in a fresh process, as a local worker does: gigatoken on a thread that is not the main one,
`parallel=False` (a forked worker's default), another thread busy on the other core (a worker's gRPC and
conversion threads: what makes every page fault of the encoding thread interrupt that core too). Modes:
`job` (`map_large_blocks`: blocks of 1 MiB or more mapped on their own, the job's setting outside the
window), `window` (the same, each call inside `easydata.memory.tokenizer_scratch`, as
`GigatokenEngine.encode` does) and `glibc` (glibc's own defaults, a Dataflow worker's). Prints the encoding
thread's CPU seconds and page faults per mode and the ratio to `job`, alternating the modes `--repeat` times.
Needs gigatoken (`pip install gigatoken`) and no network.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, resource, sys, threading, time
mode, corpus, documents, batch, tokenizer = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
from easydata.memory import map_large_blocks, tokenizer_scratch
if mode != "glibc":
    assert map_large_blocks()
import contextlib, gigatoken, numpy as np
tok = gigatoken.Tokenizer(tokenizer)
texts = []
with open(corpus, encoding="utf-8") as f:
    for line in f:
        texts.append(json.loads(line)["text"])
        if len(texts) >= documents:
            break
window = tokenizer_scratch if mode == "window" else contextlib.nullcontext
out, stop = {}, threading.Event()
def busy():
    a = np.ones(1 << 16)
    while not stop.is_set():
        (a * 1.0001).sum()
def work():
    start, faults = time.thread_time(), resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    for i in range(0, len(texts), batch):
        with window():
            tok.encode_batch(texts[i:i + batch], parallel=False)
    out["cpu"] = time.thread_time() - start
    out["faults"] = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - faults
other = threading.Thread(target=busy)
other.start()
time.sleep(0.1)
worker = threading.Thread(target=work)
worker.start()
worker.join()
stop.set()
other.join()
out["mb"] = sum(len(t.encode("utf-8")) for t in texts) / 1e6
print(json.dumps(out))
"""

MODES = ("job", "window", "glibc")


def run(mode: str, args: argparse.Namespace) -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD, mode, str(args.corpus), str(args.documents), str(args.batch),
                           str(args.tokenizer)], capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        sys.exit(f"{mode}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=ROOT / "benchmarks/_work/corpus-48mb.jsonl",
                        help="JSONL with a `text` field (bench_pipeline.py builds this one)")
    parser.add_argument("--documents", type=int, default=2400)
    parser.add_argument("--batch", type=int, default=50, help="documents per encode call")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--tokenizer", type=Path, default=ROOT.parent / "shared/tokenizers/mistral-7b-v0.1")
    args = parser.parse_args()
    if not args.corpus.is_file():
        sys.exit(f"no corpus at {args.corpus}: run benchmarks/bench_pipeline.py once, or pass --corpus")
    results: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for _ in range(args.repeat):
        for mode in MODES:
            results[mode].append(run(mode, args))
    base = min(r["cpu"] for r in results["job"])
    mb = results["job"][0]["mb"]
    print(f"gigatoken, {args.documents} documents ({mb:.1f} MB), batches of {args.batch}, best of {args.repeat}:")
    for mode in MODES:
        cpu = min(r["cpu"] for r in results[mode])
        faults = min(r["faults"] for r in results[mode])
        print(f"  {mode:7s} {cpu:6.2f} CPU s  {faults:9,d} page faults  {base / cpu:5.2f}x the job's setting")


if __name__ == "__main__":
    main()
