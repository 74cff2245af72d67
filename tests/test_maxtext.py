"""MaxText (the real `maxtext` 0.2.5 package, in its own Python 3.12 virtualenv) reads our outputs
through its stock Grain input pipeline (`make_grain_train_iterator`), on both documented routes
(docs/trainers.md): Parquet (unpacked rows cut to `max_target_length`, `grain_file_type: parquet`),
Megatron's indexed format (`format: megatron`, `grain_file_type: mmap`) and Grain's and TensorFlow's
native files (`format: arrayrecord` / `tfrecord`, parsed by MaxText's own `ParseFeatures`). Each test
checks the batch keys and shapes MaxText's train step takes and that no token was lost."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.conftest import REPO_ROOT, make_texts, write_jsonl

pytestmark = pytest.mark.heavy

MAXTEXT = "maxtext==0.2.5"
#: What MaxText's input pipeline imports on CPU (its own dependencies are all behind GPU/TPU extras).
MAXTEXT_DEPS = ["jax==0.12.0.1", "grain==0.2.18", "ml_collections", "transformers", "tiktoken", "sentencepiece", "etils",
                "pyarrow", "protobuf", "pillow", "pathwaysutils", "omegaconf", "flax", "jinja2", "drjax", "jaxtyping",
                "qwix", "aqtp"]
KEYS = {"inputs", "inputs_position", "inputs_segmentation", "targets", "targets_position", "targets_segmentation"}
LENGTH, PER_DEVICE = 64, 4


def _python312() -> str:
    """A Python 3.12 interpreter that runs (pyenv's shims exist for versions that are not active)."""
    candidates = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python"))) + \
        [p for p in (shutil.which("python3.12"),) if p]
    for candidate in candidates:
        if subprocess.run([candidate, "-c", "import venv"], capture_output=True).returncode == 0:
            return candidate
    pytest.fail("MaxText needs Python 3.12: install it (pyenv has 3.12 on these machines)")


@pytest.fixture(scope="session")
def maxtext_python() -> str:
    """The interpreter of a virtualenv holding the real `maxtext` package, built once and reused."""
    root = Path(os.environ.get("EASYDATA_TEST_VENVS", Path.home() / ".cache" / "easydata-test-venvs"))
    venv = root / "maxtext-0.2.5-py3.12"
    python = venv / "bin" / "python"
    if not (venv / ".complete").is_file():
        staging = root / f"maxtext.partial-{os.getpid()}"
        subprocess.run([_python312(), "-m", "venv", str(staging)], check=True)
        pip = [str(staging / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, "--no-deps", MAXTEXT], check=True)
        subprocess.run([*pip, *MAXTEXT_DEPS], check=True)
        (staging / ".complete").write_text(MAXTEXT)
        shutil.rmtree(venv, ignore_errors=True)
        staging.rename(venv)  # a venv's scripts name their directory: rebuild rather than move a built one
        subprocess.run([_python312(), "-m", "venv", "--upgrade", str(venv)], check=True)
    return str(python)


def _run(tmp: Path, tokenizer: Path, name: str, **settings) -> Path:
    config = {"default_tokenizer": str(tokenizer), "datasets": [{"name": "web", "data_files": str(tmp / "a.jsonl")}],
              "save": {"output_dir": str(tmp / name), "num_shards": 2}, **settings}
    (tmp / f"{name}.json").write_text(json.dumps(config))
    done = subprocess.run([sys.executable, "-m", "easydata", "run", str(tmp / f"{name}.json"), "--quiet",
                           "--direct_num_workers=1"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0, done.stderr
    return tmp / name


def _maxtext_batches(python: str, files: str, file_type: str, column: str, tokenizer: Path, *extra: str) -> list[dict]:
    done = subprocess.run([python, str(Path(__file__).parent / "maxtext" / "batches.py"), files, file_type, column,
                           str(LENGTH), str(PER_DEVICE), "tokenizer_type=huggingface", f"tokenizer_path={tokenizer}",
                           *extra], capture_output=True, text=True, timeout=900,
                          env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XLA_FLAGS")})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("maxtext")
    write_jsonl(tmp / "a.jsonl", ({"text": t} for t in make_texts(300, seed=3)))
    return tmp


def _check_shapes(batches: list[dict]) -> None:
    assert batches
    for batch in batches:
        assert set(batch) == KEYS
        assert all(np.asarray(v).shape == (PER_DEVICE, LENGTH) for v in batch.values())


def test_stock_parquet_route(corpus, mistral_tokenizer_dir, maxtext_python) -> None:
    """`grain_file_type: parquet`, `tokenize_train_data: False`, `train_data_columns: ['input_ids']`:
    MaxText packs our rows itself (they are cut to `max_target_length`, which it requires)."""
    out = _run(corpus, mistral_tokenizer_dir, "pq", tokenize={"max_length": LENGTH})
    batches = _maxtext_batches(maxtext_python, str(out / "web" / "*.parquet"), "parquet", "input_ids",
                               mistral_tokenizer_dir)
    _check_shapes(batches)
    ours = [ids for f in sorted((out / "web").glob("*.parquet")) for ids in pq.read_table(f).column("input_ids").to_pylist()]
    segments = []
    for batch in batches:
        for ids, seg in zip(np.asarray(batch["inputs"]), np.asarray(batch["inputs_segmentation"])):
            segments += [tuple(ids[seg == k].tolist()) for k in range(1, int(seg.max(initial=0)) + 1)]
    assert sorted(segments) == sorted(map(tuple, ours))  # every document, whole, once (packed by MaxText)


def test_stock_mmap_route(corpus, mistral_tokenizer_dir, maxtext_python) -> None:
    """`format: megatron` + `grain_file_type: mmap`, `mmap_eod_id` = the tokenizer's EOS: MaxText cuts
    our document stream into samples and drops the stream's last partial sample (docs/trainers.md says so):
    after the whole samples only EOD padding of the last batch arrives."""
    out = _run(corpus, mistral_tokenizer_dir, "meg", save={"output_dir": str(corpus / "meg"), "num_shards": 2,
                                                           "format": "megatron"})
    batches = _maxtext_batches(maxtext_python, str(out / "web"), "mmap", "text", mistral_tokenizer_dir,
                               "mmap_eod_id=2")
    _check_shapes(batches)
    stream = np.concatenate([np.fromfile(f, dtype=np.uint16) for f in sorted((out / "web").glob("*.bin"))])
    inputs = np.concatenate([np.asarray(b["inputs"]).reshape(-1) for b in batches])
    whole = len(stream) // LENGTH * LENGTH
    assert (inputs[:whole] == stream[:whole]).all()  # the samples are our stream, in order
    assert (inputs[whole:] == 2).all() and len(stream) - whole < LENGTH  # then EOD padding, not the partial sample
    assert len(stream) > whole and not (stream[whole:] == 2).all()  # (which held real tokens: dropped)


def test_packed_rows_keep_their_segments_for_maxtext(corpus, mistral_tokenizer_dir, maxtext_python) -> None:
    """Our packed rows, read with `TokenReader(layout="maxtext-stock", pad_id=0)`, are exactly what
    MaxText's own shift (`shift_and_refine`) makes of them: MaxText's train step gets our segments and
    positions intact. `layout="maxtext"` differs only where we choose to: the position whose target is
    the next document's first token is not trained, and padding keeps the output's pad id."""
    from easydata.reader import TokenReader

    out = _run(corpus, mistral_tokenizer_dir, "packed", pack={"enabled": True, "seq_length": LENGTH})
    raw = next(iter(TokenReader(str(out), batch_size=16, shuffle=False, pad_id=0, process_index=0, process_count=1)))
    done = subprocess.run([maxtext_python, str(Path(__file__).parent / "maxtext" / "shift.py"), "0"],
                          input=json.dumps({k: v.tolist() for k, v in raw.items()}), capture_output=True, text=True,
                          timeout=600, env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XLA_FLAGS")})
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    stock = next(iter(TokenReader(str(out), batch_size=16, shuffle=False, pad_id=0, layout="maxtext-stock",
                                  process_index=0, process_count=1)))
    assert set(stock) == KEYS and all(stock[k].tolist() == theirs[k] for k in KEYS)
    ours = next(iter(TokenReader(str(out), batch_size=16, shuffle=False, layout="maxtext", process_index=0,
                                 process_count=1)))
    seg = stock["inputs_segmentation"]
    boundary = np.zeros_like(seg, dtype=bool)
    boundary[:, :-1] = (seg[:, :-1] != seg[:, 1:]) & (seg[:, 1:] != 0)
    assert boundary.any() and (np.asarray(theirs["targets_segmentation"])[boundary] != 0).all()  # MaxText trains it
    assert (ours["targets_segmentation"][boundary] == 0).all()  # our default does not
    same = ~boundary & (seg != 0)
    assert (ours["targets_segmentation"][same] == stock["targets_segmentation"][same]).all()


def _segments(batches: list[dict]) -> list[tuple[int, ...]]:
    """The documents MaxText packed into its batches, in batch order."""
    segments = []
    for batch in batches:
        for ids, seg in zip(np.asarray(batch["inputs"]), np.asarray(batch["inputs_segmentation"])):
            segments += [tuple(ids[seg == k].tolist()) for k in range(1, int(seg.max(initial=0)) + 1)]
    return segments


@pytest.mark.parametrize("fmt", ["arrayrecord", "tfrecord"])
@pytest.mark.parametrize("rows", ["unpacked", "windowed"])
def test_native_record_routes_shuffle_and_resume(corpus, mistral_tokenizer_dir, maxtext_python, fmt, rows) -> None:
    """`grain_file_type: arrayrecord` / `tfrecord`, `tokenize_train_data: False`, `train_data_columns:
    ['input_ids']`, with Grain's shuffle on (a global shuffle by index for ArrayRecord, file order plus a
    window for TFRecord): every row we wrote (documents cut to `max_target_length`, or sliding windows)
    arrives whole exactly once, padding is never trained, the shuffle changed the order, and an iterator
    restored from another's Grain state after two batches yields exactly the rest of the epoch."""
    tokenize = {"max_length": LENGTH} if rows == "unpacked" else {"max_length": LENGTH, "truncation": "window",
                                                                  "stride": LENGTH * 3 // 4}
    name = f"{fmt}-{rows}"
    out = _run(corpus, mistral_tokenizer_dir, name, tokenize=tokenize,
               save={"output_dir": str(corpus / name), "num_shards": 2, "format": fmt})
    suffix = ".array_record" if fmt == "arrayrecord" else ".tfrecord"
    result = _maxtext_batches(maxtext_python, str(out / "web" / f"*{suffix}"), fmt, "input_ids",
                              mistral_tokenizer_dir, "enable_data_shuffling=True", "--resume-at=2")
    epoch, resumed = result["epoch"], result["resumed"]
    _check_shapes(epoch)
    manifest = json.loads((out / "manifest.json").read_text())
    from easydata.io.record_files import arrayrecord_batches, tfrecord_batches
    batches = arrayrecord_batches if fmt == "arrayrecord" else tfrecord_batches
    ours = [tuple(ids) for shard in manifest["datasets"]["web"]["shards"]
            for batch in batches(str(out / shard["path"]), ["input_ids"]) for ids in batch.column(0).to_pylist()]
    assert len(ours) == manifest["datasets"]["web"]["rows"] > 3 * PER_DEVICE
    if rows == "windowed":
        assert max(map(len, ours)) == LENGTH and len(ours) > 300  # long documents became several windows
    segments = _segments(epoch)
    assert sorted(segments) == sorted(ours)  # every row, whole, once
    unshuffled = _segments(result["unshuffled"])
    assert sorted(unshuffled) == sorted(ours) and segments != unshuffled  # Grain's shuffle changed the order
    for batch in epoch:  # padding: pad id in, never a target
        pad = np.asarray(batch["inputs_segmentation"]) == 0
        assert (np.asarray(batch["inputs"])[pad] == 0).all() and (np.asarray(batch["targets_segmentation"])[pad] == 0).all()
    assert any((np.asarray(b["inputs_segmentation"]) == 0).any() for b in epoch)
    assert len(epoch) > 3 and resumed == epoch[2:]  # restored from the state after two batches
