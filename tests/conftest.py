"""Shared fixtures: small tokenizers trained on the fly, corpus writers, the real Mistral tokenizer.

Nothing here touches the network. The session tokenizer is a byte-level BPE trained in seconds on
generated English-like text; `mistral_tokenizer_dir` is the production Mistral tokenizer committed in
`tests/data/tokenizers` (gzipped; unpacked once per session), so a fresh clone runs every test.
`write_synthetic_output` builds a finished output (shards + manifest) without running a pipeline;
`memory_fs` gives a test an empty fsspec `memory://` filesystem.
"""

from __future__ import annotations

import os

# JAX tests run on 8 simulated CPU devices; must be set before JAX first initialises.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
# Tests never touch the network: the Hugging Face Hub is read from (test-built) caches only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import contextlib
import json
import random
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

import pyarrow as pa
import pytest

from easydata.text.tokenizer_training import train_bpe_tokenizer

REPO_ROOT = Path(__file__).resolve().parents[1]
TEST_TOKENIZERS = REPO_ROOT / "tests" / "data" / "tokenizers"

_WORDS = ("the model reads tokens from shards and packs documents into rows while the reader shuffles"
          " batches across hosts deterministic seed epoch resume gradient loss mask segment position"
          " python code function return value data pipeline beam worker bundle split file json parquet"
          " arrow café naïve 東京 數據 emoji 🙂 tab\tnewline").split(" ")


def make_texts(n: int, seed: int = 0, min_words: int = 1, max_words: int = 60) -> list[str]:
    """Deterministic English-like documents of varied length (with some non-ASCII)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(min_words, max_words))) for _ in range(n)]


def corrupt_row_group(path: Path, group: int) -> None:
    """Overwrites the pages of the first column of Parquet row group `group` with 0xff bytes."""
    import pyarrow.parquet as pq

    column = pq.ParquetFile(path).metadata.row_group(group).column(0)
    data = bytearray(path.read_bytes())
    start = column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
    data[start:start + column.total_compressed_size] = b"\xff" * column.total_compressed_size
    path.write_bytes(bytes(data))


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE (vocab 512, <s>/</s>/<pad>) trained on generated text; shared by the session."""
    out = tmp_path_factory.mktemp("tokenizer")
    return train_bpe_tokenizer(make_texts(2000, seed=1), out, vocab_size=512)


