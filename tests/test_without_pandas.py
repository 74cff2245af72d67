"""Every way of reading an output works where pandas is not installed (it is not a dependency of the package).

pyarrow reaches for pandas in places that look unrelated (`DataType.to_pandas_dtype`, nanosecond timestamps in
`to_pylist`): TFRecord outputs were "unreadable (ModuleNotFoundError: No module named 'pandas')" for `validate`,
`inspect`, `stats` and `TokenReader` on a plain `pip install easydata-beam`, where the test suite, which has
pandas, never saw it. Each command runs in a process where importing pandas fails, as it does there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from tests.conftest import WITHOUT_PANDAS, write_synthetic_output

_READ_EVERYTHING = WITHOUT_PANDAS + """
import contextlib, io
from easydata.cli import main
from easydata.reader import GrainSource, TokenReader
out, fmt = sys.argv[1], sys.argv[2]
results = {}
for command in (["validate", out, "--quiet"], ["inspect", out, "-n", "1"], ["stats", out, "--quiet"]):
    text, errors = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(text), contextlib.redirect_stderr(errors):
        code = main(command)
    results[command[0]] = [code, errors.getvalue()[-300:]]
if fmt != "jsonl":  # the reader's formats
    batch = next(iter(TokenReader(out, batch_size=2, seq_length=4, num_epochs=1, shuffle=False)))
    results["reader"] = sorted(int(v) for v in batch["input_ids"].ravel())
    results["grain"] = [GrainSource(out)[i]["input_ids"].tolist() for i in range(2)]
results["pandas"] = "pandas" in sys.modules
print(json.dumps(results))
"""


@pytest.mark.parametrize("fmt", ["parquet", "arrow", "tfrecord", "jsonl"])
def test_every_reader_of_an_output_works_without_pandas(tmp_path: Path, fmt: str) -> None:
    schema = pa.schema([("input_ids", pa.list_(pa.int32())), ("attention_mask", pa.list_(pa.int32())),
                        ("score", pa.list_(pa.float32()))])
    rows = [{"input_ids": [1, 2, 3, 4], "attention_mask": [1, 1, 1, 1], "score": [0.5]},
            {"input_ids": [5, 6, 7, 8], "attention_mask": [1, 1, 1, 1], "score": [1.5]}]
    write_synthetic_output(str(tmp_path / "out"), {"web": [rows]}, schema, fmt=fmt)
    done = subprocess.run([sys.executable, "-c", _READ_EVERYTHING, str(tmp_path / "out"), fmt], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.splitlines()[-1])
    assert got.pop("pandas") is False
    assert {command: got.pop(command) for command in ("validate", "inspect", "stats")} == \
        {"validate": [0, ""], "inspect": [0, ""], "stats": [0, ""]}
    if fmt != "jsonl":
        assert got == {"reader": [1, 2, 3, 4, 5, 6, 7, 8], "grain": [[1, 2, 3, 4], [5, 6, 7, 8]]}
