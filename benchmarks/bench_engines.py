"""The pipeline with `tokenize.engine: hf` and with the default (`auto`: a verified fast engine), against
the ceilings of both tokenizers, on the same corpus, for Mistral and Qwen3.

For each tokenizer (nothing is downloaded: `../shared/tokenizers`, else `--tokenizer-dirs`):

1. Ceilings, each one single-threaded process per usable core (`RAYON_NUM_THREADS=1`) encoding its share
   of the corpus in memory, only the encode calls timed: `tokenizers`' fastest call (`encode_batch_fast`,
   no offsets) -- HF's ceiling -- and the fast engine `auto` verifies for this tokenizer (its flat-array call).
2. The pipeline, `easydata run CONFIG --quiet` (packed at 2048, Parquet/zstd), whole command wall-clock,
   with `engine: hf` and with the default, alternated, `--repeat` times (median).
3. The fixed start-up of each: the same command on the corpus's first 10 documents (interpreter, Beam's
   import and graph, planning with the engine's load and verification, the worker processes' start).
4. Printed: tokens/s of each, the ratios to both ceilings (also without the fixed start-up), peak RSS of the
   command's process tree, peak staging bytes per token, the engine the manifest names with its
   verification counts, and whether the two runs' shards are byte-identical.
5. With `--api`: EasyData's object API, `TokenizedShardedSource(JsonShardedSource(corpus), tokenizer,
   engine=...)` iterated to the end in a fresh process per run (tokenizer load and engine choice
   included, as a notebook pays them), `engine="hf"` and `"auto"` alternated `--repeat` times: seconds
   (median), tokens/s, the speed-up, and whether both yielded the same ids (a digest of every row's).
6. With `--large-mb N` (e.g. 1000): the default engine (`--large-engines auto,hf`: also `engine: hf`) again
   on a corpus of N MB (generated past the machine's material: no document repeated verbatim, see
   bench_pipeline.py), its tokens/s, HF ceiling ratio and peak memory beside the first corpus's; with
   several sizes (`--large-mb 400,1000`) each size's peak memory is also shown against the previous
   size's, which shows where it levels off.

Usage, from the repository root: python benchmarks/bench_engines.py [--size-mb 48] [--repeat 3]
[--tokenizers mistral,qwen3] [--api] [--large-mb 400,1000] [--large-engines auto,hf] [--workdir DIR]. Timings on a shared host drift: compare
within one run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_pipeline as bp  # noqa: E402  (the corpus, measured commands and ceilings are shared)

TOKENIZERS = {"mistral": bp.REPO_ROOT.parent / "shared" / "tokenizers" / "mistral-7b-v0.1",
              "qwen3": bp.REPO_ROOT.parent / "shared" / "tokenizers" / "qwen3"}


def fast_engine_for(tokenizer_dir: Path, texts: list[str]) -> str:
    """The engine `auto` picks for this tokenizer (verified on a sample of the corpus)."""
    from tokenizers import Tokenizer

    from easydata.text.engines import choose_engine, special_token_strings

    hf = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    return choose_engine("auto", tokenizer_dir / "tokenizer.json", hf, special_token_strings(hf),
                         [t[:2000] for t in texts[:300]]).name


def digest(output: Path) -> dict[str, str]:
    return {str(p.relative_to(output)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(output.rglob("part-*"))}


def run_engine(label: str, engine: str, corpus: Path, tokenizer_dir: Path, workdir: Path,
               with_digest: bool = True) -> dict[str, Any]:
    out = workdir / f"out-{label}"
    config = bp.write_config(workdir / f"config-{label}.json", corpus, tokenizer_dir, out)
    data = json.loads(config.read_text())
    data.setdefault("tokenize", {})["engine"] = engine
    config.write_text(json.dumps(data))
    result = bp.run_pipeline(label, config, [], {"RAYON_NUM_THREADS": None}, workdir, out)
    if result["returncode"] == 0:
        manifest = json.loads((out / "manifest.json").read_text())
        result["engine"] = next(iter(manifest.get("tokenizer_engines", {}).values()), {})
        if with_digest:
            result["digest"] = digest(out)
    return result


def ratio(tokens: Optional[int], seconds: float, ceiling: Optional[dict[str, Any]]) -> str:
    if not tokens or not ceiling:
        return "n/a"
    return f"{(tokens / seconds) / (ceiling['tokens'] / ceiling['seconds']):.2f}"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=bp.DEFAULT_SIZE_MB)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--tokenizers", default="mistral,qwen3")
    parser.add_argument("--large-mb", type=_sizes, default=[],
                        help="also run the default engine on a corpus this big (MB; several, comma-separated, show"
                             " where peak memory levels off: 400,1000)")
    parser.add_argument("--large-engines", default="auto", help="the engines run on the large corpus: auto, hf or both")
    parser.add_argument("--workdir", type=bp.absolute_path, default=bp.DEFAULT_WORKDIR / "engines")
    parser.add_argument("--api", action="store_true", help="also time the Python API's TokenizedShardedSource")
    parser.add_argument("--api-child", nargs=3, metavar=("ENGINE", "CORPUS", "TOKENIZER"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.api_child:
        print(json.dumps(api_pass(*args.api_child)))
        return 0
    args.workdir.mkdir(parents=True, exist_ok=True)
    corpus, meta = bp.ensure_corpus(args.workdir.parent, args.size_mb)
    texts = bp.load_texts(corpus)
    cores = bp.usable_cores()
    print(f"engines benchmark: {cores} cores, corpus {corpus} ({meta['documents']:,} documents,"
          f" {meta['text_bytes'] / 1e6:.1f} MB of text)")
    tiny = bp.write_tiny_corpus(corpus, args.workdir)
    rows, large_rows, api_rows = [], [], []
    for name in args.tokenizers.split(","):
        tokenizer_dir = TOKENIZERS[name]
        engine = fast_engine_for(tokenizer_dir, texts)
        hf_ceiling = bp.encode_single_thread(tokenizer_dir, corpus, processes=cores, method=bp.ceiling_method())
        fast_ceiling = bp.encode_single_thread(tokenizer_dir, corpus, processes=cores, engine=engine)
        runs: dict[str, list[dict[str, Any]]] = {"hf": [], "auto": []}
        for _ in range(args.repeat):  # alternated: the host's speed drifts
            for label in ("hf", "auto"):
                runs[label].append(run_engine(f"{name}-{label}", label, corpus, tokenizer_dir, args.workdir))
        hf_run, auto_run = bp.median_run(runs["hf"]), bp.median_run(runs["auto"])
        fixed = {label: bp.median_run([run_engine(f"{name}-{label}-tiny", label, tiny, tokenizer_dir, args.workdir,
                                                  with_digest=False) for _ in range(args.repeat)])["seconds"]
                 for label in ("hf", "auto")}
        auto_run["fixed_seconds"] = fixed["auto"]
        identical = hf_run.get("digest") is not None and hf_run.get("digest") == auto_run.get("digest")
        print(f"\n{name}: fast engine {engine}; ceilings ({cores} single-threaded processes):"
              f" hf {bp.ceiling_method()} {hf_ceiling['tokens'] / hf_ceiling['seconds']:,.0f} tokens/s,"
              f" {engine} {fast_ceiling['tokens'] / fast_ceiling['seconds']:,.0f} tokens/s"
              f" ({hf_ceiling['seconds'] / fast_ceiling['seconds']:.1f}x)")
        for label, key, run in (("engine: hf", "hf", hf_run), ("default (auto)", "auto", auto_run)):
            if run["returncode"] != 0:
                print(f"  {label}: FAILED, see {run['log']}")
                continue
            tokens = run.get("tokens")
            staging = run.get("peak_staging_bytes")
            counts = run.get("engine", {}).get("while_running", {})
            rows.append([name, label, run.get("engine", {}).get("name", "?"), f"{run['seconds']:.1f}",
                         f"{tokens / run['seconds']:,.0f}", ratio(tokens, run["seconds"], hf_ceiling),
                         ratio(tokens, run["seconds"], fast_ceiling), f"{fixed[key]:.1f}",
                         ratio(tokens, max(run["seconds"] - fixed[key], 1e-3), hf_ceiling),
                         bp.fmt_bytes(run["peak_tree_rss"]), bp.fmt_bytes(run.get("peak_tree_pss")),
                         f"{staging / tokens:.1f}" if staging and tokens else "n/a",
                         f"{counts.get('verified', '-')}/{counts.get('mismatches', '-')}"])
        print(f"  outputs byte-identical: {'yes' if identical else 'NO'}")
        hf_run["fixed_seconds"] = fixed["hf"]
        if args.api:
            api_rows.extend(api_runs(name, corpus, tokenizer_dir, args.repeat))
        for engine in args.large_engines.split(",") if args.large_mb else ():
            small = auto_run if engine == "auto" else hf_run
            previous: Optional[dict[str, Any]] = None
            for size_mb in args.large_mb if small["returncode"] == 0 else ():
                row, previous = large_run(name, engine, tokenizer_dir, small, previous, hf_ceiling, size_mb, args)
                large_rows.append(row)
    print()
    bp.print_table(rows, ["tokenizer", "run", "engine", "seconds", "tokens/s", "vs HF ceiling", "vs engine ceiling",
                          "fixed s", "vs HF ceiling w/o fixed", "peak RSS", "peak PSS", "staging B/token",
                          "verified/mismatches"])
    print("\n  vs HF ceiling: the whole command's tokens/s over tokenizers' own fastest call on every core"
          "\n  (one single-threaded process per core, texts in memory, only the encode calls timed); fixed s: the"
          "\n  same command on 10 documents; w/o fixed: the run's seconds less those.")
    if api_rows:
        print()
        bp.print_table(api_rows, ["tokenizer", "Python API", "engine", "seconds", "tokens/s", "÷ engine=\"hf\"",
                                  "same ids"])
    if large_rows:
        print()
        bp.print_table(large_rows, ["tokenizer, run", "corpus", "tokens", "seconds", "tokens/s", "÷ HF ceiling",
                                    "÷ small run's", "w/o fixed ÷ small's", "peak RSS", "÷ small run's", "peak PSS",
                                    "÷ small run's", "÷ previous size's", "staging B/token"])
    return 0


def api_pass(engine: str, corpus: str, tokenizer_dir: str) -> dict[str, Any]:
    """One pass of the Python API over the corpus (in a child process): seconds from before the source
    is built, tokens, the engine it chose and a digest of every row's ids."""
    import time

    import numpy as np

    started = time.perf_counter()
    from easydata import JsonShardedSource, TokenizedShardedSource

    source = TokenizedShardedSource(JsonShardedSource(corpus), tokenizer_dir, engine=engine)
    digest, tokens = hashlib.sha256(), 0
    for row in source:
        ids = np.asarray(row["input_ids"], dtype=np.int32)
        digest.update(len(ids).to_bytes(4, "little") + ids.tobytes())
        tokens += len(ids)
    return {"seconds": time.perf_counter() - started, "tokens": tokens, "digest": digest.hexdigest(),
            "engine": source.engine_choice.name}


