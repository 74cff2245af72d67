"""Where a run's CPU goes, stage by stage: `easydata run` sampled by py-spy across all its processes, each
sample given to the pipeline stage of its innermost easydata frame.

`profile_run(cmd, env, out)` runs the command under `py-spy record --subprocesses --format raw` (the launcher,
the fork server and every worker, 100 samples a second, idle threads left out) and `stage_seconds(out)` sums
the samples per stage. A sample's stage is that of the innermost frame matching `STAGES` (a file of the
product, or a call such as the tokenizer's `encode_batch`), so a checkpoint written from inside the tokenize
step counts as checkpointing, not tokenizing; frames of threads waiting on a lock, a queue or a socket count
nowhere. What py-spy cannot see is not counted either: native threads with no Python frame. The fast
engines encode in their caller's thread (one engine thread per worker in a local run), but `tokenizers`
(`hf`) hands a batch to its own Rust thread pool and its caller waits, so `hf`'s encoding is unseen: for the
re-check of 1 % of documents (`tokenize: hf re-check`) `hf_recheck_seconds` estimates it from the run's
manifest and HF's measured speed, and `print_profile` shows it as its own row (perf's call stacks on the 1 GB
Qwen3 run: 11 % of the CPU, where py-spy saw 3 %; docs/performance.md). Sampling slows the run a little, so
the profile run is an extra run, not one of the timed ones.

py-spy is not a dependency of the project: `pip install py-spy` to use `--profile`.
"""

from __future__ import annotations

import collections
import shutil
import subprocess
from pathlib import Path
from typing import Iterable, Optional

__all__ = ["STAGES", "ENCLOSING", "available", "profile_run", "stage_seconds", "hf_recheck_seconds",
           "print_profile"]

RATE = 100  # samples per second per thread

#: Stage -> substrings of a frame (`function (path:line)`) that belong to it; the first stage of the innermost
#: matching frame wins. Product files by their concept (docs/architecture.md), then Beam and start-up.
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("read inputs", ("input_formats/", "io/sources.py", "io/documents.py", "io/conversations.py",
                     "transforms/read.py")),
    ("tokenize: encode", ("encode_batch", "text/engines.py", "text/long_texts.py", "text/tokenizer.py")),
    ("tokenize: render chat", ("text/chat.py",)),
    ("tokenize: rows", ("text/stages.py", "easydata/rows.py", "transforms/tokenize.py")),
    ("checkpoints (resume)", ("run/checkpoint.py",)),
    ("mix", ("ops/mixing.py", "transforms/mix.py")),
    ("shuffle: route + encode", ("ops/sharding.py:group_ranges", "group_ranges", "io/compact_rows.py",
                                 "transforms/coders.py", "transforms/shuffle.py", "shuffle_dictionary.py")),
    ("shuffle: group files", ("transforms/group_files.py",)),
    ("pack", ("ops/pack_stage.py", "ops/packing.py", "transforms/pack.py")),
    ("sort + stage groups", ("ops/sharding.py", "transforms/split.py")),
    ("write shards", ("io/formats.py", "io/token_files.py", "transforms/write.py", "io/shard_formats")),
    ("commit", ("transforms/commit.py", "run/finalize.py", "run/output.py", "run/manifest.py")),
    ("plan", ("run/run_plan.py", "run/dry_run.py", "io/sampling.py")),
    ("progress", ("run/progress.py",)),
    ("Beam runner + gRPC", ("apache_beam/", "grpc/")),
    ("start-up (imports)", ("<module>", "importlib", "_find_and_load")),
]

#: Stages a sample belongs to when any frame of its stack matches, before `STAGES`: steps that call code of
#: another stage (the `hf` re-check of 1 % of documents calls the tokenizer like the engine's encoding does).
ENCLOSING: list[tuple[str, tuple[str, ...]]] = [
    ("tokenize: hf re-check", ("VerifiedEngine._recheck",)),
]

#: Helpers every stage calls (staged Arrow files, file opening, error wrapping): a sample in one belongs to its
#: caller's stage, so these frames are passed over.
SHARED = ("write_staged_batches", "iter_staged_rows", "take_rows", "io/filesystems.py", "transforms/failures.py",
          "easydata/errors.py", "easydata/logs.py")

#: Innermost functions of a thread that waits, not works: Python's waits, and the Python frames that block in
#: C (gRPC's server and channel loops, a thread's C target, a pool thread or pipe reader waiting for work).
#: py-spy cannot tell a thread blocked in C from one computing in C, so these are named.
IDLE = ("wait", "_wait_once", "acquire", "get", "select", "poll", "sleep", "_next", "accept", "recv", "recv_into",
        "readline", "join", "epoll", "_recv", "next", "_serve", "channel_spin", "run", "_worker", "_read_status",
        "_wait_for_tstate_lock", "serve_forever", "_handle_results", "_handle_tasks")


