"""`save.format: tfrecord` and `save.format: arrayrecord`: one `tf.train.Example` per row, read as they are
by TensorFlow (`TFRecordDataset` + `tf.io.parse_single_example`, in its own virtualenv) and Grain
(`ArrayRecordDataSource`, in the MaxText virtualenv), and back by `validate`, `inspect`, `stats` and the
reader. The rows equal the Parquet output of the same job, in the same order.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from easydata.io.tf_example import decode_examples, encode_examples, read_varints, varints
from tests.conftest import REPO_ROOT, make_texts, write_jsonl
from tests.test_maxtext import maxtext_python  # noqa: F401  (the fixtures: their virtualenvs, built once)
from tests.test_tf_data import tf_python  # noqa: F401


@given(st.lists(st.integers(min_value=0, max_value=2**62), max_size=200))
@settings(max_examples=200, deadline=None)
def test_varints_round_trip(values) -> None:
    assert read_varints(varints(np.array(values, dtype=np.int64))).tolist() == values


@pytest.mark.slow
@given(st.lists(st.lists(st.integers(min_value=0, max_value=2**31 - 1), max_size=40), min_size=1, max_size=20),
       st.lists(st.text(max_size=20), min_size=20, max_size=20))
@settings(max_examples=100, deadline=None)
def test_examples_round_trip(rows, texts) -> None:
    table = pa.table({"input_ids": pa.array(rows, pa.list_(pa.int32())), "src": texts[:len(rows)]})
    assert decode_examples(encode_examples(table)).to_pylist() == table.to_pylist()


def _job(tmp_path: Path, tokenizer: Path, fmt: str, **save) -> Path:
    if not (tmp_path / "web" / "a.jsonl").exists():
        write_jsonl(tmp_path / "web" / "a.jsonl", ({"text": t, "source": f"s{i % 3}"}
                                                   for i, t in enumerate(make_texts(400, seed=11))))
    config = tmp_path / f"{fmt}.json"
    config.write_text(json.dumps({
        "default_tokenizer": str(tokenizer), "datasets": [{"name": "web", "data_files": str(tmp_path / "web" / "a.jsonl")}],
        "pack": {"enabled": True, "seq_length": 128},
        "save": {"output_dir": str(tmp_path / fmt), "format": fmt.split("-")[0], "num_shards": 2, **save}}))
    return config


def _run(config: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "easydata", "run", str(config), "--quiet", "--direct_num_workers=1"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def _parquet_rows(out: Path) -> list[dict]:
    manifest = json.loads((out / "manifest.json").read_text())
    return [r for s in manifest["datasets"]["web"]["shards"] for r in pq.read_table(out / s["path"]).to_pylist()]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, tokenizer_dir) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("record-files")
    for fmt, save in (("parquet", {}), ("tfrecord", {}), ("tfrecord-gzip", {"compression": "gzip"}),
                      ("arrayrecord", {})):
        _run(_job(root, tokenizer_dir, fmt, **save))
    return {fmt: root / fmt for fmt in ("parquet", "tfrecord", "tfrecord-gzip", "arrayrecord")}


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["tfrecord", "tfrecord-gzip", "arrayrecord"])
def test_record_outputs_validate_inspect_stats_and_read_like_parquet(outputs, fmt) -> None:
    from easydata.reader import TokenReader

    out = outputs[fmt]
    manifest = json.loads((out / "manifest.json").read_text())
    suffix = ".array_record" if fmt == "arrayrecord" else ".tfrecord"
    assert all(s["path"].endswith(suffix) for s in manifest["datasets"]["web"]["shards"])
    for command in (["validate"], ["inspect", "-n", "1"], ["stats"]):
        done = subprocess.run([sys.executable, "-m", "easydata", *command, str(out)], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
    ours = [b for b in TokenReader(str(out), batch_size=8, shuffle=False, num_epochs=1, drop_remainder=False)]
    theirs = [b for b in TokenReader(str(outputs["parquet"]), batch_size=8, shuffle=False, num_epochs=1,
                                     drop_remainder=False)]
    assert len(ours) == len(theirs) and all(
        all(np.array_equal(a[k], b[k]) for k in b) for a, b in zip(ours, theirs))


_TF_READ = """
import json, sys
import tensorflow as tf
spec = {c: tf.io.VarLenFeature(tf.int64) for c in ("input_ids", "segment_ids", "positions")}
rows = []
for path in sys.argv[2:]:
    for record in tf.data.TFRecordDataset(path, compression_type=sys.argv[1]):
        example = tf.io.parse_single_example(record, spec)
        rows.append({c: tf.sparse.to_dense(example[c]).numpy().tolist() for c in spec})
        assert all(example[c].dtype == tf.int64 for c in spec)
print("ROWS " + json.dumps(rows))
"""


@pytest.mark.heavy
@pytest.mark.slow
@pytest.mark.parametrize("fmt, compression", [("tfrecord", ""), ("tfrecord-gzip", "GZIP")])
def test_tensorflow_parses_our_tfrecords_into_our_rows(outputs, fmt, compression, tf_python) -> None:  # noqa: F811
    out = outputs[fmt]
    manifest = json.loads((out / "manifest.json").read_text())
    paths = [str(out / s["path"]) for s in manifest["datasets"]["web"]["shards"]]
    done = subprocess.run([str(tf_python), "-c", _TF_READ, compression, *paths], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("ROWS "))[5:])
    expected = [{c: r[c] for c in ("input_ids", "segment_ids", "positions")} for r in _parquet_rows(outputs["parquet"])]
    assert rows == expected and len(rows) > 10


_GRAIN_READ = """
import json, random, sys
import grain.python as grain
from easydata.io.tf_example import decode_examples
source = grain.ArrayRecordDataSource(sys.argv[1:])
order = list(range(len(source)))
random.Random(0).shuffle(order)
rows = {i: decode_examples([source[i]]).to_pylist()[0] for i in order}  # random access, any index
print("ROWS " + json.dumps({"len": len(source), "rows": [rows[i] for i in range(len(source))]}))
"""


@pytest.mark.slow
def test_grain_reads_our_array_records_by_index(outputs, maxtext_python) -> None:  # noqa: F811
    out = outputs["arrayrecord"]
    manifest = json.loads((out / "manifest.json").read_text())
    paths = [str(out / s["path"]) for s in manifest["datasets"]["web"]["shards"]]
    done = subprocess.run([str(maxtext_python), "-c", _GRAIN_READ, *paths], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("ROWS "))[5:])
    expected = _parquet_rows(outputs["parquet"])
    assert result["len"] == len(expected) and result["rows"] == expected