def api_runs(name: str, corpus: Path, tokenizer_dir: Path, repeat: int) -> list[list[str]]:
    import statistics
    import subprocess

    passes: dict[str, list[dict[str, Any]]] = {"hf": [], "auto": []}
    for _ in range(repeat):  # alternated: the host's speed drifts
        for engine in passes:
            done = subprocess.run([sys.executable, __file__, "--api-child", engine, str(corpus), str(tokenizer_dir)],
                                  capture_output=True, text=True, check=True)
            passes[engine].append(json.loads(done.stdout.strip().splitlines()[-1]))
    seconds = {engine: statistics.median(p["seconds"] for p in runs) for engine, runs in passes.items()}
    same = len({p["digest"] for runs in passes.values() for p in runs}) == 1
    return [[name, label, passes[engine][0]["engine"], f"{seconds[engine]:.1f}",
             f"{passes[engine][0]['tokens'] / seconds[engine]:,.0f}", f"{seconds['hf'] / seconds[engine]:.2f}",
             "yes" if same else "NO"] for label, engine in (('engine="hf"', "hf"), ('engine="auto"', "auto"))]


def _sizes(text: str) -> list[float]:
    """`--large-mb`: one size or several, comma-separated (0: none)."""
    return [size for size in (float(part) for part in text.split(",") if part.strip()) if size > 0]


