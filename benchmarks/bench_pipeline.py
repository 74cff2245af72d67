"""Throughput of the easydata batch pipeline against the raw Rust tokenizer it wraps.

What one run does (nothing is downloaded):

1. Corpus. Builds (once, then reuses) a JSONL corpus of at least `--size-mb` MB (10^6 bytes of
   UTF-8 text) of real text and code found on this machine: the standard library's `.py` files,
   the `.py` files of the running interpreter's site-packages, and documentation text
   (`.txt/.rst/.md/.html`) from the standard library, site-packages and `/usr/share/doc`. The three
   sources are interleaved by bytes (always taking the next file from the source with the fewest
   bytes so far), in sorted path order, so the corpus is deterministic for a given machine. Each
   document is capped at 200 KB; if the files run out (sizes past ~400 MB), further documents are
   generated from the material: copy k of document i interleaves its lines with those of another
   document (chosen by k), so no document repeats verbatim and no tokenizer cache sees a repeat.
2. Tokenizer. `--tokenizer`, else `../shared/tokenizers/mistral-7b-v0.1` next to the repository,
   else the embedded sample tokenizer (`easydata.tools.sample.ensure_sample() / "tokenizer"`).
3. Baseline. The same texts, read into memory, encoded with `tokenizers.Tokenizer.encode_batch` in
   batches of 1,000 documents using the tokenizer's own thread pool on every core; only the encode
   calls are timed. Also shown, for reference: `encode_batch_fast` (what the pipeline calls),
   `tokenizers`' fastest call (`encode_batch_fast` where it has one, no offsets) with one thread
   (`RAYON_NUM_THREADS=1`, in a child process), and the tokenizer's ceiling: the same in one child
   process per usable core at once, each encoding its share of the
   documents (every N-th one) once all have loaded them and counting `len(encoding)` only. The
   ceiling is what the pipeline's worker processes (one single-threaded tokenizer each) could do at
   best; each mode is printed as a fraction of it and per vCPU (the `r` of docs/dataflow.md's cost
   model), with the shuffled bytes per token its manifest reports (the model's `s`). One thread ->
   the ceiling is the machine's own 1 -> N core scaling for this work (a shared host often gives
   less than N).
4. Pipeline. `easydata run CONFIG --quiet` as a subprocess, wall-clock of the whole command
   (interpreter start, Beam import, planning, reading, tokenizing, first_fit packing at 2048 unless
   `--no-pack`, shuffling, Parquet/zstd writing, commit), in four local modes (`--modes` picks some):
     default      no runner flags: one worker process per core, one tokenizer thread each;
     in-process   `--direct_num_workers=1`: one in-process worker, tokenizer threads on all cores
                  (the default before worker processes were);
     one-thread   `--direct_num_workers=1`, `RAYON_NUM_THREADS=1`: one in-process worker,
                  single-threaded tokenizer;
     procs-only   `--direct_num_workers=2` and `RAYON_NUM_THREADS=1`: two single-threaded worker
                  processes (the default on two cores). With one-thread, the 1 -> 2 worker scaling.
     one-core     one-thread under `taskset -c 0`: one core. one-thread is not quite one core's worth
                  (its Python thread converts a batch while the Rust thread encodes the next, on the
                  other core); with procs-only, the 1 -> 2 core scaling. Skipped without `taskset`.
   Each mode is also run on a 10-document corpus: that time is the fixed cost of starting a job.
   The token count of the manifest is checked against the baseline: baseline tokens (special tokens
   of the tokenizer's post-processor included, as the pipeline keeps them by default) plus one EOS
   per document that does not already end with EOS (the pipeline appends it).
   The common alternative, unless `--no-datasets`: `hf_datasets_baseline.py` (HF `datasets`
   `map(batched=True, num_proc=cores)` with the same tokenizer, concatenate-and-split packing at
   2048, shuffle, `to_parquet`) as a subprocess, wall-clock of the whole command too; printed with
   the tokens its packing drops and each mode's speed relative to it.
5. Resources. CPU seconds (user+sys of the command and the workers it reaped, from `wait4`), the
   largest sum of RSS over the command's process tree (sampled from /proc every 0.2 s) and the
   largest single process's peak RSS (its `VmHWM` in /proc, sampled too); shown as n/a where unavailable.
6. Drift: raw `encode_batch` is measured again after the pipeline modes and the `datasets` path, and
   each mode's `vs raw` is also printed against that second measurement and the mean of both.
7. CPU capacity, at start and end: N pure-Python loops in parallel against one alone. On a shared
   host this is often well below the core count and changes from minute to minute; when it does,
   the absolute numbers (and multi-core modes most) are unreliable: use `--repeat 3` (median run).

Reading the ratios: `vs raw` is pipeline tokens/s divided by raw `encode_batch` tokens/s (all
cores). 1.0 would mean the pipeline costs nothing beyond tokenizing; 0.25 means the whole job takes
four times as long as tokenizing alone. `vs raw, no startup` subtracts the mode's 10-document run
time first, so it shows the per-byte efficiency a large job would approach. Numbers from one run on
a shared machine are noisy by several percent; compare modes within one run.

Usage, from the repository root (with the project's virtualenv active):
  python benchmarks/bench_pipeline.py [--size-mb 48] [--tokenizer DIR] [--workdir DIR] [--repeat N]
                                      [--no-pack] [--no-datasets] [--modes default,one-thread,...]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import site
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Optional

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_WORKDIR = REPO_ROOT / "benchmarks" / "_work"
MISTRAL_DIR = REPO_ROOT.parent / "shared" / "tokenizers" / "mistral-7b-v0.1"
CORPUS_VERSION = 1
DOC_CAP_BYTES = 200_000
BASELINE_BATCH = 1000
TINY_DOCUMENTS = 10
SEQ_LENGTH = 2048
DEFAULT_SIZE_MB = 48
SKIP_DIRS = {"__pycache__", ".git"}
DOC_SUFFIXES = (".txt", ".rst", ".md", ".html", ".htm")
MODES = [  # (name, extra CLI flags, environment changes: None removes the variable)
    ("default", [], {"RAYON_NUM_THREADS": None}),
    ("in-process", ["--direct_num_workers=1"], {"RAYON_NUM_THREADS": None}),
    ("one-thread", ["--direct_num_workers=1"], {"RAYON_NUM_THREADS": "1"}),
    ("procs-only", ["--direct_num_workers=2"], {"RAYON_NUM_THREADS": "1"}),
    ("one-core", ["--direct_num_workers=1"], {"RAYON_NUM_THREADS": "1"}),
]

#: Modes whose command runs under a prefix: `one-core` is `one-thread` held to one core (`taskset`).
PREFIXES = {"one-core": ["taskset", "-c", "0"]}


def absolute_path(path: str) -> Path:
    """`--workdir`'s type in every benchmark: measured commands run in their log's directory
    (`run_measured`), so the configs and outputs under a relative work directory must be named from the root."""
    return Path(path).resolve()


# ---- corpus --------------------------------------------------------------------------------------


def walk_files(root: Path, suffixes: tuple[str, ...], skip: set[str] = frozenset()) -> Iterator[Path]:
    """Files under `root` ending with one of `suffixes`, in sorted path order (no symlinks)."""
    if not root.is_dir():
        return
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and d not in skip)
        for name in sorted(names):
            path = Path(directory) / name
            if name.lower().endswith(suffixes) and not path.is_symlink():
                yield path


def site_packages() -> list[Path]:
    paths = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()]
    unique: list[Path] = []
    for p in paths:
        path = Path(p).resolve()
        if path not in unique and path.is_dir():
            unique.append(path)
    return unique


def corpus_sources() -> list[Iterator[Path]]:
    """The three interleaved sources: stdlib code, site-packages code, documentation text."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "dist-packages"}

    def stdlib_code() -> Iterator[Path]:
        yield from walk_files(stdlib, (".py",), skip)

    def package_code() -> Iterator[Path]:
        for root in site_packages():
            yield from walk_files(root, (".py",))

    def documentation() -> Iterator[Path]:
        yield from walk_files(stdlib, DOC_SUFFIXES, skip)
        for root in site_packages():
            yield from walk_files(root, DOC_SUFFIXES)
        yield from walk_files(Path("/usr/share/doc"), DOC_SUFFIXES)

    return [stdlib_code(), package_code(), documentation()]