def available() -> bool:
    return shutil.which("py-spy") is not None


def profile_run(cmd: list[str], env: dict[str, str], out: Path, log: Path) -> Optional[Path]:
    """Runs `cmd` under py-spy; the raw samples file, or None when py-spy is missing or failed."""
    if not available():
        return None
    with open(log, "wb") as f:
        done = subprocess.run(["py-spy", "record", "--subprocesses", "--rate", str(RATE), "--format", "raw",
                               "-o", str(out), "--", *cmd], env=env, stdout=f, stderr=subprocess.STDOUT)
    return out if done.returncode == 0 and out.is_file() else None


def _function(frame: str) -> str:
    name = frame.split(" (", 1)[0]
    return name.rsplit(".", 1)[-1]


def stage_of(frames: list[str]) -> Optional[str]:
    """The stage of one sample's stack (root first), None for an idle thread."""
    if frames and _function(frames[-1]) in IDLE:
        return None
    for stage, patterns in ENCLOSING:
        if any(p in frame for frame in frames for p in patterns):
            return stage
    for frame in reversed(frames):
        if any(p in frame for p in SHARED):
            continue
        for stage, patterns in STAGES:
            if any(p in frame for p in patterns):
                return stage
    return "other"


def stage_seconds(raw: Path) -> dict[str, float]:
    """CPU seconds per stage from a py-spy raw file (`stack count` lines)."""
    samples: collections.Counter[str] = collections.Counter()
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        stage = stage_of(stack.split(";"))
        if stage is not None:
            samples[stage] += int(count)
    return {stage: n / RATE for stage, n in samples.most_common()}


def hf_recheck_seconds(engines: Iterable[dict], tokens: int, hf_tokens_per_second: float) -> float:
    """CPU seconds of the `hf` re-check py-spy cannot see, estimated: the share of documents re-checked (the
    manifest's `tokenizer_engines.<dataset>.while_running`: `verified` of `documents`, added up over its
    datasets; chosen by a hash of their key, so about that share of the tokens too) times the run's tokens, at
    `hf`'s speed in one process (HF's ceiling divided by its processes)."""
    running = [e.get("while_running") or {} for e in engines]
    documents = sum(r.get("documents", 0) for r in running)
    if not documents or hf_tokens_per_second <= 0:
        return 0.0
    return sum(r.get("verified", 0) for r in running) / documents * tokens / hf_tokens_per_second


def print_profile(seconds: dict[str, float], input_bytes: int, tokens: Optional[int] = None, *,
                  cpu_seconds: Optional[float] = None, unseen: Optional[dict[str, float]] = None) -> None:
    """The table: each stage's CPU seconds, per GB of input, and share. With `cpu_seconds` (what the run's
    processes used, from the OS), the sampled seconds are scaled to it: a sample of a thread that waits for a
    core counts as running, so on a busy host the samples add up to more than the CPU used.

    `unseen`: CPU seconds of stages py-spy cannot see, estimated elsewhere (`hf_recheck_seconds`). Each
    replaces the samples of its stage (the calling thread's share of the same calls) as a row marked
    "estimated", and the sampled stages are scaled to what is left of `cpu_seconds`.
    """
    all_sampled = sum(seconds.values())
    unseen = {k: v for k, v in (unseen or {}).items() if v > 0}
    seconds = {k: v for k, v in seconds.items() if k not in unseen}
    sampled = sum(seconds.values()) or 1.0
    extra = sum(unseen.values())
    total = cpu_seconds if cpu_seconds else sampled + extra
    scale = max(total - extra, 0.0) / sampled if cpu_seconds else 1.0
    gigabytes = max(input_bytes, 1) / 1e9
    basis = f"{cpu_seconds:.1f} CPU s used, {all_sampled:.1f} sampled" if cpu_seconds else \
        f"{all_sampled:.1f} CPU s sampled"
    print(f"\nCPU by stage (py-spy samples of every process, idle threads left out; {basis};"
          f" {input_bytes / 1e6:.0f} MB of input{f', {tokens:,} tokens' if tokens else ''}):")
    print(f"  {'stage':<34} {'CPU s':>7} {'s per GB':>9} {'share':>6}")
    rows = [(stage, value * scale) for stage, value in seconds.items()] + \
        [(f"{stage} (estimated)", value) for stage, value in unseen.items()]
    for stage, value in sorted(rows, key=lambda r: -r[1]):
        print(f"  {stage:<34} {value:7.1f} {value / gigabytes:9.1f} {100 * value / total:5.1f}%")