def large_run(name: str, engine: str, tokenizer_dir: Path, small: dict[str, Any], previous: Optional[dict[str, Any]],
              hf_ceiling: dict[str, Any], size_mb: float, args: argparse.Namespace
              ) -> tuple[list[str], Optional[dict[str, Any]]]:
    """`engine` on a `size_mb` corpus, beside its run on the first corpus (and HF's ceiling measured on the
    first corpus: the same material) and its run on the previous `--large-mb` size; returns the table row
    and the run."""
    corpus, meta = bp.ensure_corpus(args.workdir.parent, size_mb)
    label = f"{name}-{engine}-large" if size_mb == args.large_mb[-1] else f"{name}-{engine}-{size_mb:g}"
    run = run_engine(label, engine, corpus, tokenizer_dir, args.workdir, with_digest=False)
    name = f"{name} {'default' if engine == 'auto' else 'engine: ' + engine}"
    if run["returncode"] != 0:
        return [name, f"{size_mb:g} MB", "FAILED", str(run["log"])] + [""] * 10, None
    tokens, seconds = run["tokens"], run["seconds"]
    fixed = small.get("fixed_seconds", 0.0)
    staging = run.get("peak_staging_bytes")
    def versus(key: str, other: Optional[dict[str, Any]] = small) -> str:
        return f"{run[key] / other[key]:.2f}" if other and run.get(key) and other.get(key) else "n/a"

    return [name, f"{meta['text_bytes'] / 1e6:,.0f} MB ({meta['documents']:,} docs)", f"{tokens:,}", f"{seconds:.1f}",
            f"{tokens / seconds:,.0f}", ratio(tokens, seconds, hf_ceiling),
            f"{(tokens / seconds) / (small['tokens'] / small['seconds']):.2f}",
            f"{(tokens / (seconds - fixed)) / (small['tokens'] / (small['seconds'] - fixed)):.2f}",
            bp.fmt_bytes(run["peak_tree_rss"]), versus("peak_tree_rss"), bp.fmt_bytes(run.get("peak_tree_pss")),
            versus("peak_tree_pss"), versus("peak_tree_pss", previous),
            f"{staging / tokens:.1f}" if staging else "n/a"], run


if __name__ == "__main__":
    sys.exit(main())