def read_document(path: Path) -> Optional[str]:
    """A file's text, capped at DOC_CAP_BYTES; None for unreadable, binary, non-UTF-8 or blank files."""
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if "\0" in text or not text.strip():
        return None
    if len(raw) > DOC_CAP_BYTES:
        text = raw[:DOC_CAP_BYTES].decode("utf-8", "ignore")
    return text


def gather_documents() -> Iterator[str]:
    """Documents from the sources, always from the one that has given the fewest bytes so far."""
    sources = corpus_sources()
    given = [0] * len(sources)
    while sources:
        i = min(range(len(sources)), key=given.__getitem__)
        for path in sources[i]:
            text = read_document(path)
            if text is not None:
                given[i] += len(text.encode("utf-8"))
                yield text
                break
        else:
            del sources[i], given[i]


def write_corpus(path: Path, target_bytes: int) -> dict[str, Any]:
    """Writes at least `target_bytes` of text as JSONL; repeats the material with a suffix if short."""
    material: list[str] = []
    documents = text_bytes = copies = 0
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for text in gather_documents():
            material.append(text)
            f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
            documents += 1
            text_bytes += len(text.encode("utf-8"))
            if text_bytes >= target_bytes:
                break
        while text_bytes < target_bytes and material:
            copies += 1
            for i, text in enumerate(material):
                text = recombine(text, material[(i + copies * 7919) % len(material)], copies)
                f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
                documents += 1
                text_bytes += len(text.encode("utf-8"))
                if text_bytes >= target_bytes:
                    break
    if not documents:
        tmp.unlink()
        raise SystemExit("bench: found no text files to build a corpus from")
    tmp.replace(path)
    return {"documents": documents, "text_bytes": text_bytes, "repeats": copies}


def recombine(a: str, b: str, copy: int) -> str:
    """A new document from two: their lines interleaved (`a`'s first), tagged with the copy number."""
    lines_a, lines_b = a.splitlines(keepends=True), b.splitlines(keepends=True)
    mixed = [line for pair in zip(lines_a, lines_b) for line in pair]
    rest = lines_a[len(lines_b):] or lines_b[len(lines_a):]
    return "".join(mixed + rest)[:DOC_CAP_BYTES] + f"\n# copy {copy}\n"


def ensure_corpus(workdir: Path, size_mb: float) -> tuple[Path, dict[str, Any]]:
    """The corpus for `size_mb`, built once and reused while its description matches."""
    path = workdir / f"corpus-{size_mb:g}mb.jsonl"
    meta_path = path.with_suffix(".meta.json")
    wanted = {"version": CORPUS_VERSION, "size_mb": size_mb, "doc_cap_bytes": DOC_CAP_BYTES, "generation": "recombined"}
    if path.is_file() and meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if {k: meta.get(k) for k in wanted} == wanted and meta.get("file_bytes") == path.stat().st_size:
            return path, {**meta, "reused": True}
    workdir.mkdir(parents=True, exist_ok=True)
    meta = {**wanted, **write_corpus(path, int(size_mb * 10**6)), "file_bytes": path.stat().st_size}
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    return path, {**meta, "reused": False}


def write_tiny_corpus(corpus: Path, workdir: Path) -> Path:
    tiny = workdir / "tiny.jsonl"
    with open(corpus, encoding="utf-8") as src, open(tiny, "w", encoding="utf-8") as dst:
        for _, line in zip(range(TINY_DOCUMENTS), src):
            dst.write(line)
    return tiny