def _unpacked_tokenizer(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A real tokenizer of tests/data/tokenizers (`tokenizer.json` gzipped), unpacked into a session directory."""
    import gzip
    import shutil

    source = TEST_TOKENIZERS / name
    out = tmp_path_factory.mktemp(name)
    with gzip.open(source / "tokenizer.json.gz", "rb") as packed, open(out / "tokenizer.json", "wb") as unpacked:
        shutil.copyfileobj(packed, unpacked)
    shutil.copy(source / "tokenizer_config.json", out / "tokenizer_config.json")
    return out


@pytest.fixture(scope="session")
def mistral_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real Mistral-7B v0.1 tokenizer (SentencePiece BPE, `Metaspace`), unpacked once per session."""
    return _unpacked_tokenizer(tmp_path_factory, "mistral-7b-v0.1")


@pytest.fixture(scope="session")
def qwen3_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real Qwen3 tokenizer (byte-level BPE, NFC, 151,669 tokens), unpacked once per session."""
    return _unpacked_tokenizer(tmp_path_factory, "qwen3")


# ---- synthetic outputs (for validate / inspect tests) ---------------------------------------------

# The start of a `python -c` script that runs as where pandas is not installed (it is not a dependency, and
# pyarrow gives some values only through it): importing pandas fails, as it would there.
WITHOUT_PANDAS = """
import json, sys
class NoPandas:
    def find_spec(self, name, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError("No module named 'pandas'")
sys.meta_path.insert(0, NoPandas())
"""

SYNTHETIC_TOKENIZER = {"name_or_path": "synthetic-tokenizer", "content_hash": "sha256:00", "vocab_size": 512,
                       "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}


def write_synthetic_output(output_dir: str, datasets: dict[str, list[list[dict[str, Any]]]], schema: pa.Schema, *,
                           fmt: str = "parquet", compression: str = "none", seq_length: Optional[int] = None,
                           tokenizer: Optional[dict[str, Any]] = None, row_group_size: int = 2) -> dict[str, Any]:
    """Writes shards (one list of rows each) and a manifest as a finished run would; returns the manifest.

    `schema` is the Arrow schema of every shard; `seq_length` marks the output as packed.
    """
    from easydata.io.filesystems import join
    from easydata.io.formats import ShardWriter, TOKEN_COLUMNS, shard_file_name
    from easydata.run.manifest import build_manifest, write_manifest

    infos: dict[str, dict[str, Any]] = {}
    for name, shards in datasets.items():
        entries, padding = [], 0
        for index, rows in enumerate(shards):
            rel = f"{name}/{shard_file_name(index, len(shards), fmt, compression)}"
            if fmt == "bin":  # a token stream and its index (`easydata.io.token_files`)
                from easydata.io.token_files import BinShardWriter

                writer: Any = BinShardWriter(join(output_dir, rel), schema, "uint32")
            else:
                writer = ShardWriter(join(output_dir, rel), fmt, schema, compression=compression,
                                     row_group_size=row_group_size)
            for row in rows:  # one row per write: shards end up with several row groups
                writer.write(pa.Table.from_pylist([row], schema=schema))
            writer.close()
            # Tokens are real tokens: packed rows' padding (segment id 0) counts as padding_tokens.
            tokens = sum(len(r["input_ids"]) if "segment_ids" not in r else sum(s != 0 for s in r["segment_ids"])
                         for r in rows)
            shard_padding = sum(len(r["input_ids"]) for r in rows) - tokens
            entries.append({"path": rel, "rows": len(rows), "tokens": tokens, "padding_tokens": shard_padding})
            padding += shard_padding
        written = sum(len(rows) for rows in shards)
        infos[name] = {"shards": entries, "documents_in": written + 1, "documents_written": written,
                       "documents_rejected": 1, "padding_tokens": padding}
    manifest_schema = {"columns": {f.name: str(f.type) for f in schema},
                       "token_columns": [c for c in TOKEN_COLUMNS if c in schema.names],
                       "packed": seq_length is not None, "seq_length": seq_length}
    manifest = build_manifest(config={"save": {"output_dir": output_dir}}, fingerprint="fp", schema=manifest_schema,
                              tokenizer=dict(tokenizer or SYNTHETIC_TOKENIZER), datasets=infos, output_format=fmt,
                              compression=compression, run={"run_id": "synthetic001"})
    write_manifest(output_dir, manifest)
    return manifest


@pytest.fixture
def memory_fs() -> Iterator[Any]:
    """fsspec's process-wide `memory://` filesystem, emptied before and after the test."""
    import fsspec

    fs = fsspec.filesystem("memory")

    def clear() -> None:
        fs.store.clear()
        fs.pseudo_dirs.clear()
        fs.pseudo_dirs.append("")

    clear()
    yield fs
    clear()


CHAT_SPECIAL_TOKENS = ("<s>", "</s>", "<pad>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>",
                       "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")


@pytest.fixture(scope="session")
def chat_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE with ChatML and Llama-3 special tokens (BOS <s>, EOS </s>, PAD <pad>)."""
    out = tmp_path_factory.mktemp("chat-tokenizer")
    return train_bpe_tokenizer(make_texts(2000, seed=2), out, vocab_size=600, special_tokens=CHAT_SPECIAL_TOKENS)


def trained_runs(ids: Any, mask: Any) -> list[list[int]]:
    """The maximal runs of consecutive token ids whose loss mask is 1."""
    runs, current = [], []
    for token, trained in zip(list(ids), list(mask)):
        if trained:
            current.append(int(token))
        elif current:
            runs.append(current)
            current = []
    return runs + ([current] if current else [])


def pip_site(*requirements: str, no_deps: bool = False) -> Path:
    """A directory holding `requirements` installed with `pip --target` (for packages that must not
    enter the test environment itself), installed once per machine and reused; a partial install is
    never taken for a whole one."""
    root = Path(os.environ.get("EASYDATA_TEST_VENVS", Path.home() / ".cache" / "easydata-test-venvs"))
    name = re.sub(r"[^A-Za-z0-9.]+", "-", "+".join(requirements))
    target = root / name
    if not (target / ".complete").is_file():
        staging = root / f"{name}.partial-{os.getpid()}"
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        *(["--no-deps"] if no_deps else []), "--target", str(staging), *requirements], check=True)
        (staging / ".complete").write_text("\n".join(requirements))
        if not (target / ".complete").is_file():
            staging.rename(target)
    return target


def easydata_with_limits(*args: str, address_space: Optional[int] = None, file_size: Optional[int] = None) -> list[str]:
    """The argv of `python -m easydata ARGS` under resource limits set by the child itself (not a
    `preexec_fn`, which forks a test process that may be running JAX's threads)."""
    limits = [(name, value) for name, value in (("RLIMIT_AS", address_space), ("RLIMIT_FSIZE", file_size))
              if value is not None]
    code = ("import resource, runpy, sys\n"
            + "".join(f"resource.setrlimit(resource.{name}, ({value}, {value}))\n" for name, value in limits)
            + "sys.argv = ['easydata', *sys.argv[1:]]\nrunpy.run_module('easydata', run_name='__main__')\n")
    return [sys.executable, "-c", code, *args]


def check_threads(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Records, path by path, the thread that `easydata.io.sources.check_unchanged` looked at each input on."""
    import threading

    import easydata.io.sources as sources

    looked = sources.file_version
    threads: dict[str, str] = {}

    def looked_at(path: str) -> str:
        threads[path] = threading.current_thread().name
        return looked(path)

    monkeypatch.setattr(sources, "file_version", looked_at)
    return threads


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, server: subprocess.Popen, what: str, timeout: float) -> None:
    """Waits until `server` accepts connections on `port`; fails the test if it exits or takes too long."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                pytest.fail(f"{what} did not start")
            time.sleep(0.2)


@contextlib.contextmanager
def background_service(args: list[str], cwd: Path, env: dict[str, str], port: int, what: str) -> Iterator[None]:
    """`python -m ARGS` started in `cwd` with `env` (its output in `cwd/service.log`), waited for until it listens
    on `port`, and stopped after the block."""
    cwd.mkdir(parents=True, exist_ok=True)
    with open(cwd / "service.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", *args], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            wait_for_port(port, proc, what, timeout=60)
            yield
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# ---- CI: no test may skip for a missing file -----------------------------------------------------------

# A skip whose reason points at a file, folder or fixture data means the repository lacks what its tests
# need (a fresh clone elsewhere would skip it silently); in CI (`CI=true`) that fails the run.
_MISSING_FILE = re.compile(r"\b(file|files|folder|directory|fixture)\b|\bnot available at\b", re.IGNORECASE)
_missing_file_skips: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        if _MISSING_FILE.search(reason):
            _missing_file_skips.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes") and _missing_file_skips:
        for skip in _missing_file_skips:
            print(f"\nCI: skipped for a missing file: {skip}")
        session.exitstatus = 1


# ---- test-side compositions of product functions (the product composes them inline) ---------------


def pack_documents(tokens: Any, offsets: Any, seq_length: int, *, strategy: str = "first_fit", pad_id: int = 0,
                   loss_mask: Any = None, max_segments: Optional[int] = None, pool_size: int = 8,
                   order: Any = None) -> Any:
    """`plan_packing` then `fill_rows`, as `easydata.ops.pack_stage` calls them (in `order`, if given)."""
    import numpy as np

    from easydata.ops.packing import document_lengths, fill_rows, plan_packing

    offsets = np.asarray(offsets, dtype=np.int64)
    plan = plan_packing(document_lengths(offsets, order), seq_length, strategy, max_segments=max_segments,
                        pool_size=pool_size)
    return fill_rows(plan, np.asarray(tokens), offsets, seq_length, pad_id, loss_mask, order)


def split_by_group(batch: pa.RecordBatch, num_groups: int) -> list[tuple[int, pa.RecordBatch]]:
    """A batch cut into its hash groups' parts, as the shuffle's routing cuts it (`group_ranges`)."""
    from easydata.ops.sharding import group_ranges

    rows, groups, starts, stops = group_ranges(batch, num_groups)
    return [(g, rows.slice(s, e - s)) for g, s, e in zip(groups, starts, stops)]


def read_shard_table(path: str, fmt: str, columns: Optional[list[str]] = None) -> pa.Table:
    """A whole shard as one table, read with the format's own reader."""
    from easydata.io.formats import iter_shard_batches

    batches = list(iter_shard_batches(path, fmt, columns))
    return pa.Table.from_batches(batches) if batches else pa.table({})
