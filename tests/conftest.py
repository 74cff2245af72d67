"""Shared fixtures: small tokenizers trained on the fly, corpus writers, the real Mistral tokenizer.

Nothing here touches the network. The session tokenizer is a byte-level BPE trained in seconds on
generated English-like text; `mistral_tokenizer_dir` is the production tokenizer from
`../shared/tokenizers` and skips the test when that folder is absent (a user's fresh clone).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Iterable

import pytest

from easydata.tokenizer_training import train_bpe_tokenizer

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_TOKENIZERS = REPO_ROOT.parent / "shared" / "tokenizers"

_WORDS = ("the model reads tokens from shards and packs documents into rows while the reader shuffles"
          " batches across hosts deterministic seed epoch resume gradient loss mask segment position"
          " python code function return value data pipeline beam worker bundle split file json parquet"
          " arrow café naïve 東京 數據 emoji 🙂 tab\tnewline").split(" ")


def make_texts(n: int, seed: int = 0, min_words: int = 1, max_words: int = 60) -> list[str]:
    """Deterministic English-like documents of varied length (with some non-ASCII)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(min_words, max_words))) for _ in range(n)]


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


@pytest.fixture(scope="session")
def mistral_tokenizer_dir() -> Path:
    """The real Mistral-7B v0.1 tokenizer from ../shared/tokenizers (skips when absent)."""
    path = SHARED_TOKENIZERS / "mistral-7b-v0.1"
    if not (path / "tokenizer.json").is_file():
        pytest.skip(f"real tokenizer not available at {path}")
    return path