def load_texts(corpus: Path) -> list[str]:
    with open(corpus, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


# ---- tokenizer and raw baseline ----------------------------------------------------------------


def resolve_tokenizer(arg: Optional[str]) -> Path:
    """The tokenizer directory (holding tokenizer.json) to benchmark."""
    if arg:
        path = Path(arg).expanduser().resolve()
        if path.is_file():
            path = path.parent
        if not (path / "tokenizer.json").is_file():
            raise SystemExit(f"bench: no tokenizer.json in '{arg}'")
        return path
    if (MISTRAL_DIR / "tokenizer.json").is_file():
        return MISTRAL_DIR.resolve()
    from easydata.tools.sample import ensure_sample

    return ensure_sample() / "tokenizer"


def eos_token_id(tokenizer_dir: Path) -> Optional[int]:
    """The EOS id the pipeline uses (its own loader decides, so the check follows the pipeline)."""
    from easydata.text.tokenizer import load_tokenizer

    return load_tokenizer(str(tokenizer_dir)).eos_token_id


def encode_all(tokenizer_dir: Path, texts: list[str], method: str = "encode_batch",
               eos: Optional[int] = None, engine: Optional[str] = None) -> dict[str, Any]:
    """Encodes `texts` in batches; times only the encode calls. `engine`: a fast tokenizer engine
    (`easydata.text.engines`, its flat-array call) instead of `tokenizers`' `method`.

    Returns seconds, tokens and, when `eos` is given, how many documents already end with it.
    """
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    if engine not in (None, "hf"):
        from easydata.text.engines import load_engine

        fast = load_engine(engine, tokenizer_dir / "tokenizer.json", tokenizer)
        seconds, tokens = 0.0, 0
        for start in range(0, len(texts), BASELINE_BATCH):
            began = time.perf_counter()
            _, lengths = fast.encode(texts[start:start + BASELINE_BATCH], True)
            seconds += time.perf_counter() - began
            tokens += int(lengths.sum())
        return {"seconds": seconds, "tokens": tokens, "ending_with_eos": 0}
    encode = getattr(tokenizer, method)
    seconds = 0.0
    tokens = ending_with_eos = 0
    for start in range(0, len(texts), BASELINE_BATCH):
        batch = texts[start:start + BASELINE_BATCH]
        began = time.perf_counter()
        encodings = encode(batch)
        seconds += time.perf_counter() - began
        if eos is None:  # the tokenizer's own rate: `len(encoding)` only, no Python list of ids
            tokens += sum(map(len, encodings))
            continue
        for e in encodings:
            ids = e.ids
            tokens += len(ids)
            ending_with_eos += bool(ids) and ids[-1] == eos
    return {"seconds": seconds, "tokens": tokens, "ending_with_eos": ending_with_eos}


def has_encode_batch_fast() -> bool:
    from tokenizers import Tokenizer

    return hasattr(Tokenizer, "encode_batch_fast")


def ceiling_method() -> str:
    """`tokenizers`' fastest batch call: `encode_batch_fast` (no character offsets) where it has one."""
    return "encode_batch_fast" if has_encode_batch_fast() else "encode_batch"


def encode_single_thread(tokenizer_dir: Path, corpus: Path, processes: int = 1, method: str = "encode_batch",
                         engine: Optional[str] = None) -> Optional[dict[str, Any]]:
    """`method` (or a fast `engine`) with RAYON_NUM_THREADS=1 in `processes` child processes at once (the
    pool size is fixed at start), each encoding every `processes`-th document once all have loaded the corpus.

    Returns the slowest child's encode seconds and the tokens of all.
    """
    cmd = [sys.executable, str(Path(__file__).resolve()), "--raw-json", "--tokenizer", str(tokenizer_dir),
           "--corpus", str(corpus), "--parts", str(processes), "--method", method, "--engine", engine or "hf"]
    env = {**os.environ, "RAYON_NUM_THREADS": "1"}
    children = [subprocess.Popen([*cmd, "--part", str(part)], env=env, cwd=REPO_ROOT, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for part in range(processes)]
    try:
        if all(child.stdout.readline().strip() == "ready" for child in children):
            for child in children:  # start encoding together
                child.stdin.write("go\n")
                child.stdin.flush()
        outputs = [child.communicate() for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    if any(child.returncode != 0 for child in children):
        print(f"  (single-thread baseline failed: {' '.join(err for _, err in outputs).strip()[-300:]})")
        return None
    results = [json.loads(out) for out, _ in outputs]
    return {"seconds": max(r["seconds"] for r in results), "tokens": sum(r["tokens"] for r in results)}


# ---- running and measuring a command -------------------------------------------------------------


class PeakSampler(threading.Thread):
    """Calls `measure()` every `interval` seconds until `stop()`; keeps the largest value in `peak`."""

    available = True

    def __init__(self, interval: float = 0.2):
        super().__init__(daemon=True)
        self.interval, self.peak = interval, 0
        self._stop_event = threading.Event()

    def measure(self) -> int:
        raise NotImplementedError

    def run(self) -> None:
        while self.available and not self._stop_event.is_set():
            self.peak = max(self.peak, self.measure())
            self._stop_event.wait(self.interval)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


class TreeRssSampler(PeakSampler):
    """Polls /proc for the summed RSS of a process and all its descendants, and for each one's own
    peak (`VmHWM`, the kernel's high-water mark); keeps the largest of each. Also the summed PSS
    (`smaps_rollup`: each page shared by N processes counted 1/N in each), the machine memory the tree
    takes: forked workers share their server's tokenizers and libraries, which RSS counts once per process.

    Not `wait4`'s `ru_maxrss`: on Linux a child's starts from this process's RSS at the fork and
    survives its exec, so it reported the benchmark's own memory (its copy of the corpus).

    The sampler shares the cores it measures, so it must cost little: RSS and `VmHWM` (`statm`, `status`)
    are cheap and read every `interval`, but `smaps_rollup` walks every page table (~50 ms per pass over
    a 1 GB job's 5 processes on 2 vCPUs; read every 0.2 s it took ~20 % of one core from the measured job,
    so every ratio to a ceiling measured without a sampler was that much pessimistic): PSS is read every
    `pss_interval` seconds.
    """

    def __init__(self, pid: int, interval: float = 0.2, pss_interval: float = 1.0):
        super().__init__(interval)
        self.pid, self.pss_interval = pid, pss_interval
        self.peak_single = 0
        self.peak_pss = 0
        self.available = Path("/proc/self/statm").is_file()
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._pss_read = float("-inf")  # when PSS was last read

    def _tree(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat", "rb") as f:
                        ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                children.setdefault(ppid, []).append(int(entry))
        tree, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(children.get(pid, []))
        return tree

    def measure(self) -> int:
        tree = self._tree()
        total = 0
        for pid in tree:
            try:
                with open(f"/proc/{pid}/statm", "rb") as f:
                    total += int(f.read().split()[1]) * self._page
                with open(f"/proc/{pid}/status", "rb") as f:
                    hwm = [line for line in f if line.startswith(b"VmHWM:")]
                if hwm:
                    self.peak_single = max(self.peak_single, int(hwm[0].split()[1]) * 1024)
            except (OSError, IndexError, ValueError):
                pass
        now = time.monotonic()
        if now - self._pss_read >= self.pss_interval:
            self._pss_read, pss = now, 0
            for pid in tree:
                try:
                    with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
                        pss += sum(int(line.split()[1]) * 1024 for line in f if line.startswith(b"Pss:"))
                except (OSError, IndexError, ValueError):
                    pass
            self.peak_pss = max(self.peak_pss, pss)
        return total


class StagingSampler(PeakSampler):
    """Polls the bytes of every file under an output's staging directories (`.easydata-tmp-*`: checkpoints,
    group files, sorted pieces, assembled shards before the commit); keeps the largest total."""

    def __init__(self, output_dir: Path, interval: float = 0.2):
        super().__init__(interval)
        self.output_dir = output_dir

    def measure(self) -> int:
        total = 0
        for staging in self.output_dir.glob(".easydata-tmp-*"):
            for folder, _, files in os.walk(staging):
                for name in files:
                    try:
                        total += os.stat(os.path.join(folder, name)).st_size
                    except OSError:  # moved or removed meanwhile
                        pass
        return total


def run_measured(cmd: list[str], env: dict[str, str], log: Path, staging_of: Optional[Path] = None) -> dict[str, Any]:
    """Runs `cmd`, returning wall seconds, exit code, peak memory and (given the output directory
    `staging_of`) the peak bytes of its staging directories; output goes to `log`.

    The command runs in the log's directory, not the repository: a job's worker processes of code older
    than `beam_pipelines.local.local_worker.python_command` start with `python -m`, which puts the working
    directory first on `sys.path`, so code measured from another tree through `PYTHONPATH` ran the
    repository's workers when started from it."""
    with open(log, "wb") as out:
        began = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=log.parent, stdout=out, stderr=subprocess.STDOUT)
        sampler = TreeRssSampler(proc.pid)
        sampler.start()
        staging = StagingSampler(staging_of) if staging_of is not None else None
        if staging is not None:
            staging.start()
        cpu: Optional[float] = None
        if hasattr(os, "wait4"):
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            cpu = usage.ru_utime + usage.ru_stime
        else:
            proc.wait()
        seconds = time.perf_counter() - began
        sampler.stop()
        if staging is not None:
            staging.stop()
    return {"seconds": seconds, "returncode": proc.returncode, "cpu_seconds": cpu,
            "peak_tree_rss": sampler.peak if sampler.available else None,
            "max_single_rss": sampler.peak_single if sampler.available else None,
            "peak_tree_pss": sampler.peak_pss if sampler.available and sampler.peak_pss else None,
            "peak_staging_bytes": staging.peak if staging is not None else None}


def easydata_command() -> list[str]:
    beside = Path(sys.executable).parent / "easydata"
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("easydata")
    return [found] if found else [sys.executable, "-m", "easydata"]


def write_config(path: Path, corpus: Path, tokenizer_dir: Path, output_dir: Path, pack: bool = True) -> Path:
    config = {
        "seed": 42,
        "default_tokenizer": str(tokenizer_dir),
        "datasets": [{"name": "corpus", "data_files": str(corpus), "type": "jsonl"}],
        "save": {"output_dir": str(output_dir), "format": "parquet", "compression": "zstd", "overwrite": True},
    }
    if pack:
        config["pack"] = {"enabled": True, "seq_length": SEQ_LENGTH, "strategy": "first_fit"}
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def mode_env(changes: dict[str, Optional[str]]) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def env_prefix(changes: dict[str, Optional[str]]) -> str:
    parts = [f"{k}={v}" for k, v in changes.items() if v is not None]
    unset = [k for k, v in changes.items() if v is None and k in os.environ]
    return " ".join([*(f"env -u {k}" for k in unset), *parts])


def run_pipeline(label: str, config: Path, flags: list[str], env_changes: dict[str, Optional[str]],
                 workdir: Path, output_dir: Path, prefix: Optional[list[str]] = None) -> dict[str, Any]:
    """One `easydata run` (under `prefix`, e.g. `taskset -c 0`); adds the manifest's counts when it succeeded."""
    cmd = [*(prefix or []), *easydata_command(), "run", str(config), "--quiet", *flags]
    log = workdir / f"log-{label}.txt"
    result = run_measured(cmd, mode_env(env_changes), log, staging_of=output_dir)
    env_part = env_prefix(env_changes)
    result["command"] = (env_part + " " if env_part else "") + shlex.join(cmd)
    result["log"] = log
    manifest_path = output_dir / "manifest.json"
    if result["returncode"] == 0 and manifest_path.is_file():
        manifest = json.loads(manifest_path.read_text())
        result.update(tokens=manifest["totals"]["tokens"], documents=manifest["documents_written"],
                      rejected=manifest["documents_rejected"], shards=manifest["totals"]["shards"],
                      internal_seconds=manifest.get("run", {}).get("elapsed_seconds"),
                      shuffle=manifest.get("shuffle"))
    return result


# ---- CPU capacity --------------------------------------------------------------------------------

_SPIN = "import time\nt = time.perf_counter()\nx = 0\nfor i in range({n}): x += i\nprint(time.perf_counter() - t)"


def _spin(copies: int, n: int = 8_000_000) -> list[float]:
    """Runs `copies` pure-Python loops in parallel child processes; their own timings (no start-up)."""
    procs = [subprocess.Popen([sys.executable, "-c", _SPIN.format(n=n)], stdout=subprocess.PIPE, text=True)
             for _ in range(copies)]
    return [float(p.communicate()[0]) for p in procs]


def cpu_capacity() -> float:
    """How many cores' worth of CPU this machine delivers right now (shared hosts deliver less)."""
    cores = os.cpu_count() or 1
    before = _spin(1)[0]
    together = _spin(cores)
    alone = (before + _spin(1)[0]) / 2  # one loop alone, before and after: the host may drift meanwhile
    return sum(alone / t for t in together)


# ---- report --------------------------------------------------------------------------------------


def fmt_bytes(n: Optional[int]) -> str:
    return "n/a" if n is None else f"{n / 2**20:,.0f} MiB"


def failure_tail(result: dict[str, Any], lines: int = 15) -> str:
    text = Path(result["log"]).read_text(errors="replace").splitlines()
    return "\n".join("      " + line for line in text[-lines:])


def print_table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths)))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))


