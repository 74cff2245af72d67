"""A three-dataset upsampling mix run repeatedly beside CPU-bound processes: every run commits the same bytes.

Before the selection read the tokenized batches back from their checkpoints, the local runner lost mixed
rows between the selection step and the shuffle when the machine was busy (a Flatten of three selection
steps' large outputs into one consumer): such runs beside three spinning processes stopped at
the commit guard with "mix: selected N documents ... but the output holds fewer". Heavy: several minutes.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import write_jsonl

pytestmark = pytest.mark.heavy

_SPIN = "while True: pass"


def _documents(limit_bytes: int) -> list[str]:
    """Standard-library sources cut into ~1.8 KB documents (many small documents, as in the report)."""
    docs, total = [], 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        for i in range(0, len(text), 1800):
            docs.append(text[i:i + 1800])
            total += len(docs[-1])
        if total >= limit_bytes:
            return docs
    return docs


def _easydata() -> list[str]:
    """The installed `easydata` command (as a user runs it), else `python -m easydata`."""
    beside = Path(sys.executable).parent / "easydata"
    return [str(beside)] if beside.is_file() else [sys.executable, "-m", "easydata"]


def _digest(out: Path) -> dict[str, str]:
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("part-*"))}


def test_an_upsampling_mix_under_cpu_load_always_commits_the_same_bytes(tmp_path, mistral_tokenizer_dir):
    docs = _documents(40 * 10**6)
    n = len(docs)
    parts = {"a": docs[:n // 2], "b": docs[n // 2:5 * n // 6], "c": docs[5 * n // 6:]}
    for name, texts in parts.items():
        write_jsonl(tmp_path / name / "data.jsonl", ({"text": t} for t in texts))
    config = tmp_path / "mix.json"
    config.write_text(json.dumps({
        "seed": 42, "default_tokenizer": str(mistral_tokenizer_dir),
        "datasets": [{"name": name, "data_files": str(tmp_path / name / "data.jsonl")} for name in parts],
        "mix": {"weights": {"a": 0.7, "b": 0.25, "c": 0.05}, "stop_strategy": "all_exhausted"},
        "pack": {"enabled": True, "seq_length": 2048},
        "save": {"output_dir": str(tmp_path / "out"), "overwrite": True},
    }))
    spinners = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(3)]
    digests = []
    try:
        for attempt in range(3):
            log = tmp_path / f"run-{attempt}.log"
            with open(log, "wb") as out:  # a file, as a user's shell redirect gives: the failure showed so
                code = subprocess.run([*_easydata(), "run", str(config), "--quiet"], cwd=tmp_path,
                                      stdout=out, stderr=subprocess.STDOUT, timeout=900).returncode
            assert code == 0, log.read_text()[-3000:]
            digests.append(_digest(tmp_path / "out"))
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert digests[0] and all(d == digests[0] for d in digests)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    shares = manifest["mix"]["realized_token_share"]
    assert abs(shares["c"] - 0.05) < 0.01 and abs(shares["a"] - 0.7) < 0.01
