"""tf.data through TensorFlow 2.16 + tensorflow-io 0.37 (the `tf` extra, in their own virtualenv:
TensorFlow pins numpy < 2): `TokenReader(...).as_tf_dataset()` gives the same rows, order,
per-process sharding and resume as `TokenReader` itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from easydata.reader import TokenReader
from tests.conftest import REPO_ROOT, make_texts, write_jsonl

pytestmark = pytest.mark.heavy

#: What the `tf` extra pins (setup.py), plus what the reader imports, in versions that take numpy 1.26.
TF_PACKAGES = ["tensorflow==2.16.2", "tensorflow-io==0.37.1", "pyarrow>=14,<21", "fsspec", "pyyaml", "jinja2",
               "zstandard", "tqdm"]


@pytest.fixture(scope="session")
def tf_python() -> str:
    """The interpreter of a virtualenv with TensorFlow and tensorflow-io, built once and reused."""
    root = Path(os.environ.get("EASYDATA_TEST_VENVS", Path.home() / ".cache" / "easydata-test-venvs"))
    venv = root / "tf-2.16.2-tfio-0.37.1"
    if not (venv / ".complete").is_file():
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        *TF_PACKAGES], check=True)
        (venv / ".complete").write_text(" ".join(TF_PACKAGES))
    return str(venv / "bin" / "python")


@pytest.fixture(scope="module")
def output(tmp_path_factory, tokenizer_dir) -> Path:
    tmp = tmp_path_factory.mktemp("tf")
    write_jsonl(tmp / "a.jsonl", ({"text": t} for t in make_texts(400, seed=5)))
    config = {"default_tokenizer": str(tokenizer_dir), "datasets": [{"name": "web", "data_files": str(tmp / "a.jsonl")}],
              "pack": {"enabled": True, "seq_length": 32}, "save": {"output_dir": str(tmp / "out"), "num_shards": 3}}
    (tmp / "job.json").write_text(json.dumps(config))
    done = subprocess.run([sys.executable, "-m", "easydata", "run", str(tmp / "job.json"), "--quiet",
                           "--direct_num_workers=1"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0, done.stderr
    return tmp / "out"


def _ours(out: Path, index: int, count: int, state: dict | None = None) -> tuple[list[dict], TokenReader]:
    reader = TokenReader(str(out), batch_size=8, shuffle=True, seed=7, num_epochs=1, process_index=index,
                         process_count=count, layout="maxtext")
    if state is not None:
        reader.load_state_dict(state)
    return [{k: v.tolist() for k, v in batch.items()} for batch in reader], reader


def _theirs(python: str, out: Path, index: int, count: int, state: dict | None = None) -> dict:
    done = subprocess.run([python, str(Path(__file__).parent / "tf_data" / "read.py"), str(out), "8", str(index),
                           str(count), json.dumps(state) if state is not None else "-"],
                          capture_output=True, text=True, timeout=600,
                          env={"PATH": os.environ["PATH"], "HOME": os.environ["HOME"], "PYTHONPATH": str(REPO_ROOT),
                               "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("index, count", [(0, 1), (0, 2), (1, 2)])
def test_tf_dataset_gives_the_readers_batches(output, tf_python, index, count) -> None:
    expected, _ = _ours(output, index, count)
    got = _theirs(tf_python, output, index, count)
    assert got["tf"] == "2.16.2" and got["tfio"] == "0.37.1"
    assert got["batches"] == expected and len(expected) > 5


def test_tf_dataset_resumes_exactly(output, tf_python) -> None:
    reader = TokenReader(str(output), batch_size=8, shuffle=True, seed=7, num_epochs=1, process_index=1,
                         process_count=2, layout="maxtext")
    batches = iter(reader)
    for _ in range(5):
        next(batches)
    state = reader.state_dict()
    expected, _ = _ours(output, 1, 2)
    got = _theirs(tf_python, output, 1, 2, state)
    assert got["batches"] == expected[5:]


def test_reader_import_stays_free_of_tensorflow() -> None:
    done = subprocess.run([sys.executable, "-c", "import sys, easydata.reader; "
                           "print(sorted(m for m in ('tensorflow', 'jax', 'apache_beam') if m in sys.modules))"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.stdout.strip() == "[]", done.stderr