def print_baselines(baselines: list[tuple[str, Optional[dict[str, Any]]]], text_bytes: int) -> None:
    print("\nRaw tokenizer (texts in memory, batches of 1,000 documents, only the encode calls timed)")
    rows = []
    for name, r in baselines:
        if r is not None:
            rows.append([name, f"{r['seconds']:.2f}", f"{text_bytes / 1e6 / r['seconds']:.2f}",
                         f"{r['tokens'] / r['seconds']:,.0f}", f"{r['tokens']:,}"])
    print_table(rows, ["baseline", "seconds", "MB/s", "tokens/s", "tokens"])


def ok(result: dict[str, Any]) -> bool:
    return result["returncode"] == 0 and "tokens" in result


def print_pipeline_results(results: list[tuple[str, dict, dict]], raw_tps: float, fast_tps: Optional[float],
                           text_bytes: int) -> None:
    print("\nPipeline (wall clock of the whole `easydata run` command)")
    rows = []
    for name, full, tiny in results:
        if not ok(full):
            rows.append([name, f"{full['seconds']:.1f}", "FAILED", *[""] * 7])
            continue
        tps = full["tokens"] / full["seconds"]
        net = full["seconds"] - tiny["seconds"] if ok(tiny) else None
        net_ratio = f"{full['tokens'] / net / raw_tps:.3f}" if net and net > 0 else "n/a"
        rows.append([name, f"{full['seconds']:.1f}", f"{full['internal_seconds'] or 0:.1f}",
                     f"{tiny['seconds']:.1f}" if ok(tiny) else "FAILED", f"{text_bytes / 1e6 / full['seconds']:.2f}",
                     f"{tps:,.0f}", f"{tps / raw_tps:.3f}", net_ratio,
                     f"{tps / fast_tps:.3f}" if fast_tps else "n/a"])
    print_table(rows, ["mode", "seconds", "in-run s", "10-doc s", "MB/s", "tokens/s", "vs raw",
                       "vs raw, no startup", "vs fast"])
    print("  seconds: whole command. in-run s: the manifest's elapsed_seconds (planning to commit, without"
          "\n  interpreter start-up and Beam import). 10-doc s: the same command on a 10-document corpus, the"
          "\n  fixed cost of a job. vs raw: tokens/s over raw encode_batch tokens/s (all threads). vs fast:"
          "\n  over encode_batch_fast tokens/s, the call the pipeline makes (no offsets: faster than encode_batch).")


