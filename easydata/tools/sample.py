"""The embedded default job: a sample corpus and tokenizer built from this machine, no network.

`easydata run` with no config uses `default_config()`. The corpus is real text found on every Python
installation: the standard library's own source files (dataset `code`, one document per module,
with its `path`) and the docstrings of its modules, classes and functions (dataset `docs`). A byte-level
BPE tokenizer (8,192 tokens) is trained on it. Both are built once into a cache directory
(`$EASYDATA_CACHE`, default `~/.cache/easydata-beam`) and reused.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import sys
import sysconfig
import tempfile
import warnings
from pathlib import Path
from typing import Iterator

from easydata.cache import cache_root, make_cache_dir
from easydata.config import PipelineConfig

__all__ = ["default_config", "ensure_sample", "DEFAULT_OUTPUT_DIR"]

DEFAULT_OUTPUT_DIR = "easydata_output"
_SAMPLE_VERSION = 1
_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idlelib", "__pycache__", "lib2to3"}
_VOCAB_SIZE = 8192


def _stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        files.extend(Path(directory) / n for n in sorted(names) if n.endswith(".py"))
    return sorted(files)


def _docstrings(source: str) -> Iterator[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc and len(doc) >= 40:
                yield doc


def ensure_sample() -> Path:
    """Builds (once) and returns the sample directory: `code/*.jsonl`, `docs/*.jsonl`, `tokenizer/`."""
    target = cache_root() / f"sample-v{_SAMPLE_VERSION}-py{sys.version_info[0]}.{sys.version_info[1]}"
    if (target / "tokenizer" / "tokenizer.json").is_file():
        return target
    temp = Path(tempfile.mkdtemp(prefix=".building-", dir=make_cache_dir(target.parent)))
    try:
        root = Path(sysconfig.get_paths()["stdlib"])
        (temp / "code").mkdir()
        (temp / "docs").mkdir()
        texts = []
        with open(temp / "code" / "stdlib.jsonl", "w", encoding="utf-8") as code, \
                open(temp / "docs" / "docstrings.jsonl", "w", encoding="utf-8") as docs:
            for file in _stdlib_files():
                try:
                    source = file.read_text(encoding="utf-8")
                except (UnicodeDecodeError, OSError):
                    continue
                rel = file.relative_to(root).as_posix()
                code.write(json.dumps({"text": source, "path": rel}) + "\n")
                texts.append(source)
                try:
                    for doc in _docstrings(source):
                        docs.write(json.dumps({"text": doc, "path": rel}) + "\n")
                        texts.append(doc)
                except SyntaxError:
                    pass
        from easydata.text.tokenizer_training import train_bpe_tokenizer

        train_bpe_tokenizer(texts, temp / "tokenizer", vocab_size=_VOCAB_SIZE)
        try:
            temp.rename(target)
        except OSError:  # another process built it first
            shutil.rmtree(temp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return target


def default_config(output_dir: str = DEFAULT_OUTPUT_DIR) -> PipelineConfig:
    """The embedded default job over the sample corpus, written to `output_dir` (replaced if it is
    an earlier easydata output)."""
    sample = ensure_sample()
    return PipelineConfig.from_dict({
        "seed": 42,
        "default_tokenizer": str(sample / "tokenizer"),
        "datasets": [
            {"name": "code", "data_files": str(sample / "code" / "*.jsonl"), "additional_fields": ["path"]},
            {"name": "docs", "data_files": str(sample / "docs" / "*.jsonl"), "additional_fields": ["path"]},
        ],
        "tokenize": {"add_eos": True, "batch_size": 256},
        "save": {"output_dir": output_dir, "format": "parquet", "compression": "zstd", "num_shards": 4,
                 "overwrite": True},
    })