def print_drift(results: list[tuple[str, dict, dict]], raw_before: dict[str, Any],
                raw_after: dict[str, Any]) -> None:
    """Raw `encode_batch` measured before the pipeline modes and again after them (and the `datasets`
    path): how far the shared host's speed moved meanwhile, and each mode's `vs raw` against both."""
    before, after = raw_before["seconds"], raw_after["seconds"]
    print(f"  host drift: raw encode_batch took {before:.2f} s before the pipeline runs and {after:.2f} s after"
          f" them ({after / before - 1:+.0%})")
    for name, full, _ in results:
        if ok(full):
            tps = full["tokens"] / full["seconds"]
            ratios = [tps / (raw["tokens"] / raw["seconds"]) for raw in (raw_before, raw_after)]
            print(f"  {name:<11} vs raw before {ratios[0]:.3f}, after {ratios[1]:.3f}, mean {sum(ratios) / 2:.3f}")


def print_scaling(results: list[tuple[str, dict, dict]],
                  baselines: list[tuple[str, Optional[dict[str, Any]]]]) -> None:
    """1 -> 2 workers with one tokenizer thread each: `one-thread` (and `one-core`, the same held to one
    core) time over `procs-only` time, also without each mode's fixed cost (its 10-document run); and
    the raw tokenizer's own 1 -> 2 process scaling in this run, the machine's ceiling for it."""
    by_name = {name: (full, tiny) for name, full, tiny in results}
    raw = dict(baselines)
    one_raw, two_raw = raw.get(SINGLE), raw.get(CEILING)
    ceiling = one_raw["seconds"] / two_raw["seconds"] if one_raw and two_raw else None
    if ceiling:
        print(f"\nScaling ceiling, raw {ceiling_method()} with one thread -> the same in two processes at once:"
              f" {one_raw['seconds']:.1f} s -> {two_raw['seconds']:.1f} s, {ceiling:.2f}x")
    two, two_tiny = by_name.get("procs-only", (None, None))
    for one_name, what in (("one-thread", "1 -> 2 workers (one tokenizer thread each)"),
                           ("one-core", "1 core -> 2 cores (one-thread held to one core vs procs-only)")):
        one, one_tiny = by_name.get(one_name, (None, None))
        if not (one and two and ok(one) and ok(two)):
            continue
        scaling = one["seconds"] / two["seconds"]
        print(f"\nScaling, {what}: {one['seconds']:.1f} s -> {two['seconds']:.1f} s,"
              f" {scaling:.2f}x (2.00x would be linear" + (f"; {scaling / ceiling:.2f} of the raw ceiling)"
                                                           if ceiling else ")"))
        if ok(one_tiny) and ok(two_tiny):
            one_net, two_net = one["seconds"] - one_tiny["seconds"], two["seconds"] - two_tiny["seconds"]
            if one_net > 0 and two_net > 0:
                print(f"  without start-up (each mode's 10-document run subtracted): {one_net:.1f} s -> {two_net:.1f} s,"
                      f" {one_net / two_net:.2f}x" + (f" ({one_net / two_net / ceiling:.2f} of the ceiling)"
                                                      if ceiling else ""))


def print_ceiling(results: list[tuple[str, dict, dict]], ceiling: Optional[dict[str, Any]], text_bytes: int) -> None:
    """Each mode against the tokenizer's ceiling measured in this run, per vCPU, and the shuffled bytes
    per token its manifest reports: the `r` and `s` of docs/dataflow.md's cost model."""
    cores = usable_cores()
    if ceiling is None:
        print("\n(no ceiling: the single-thread baseline failed)")
        return
    print(f"\nAgainst the tokenizer's ceiling ({CEILING}: {ceiling['seconds']:.2f} s,"
          f" {text_bytes / 1e6 / ceiling['seconds'] / cores:.3f} MB/s per vCPU)")
    rows = []
    for name, full, tiny in results:
        if not ok(full):
            continue
        net = full["seconds"] - tiny["seconds"] if ok(tiny) else None
        shuffle = full.get("shuffle") or {}
        rows.append([name, f"{text_bytes / 1e6 / full['seconds'] / cores:.3f}",
                     f"{ceiling['seconds'] / full['seconds']:.3f}",
                     f"{ceiling['seconds'] / net:.3f}" if net and net > 0 else "n/a",
                     f"{shuffle['bytes_per_token']:.2f}" if shuffle else "n/a"])
    print_table(rows, ["mode", "MB/s per vCPU", "vs ceiling", "vs ceiling, no startup", "shuffle B/token"])
    print("  vs ceiling: the ceiling's seconds over the whole command's, for the same texts (the ceiling times"
          "\n  only its encode calls, on texts in memory)."
          "\n  shuffle B/token: the manifest's `shuffle.bytes_per_token`, token data through the group-by as"
          "\n  its coder encodes it (what Dataflow Shuffle would carry).")


def print_resources(results: list[tuple[str, dict, dict]]) -> None:
    print("\nResources (CPU: user+sys of the command and the worker processes it reaped)")
    rows = []
    for name, full, tiny in results:
        cpu = full.get("cpu_seconds")
        rows.append([name, "n/a" if cpu is None else f"{cpu:.1f}",
                     "n/a" if cpu is None else f"{cpu / full['seconds']:.2f}",
                     fmt_bytes(full["peak_tree_rss"]), fmt_bytes(full["max_single_rss"]),
                     fmt_bytes(tiny["peak_tree_rss"]), fmt_bytes(full.get("peak_staging_bytes")),
                     f"{full['peak_staging_bytes'] / full['tokens']:.1f}" if full.get("peak_staging_bytes")
                     and full.get("tokens") else "n/a"])
    print_table(rows, ["mode", "CPU s", "cores busy", "peak RSS, all processes", "largest process",
                       "10-doc peak RSS", "peak staging", "staging B/token"])
    print("  peak staging: the largest total of the output's staging files seen (sampled every 0.2 s): the"
          "\n  disk a run needs beside its output while it lasts.")


def print_token_check(results: list[tuple[str, dict, dict]], expected: int) -> None:
    print("\nToken count check (manifest totals vs raw encode_batch + appended EOS)")
    for name, full, _ in results:
        if ok(full):
            diff = full["tokens"] - expected
            verdict = "match" if diff == 0 else f"MISMATCH ({diff:+,} tokens)"
            print(f"  {name:<11} {full['tokens']:>13,} tokens, {full['documents']:,} documents written,"
                  f" {full['rejected']:,} rejected, {full['shards']} shard(s): {verdict}")


def print_failures(results: list[tuple[str, dict, dict]]) -> None:
    for name, full, tiny in results:
        for kind, r in (("full", full), ("10-doc", tiny)):
            if not ok(r):
                print(f"\n!! {name} ({kind}) exited with {r['returncode']}; last lines of {r['log']}:")
                print(failure_tail(r))


# ---- main ----------------------------------------------------------------------------------------


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=DEFAULT_SIZE_MB,
                        help=f"corpus size in MB of text (default {DEFAULT_SIZE_MB})")
    parser.add_argument("--no-pack", action="store_true", help="write unpacked rows (default: first_fit at 2048)")
    parser.add_argument("--no-datasets", action="store_true", help="skip the HF datasets path")
    parser.add_argument("--tokenizer", help="tokenizer dir with tokenizer.json (default: Mistral, else sample)")
    parser.add_argument("--workdir", type=absolute_path, default=DEFAULT_WORKDIR, help="corpus, configs, outputs, logs")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every measurement N times and report the median run (default 1)")
    parser.add_argument("--modes", default=",".join(name for name, _, _ in MODES),
                        help="pipeline modes to run, comma-separated (default: all)")
    parser.add_argument("--engines", action="store_true",
                        help="instead: the tokenizer engines benchmark (bench_engines.py: Mistral and Qwen3,"
                             " engine: hf against the default, both ceilings, byte identity); the options"
                             " after --engines are bench_engines.py's")
    parser.add_argument("--profile", action="store_true",
                        help="also run the default mode once under py-spy and print CPU seconds per stage per GB"
                             " (stage_profile.py; needs `pip install py-spy`)")
    parser.add_argument("--raw-json", action="store_true", help=argparse.SUPPRESS)  # child: baseline only
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--part", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--parts", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--method", default="encode_batch", help=argparse.SUPPRESS)
    parser.add_argument("--engine", default="hf", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def raw_json_child(args: argparse.Namespace) -> int:
    """A baseline child: loads its share of the corpus, says `ready`, waits for `go`, prints the result."""
    texts = load_texts(Path(args.corpus))[args.part::args.parts]
    print("ready", flush=True)
    sys.stdin.readline()
    print(json.dumps(encode_all(Path(args.tokenizer), texts, args.method, engine=args.engine)))
    return 0


def print_environment(tokenizer_dir: Path, corpus: Path, meta: dict[str, Any], workdir: Path,
                      capacity: float) -> None:
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "?"

    # Versions from package metadata: importing apache_beam here would print its GCP warnings.
    print(f"easydata pipeline benchmark  ({os.cpu_count()} cores, Python {sys.version.split()[0]},"
          f" tokenizers {installed('tokenizers')}, apache-beam {installed('apache-beam')},"
          f" pyarrow {installed('pyarrow')})")
    print(f"CPU capacity at start: {capacity:.2f} cores' worth (parallel pure-Python loops vs one alone)")
    for var in ("RAYON_NUM_THREADS", "TOKENIZERS_PARALLELISM"):
        if var in os.environ:
            print(f"  note: {var}={os.environ[var]} is set in this environment")
    print(f"tokenizer: {tokenizer_dir}")
    state = "reused" if meta["reused"] else "built"
    print(f"corpus:    {corpus} ({state}): {meta['documents']:,} documents, {meta['text_bytes'] / 1e6:.1f} MB of"
          f" text, {meta['file_bytes'] / 1e6:.1f} MB JSONL, material recombined {meta['repeats']} time(s)")
    print(f"workdir:   {workdir}")


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median time (the lower middle one for an even count); a failure wins."""
    failed = [r for r in runs if r.get("returncode", 0) != 0]
    return failed[0] if failed else sorted(runs, key=lambda r: r["seconds"])[(len(runs) - 1) // 2]


def usable_cores() -> int:
    """Cores this process may run on (its affinity), as the pipeline's local runner counts them."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


#: The tokenizer's ceiling: one single-threaded process per core of its fastest call, `len(encoding)` only.
CEILING = f"{ceiling_method()}, 1 thread x {usable_cores()} processes (ceiling)"
SINGLE = f"{ceiling_method()}, 1 thread"


def measure_baselines(tokenizer_dir: Path, corpus: Path, texts: list[str], eos: Optional[int],
                      repeat: int, single_thread: bool = True) -> list[tuple[str, Optional[dict[str, Any]]]]:
    """`encode_batch` on every core, `encode_batch_fast`, and (with `single_thread`) one thread."""
    cores = os.cpu_count()
    raw = median_run([encode_all(tokenizer_dir, texts, "encode_batch", eos) for _ in range(repeat)])
    fast = median_run([encode_all(tokenizer_dir, texts, "encode_batch_fast") for _ in range(repeat)]) \
        if has_encode_batch_fast() else None
    singles, ceilings = [], []
    for _ in range(repeat):  # alternated: the host's speed drifts
        if single_thread:
            singles.append(encode_single_thread(tokenizer_dir, corpus, method=ceiling_method()))
        ceilings.append(encode_single_thread(tokenizer_dir, corpus, processes=usable_cores(), method=ceiling_method()))
    singles, ceilings = [r for r in singles if r], [r for r in ceilings if r]
    return [(f"encode_batch, {cores} threads", raw), (f"encode_batch_fast, {cores} threads", fast),
            (SINGLE, median_run(singles) if singles else None),
            (CEILING, median_run(ceilings) if ceilings else None)]


def measure_datasets_path(workdir: Path, corpus: Path, tokenizer_dir: Path, repeat: int) -> dict[str, Any]:
    """The HF `datasets` alternative (`hf_datasets_baseline.py`) as a subprocess, measured like a mode."""
    out = workdir / "out-hf-datasets"
    cmd = [sys.executable, str(Path(__file__).resolve().parent / "hf_datasets_baseline.py"), str(corpus),
           str(tokenizer_dir), str(out), "--seq-length", str(SEQ_LENGTH), "--num-proc", str(os.cpu_count() or 1)]
    runs = []
    for _ in range(repeat):
        result = run_measured(cmd, dict(os.environ), workdir / "log-hf-datasets.txt")
        result["command"], result["log"] = shlex.join(cmd), workdir / "log-hf-datasets.txt"
        if result["returncode"] == 0:
            result.update(json.loads(Path(result["log"]).read_text().strip().splitlines()[-1]))
        runs.append(result)
    result = median_run(runs)
    print(f"  ran HF datasets path: {result['seconds']:.1f}s", flush=True)
    return result


def print_datasets_comparison(results: list[tuple[str, dict, dict]], hf: dict[str, Any], expected: int) -> None:
    print(f"\nAgainst the HF `datasets` path (map(batched, num_proc={os.cpu_count()}) + concatenate-and-split packing"
          f" at {SEQ_LENGTH} + shuffle + to_parquet), whole command each")
    if hf["returncode"] != 0:
        print(f"  HF datasets path FAILED; last lines of {hf['log']}:\n{failure_tail(hf)}")
        return
    dropped = expected - hf["tokens"]
    print(f"  HF datasets path: {hf['seconds']:.1f} s, peak RSS {fmt_bytes(hf['peak_tree_rss'])}, {hf['rows']:,} rows,"
          f" {hf['tokens']:,} tokens written: {dropped:,} of {expected:,} tokens dropped ({100 * dropped / expected:.2f} %)"
          " by concatenate-and-split")
    for name, full, _ in results:
        if ok(full):
            print(f"  {name:<11} {full['seconds']:.1f} s: {hf['seconds'] / full['seconds']:.2f}x the HF datasets path's"
                  " speed")


def measure_modes(workdir: Path, corpus: Path, tokenizer_dir: Path, repeat: int, pack: bool = True,
                  modes: Optional[list[str]] = None) -> list[tuple[str, dict, dict]]:
    tiny_corpus = write_tiny_corpus(corpus, workdir)
    full_config = write_config(workdir / "config-full.json", corpus, tokenizer_dir, workdir / "out-full", pack)
    tiny_config = write_config(workdir / "config-tiny.json", tiny_corpus, tokenizer_dir, workdir / "out-tiny", pack)
    run_pipeline("warmup", tiny_config, [], MODES[0][2], workdir, workdir / "out-tiny")  # page cache, .pyc
    results = []
    for name, flags, env_changes in MODES:
        if modes is not None and name not in modes:
            continue
        prefix = PREFIXES.get(name)
        if prefix and not shutil.which(prefix[0]):
            print(f"  skipped {name}: needs {prefix[0]}", flush=True)
            continue
        tiny = median_run([run_pipeline(f"{name}-tiny", tiny_config, flags, env_changes, workdir,
                                        workdir / "out-tiny", prefix) for _ in range(repeat)])
        runs = [run_pipeline(name, full_config, flags, env_changes, workdir, workdir / "out-full", prefix)
                for _ in range(repeat)]
        full = median_run(runs)
        results.append((name, full, tiny))
        seconds = ", ".join(f"{r['seconds']:.1f}" for r in runs)
        spread = f" (runs: {seconds} s)" if repeat > 1 else ""
        print(f"  ran {name}: {full['seconds']:.1f}s{spread} (10-doc: {tiny['seconds']:.1f}s)", flush=True)
    return results


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--engines" in argv:  # the engines benchmark shares this module's corpus, ceilings and runs
        import bench_engines

        return bench_engines.main([a for a in argv if a != "--engines"])
    args = parse_args(argv)
    if args.raw_json:
        return raw_json_child(args)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = sorted(set(modes) - {name for name, _, _ in MODES})
    if unknown:
        print(f"bench_pipeline: unknown mode(s) {', '.join(unknown)}; choose from"
              f" {', '.join(name for name, _, _ in MODES)}", file=sys.stderr)
        return 2
    repeat = max(1, args.repeat)
    workdir = args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    tokenizer_dir = resolve_tokenizer(args.tokenizer)
    corpus, meta = ensure_corpus(workdir, args.size_mb)
    print_environment(tokenizer_dir, corpus, meta, workdir, cpu_capacity())

    texts = load_texts(corpus)
    text_bytes = sum(len(t.encode("utf-8")) for t in texts)
    eos = eos_token_id(tokenizer_dir)
    baselines = measure_baselines(tokenizer_dir, corpus, texts, eos, repeat,
                                  single_thread=bool({"one-thread", "procs-only", "one-core"} & set(modes)))
    print_baselines(baselines, text_bytes)
    raw = baselines[0][1]
    appended = len(texts) - raw["ending_with_eos"]
    expected = raw["tokens"] + appended
    print(f"  expected pipeline tokens: {raw['tokens']:,} + {appended:,} EOS = {expected:,}"
          f" (EOS id {eos}; {raw['ending_with_eos']} documents already end with it)", flush=True)
    del texts

    results = measure_modes(workdir, corpus, tokenizer_dir, repeat, pack=not args.no_pack, modes=modes)
    hf = None if args.no_datasets else measure_datasets_path(workdir, corpus, tokenizer_dir, repeat)
    texts = load_texts(corpus)  # the host's speed drifts: the raw baseline again, after the pipeline runs
    raw_after = median_run([encode_all(tokenizer_dir, texts, "encode_batch", eos) for _ in range(repeat)])
    del texts
    fast = baselines[1][1]
    print_pipeline_results(results, raw["tokens"] / raw["seconds"],
                           fast["tokens"] / fast["seconds"] if fast else None, text_bytes)
    print_drift(results, raw, raw_after)
    print_ceiling(results, dict(baselines).get(CEILING), text_bytes)
    print_resources(results)
    print_scaling(results, baselines)
    print_token_check(results, expected)
    if hf is not None:
        print_datasets_comparison(results, hf, expected)
    print(f"\nCPU capacity at end: {cpu_capacity():.2f} cores' worth"
          + (f" (median of {repeat} runs per measurement)" if repeat > 1 else " (one run per measurement)"))
    print("\nCommands (run from the repository root)")
    for name, full, tiny in results:
        print(f"  {name}:\n    {full['command']}\n    {tiny['command']}")
    print_failures(results)
    if args.profile:
        profile_default_mode(workdir, corpus, tokenizer_dir, pack=not args.no_pack, input_bytes=meta["file_bytes"])
    return 0


def profile_default_mode(workdir: Path, corpus: Path, tokenizer_dir: Path, *, pack: bool, input_bytes: int) -> None:
    """One more default-mode run, under py-spy: its CPU by stage (`stage_profile`), scaled to the CPU seconds
    the run's processes used (sampling counts a thread waiting for a core as running)."""
    import resource

    import stage_profile

    if not stage_profile.available():
        print("\n--profile: py-spy is not installed (pip install py-spy); no profile")
        return
    config = write_config(workdir / "config-profile.json", corpus, tokenizer_dir, workdir / "out-profile", pack)
    cmd = [*easydata_command(), "run", str(config), "--quiet"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    raw = stage_profile.profile_run(cmd, mode_env(MODES[0][2]), workdir / "profile.txt", workdir / "log-profile.txt")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if raw is None:
        print(f"\n--profile: the profiled run failed; see {workdir / 'log-profile.txt'}")
        return
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    manifest = json.loads((workdir / "out-profile" / "manifest.json").read_text())
    stage_profile.print_profile(stage_profile.stage_seconds(raw), input_bytes, manifest["totals"]["tokens"],
                                cpu_seconds=cpu)
    print(f"  command: py-spy record --subprocesses --rate {stage_profile.RATE} --format raw -o"
          f" {workdir / 'profile.txt'} -- {shlex.join(cmd)}")


if __name__ == "__main__":
    sys.exit(main())
