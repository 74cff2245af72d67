"""A local batch job run by the `easydata` command leaves out the optional libraries it never uses:
what is hidden, for how long, that pyarrow and Beam work without them, and that the job's processes
(command, worker server, workers) really import none of them while the output stays valid."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from beam_pipelines.local.lean_import import without_unused_libraries
from beam_pipelines.local.worker_pool import runs_locally
from easydata.tools.validate import validate_output

from tests.conftest import make_texts, write_jsonl


def test_hidden_modules_cannot_be_imported_inside_the_block_and_can_after_it():
    for name in ("wave", "xmlrpc.client", "xmlrpc"):  # standard modules nothing here needs
        sys.modules.pop(name, None)
    import json  # already imported: never hidden

    with without_unused_libraries(["wave", "xmlrpc", "json"]):
        with pytest.raises(ModuleNotFoundError, match="'wave'"):
            import wave  # noqa: F401
        with pytest.raises(ModuleNotFoundError, match="'xmlrpc"):  # a package and its submodules
            import xmlrpc.client  # noqa: F401
        assert importlib.import_module("json") is json
    import wave  # noqa: F401,F811
    import xmlrpc.client  # noqa: F401,F811
    assert "wave" in sys.modules and "xmlrpc.client" in sys.modules


@pytest.mark.slow
def test_pyarrow_and_beam_import_and_build_arrays_without_them():
    """pyarrow looks for pandas (Cython code, which a `None` module entry would fool) the first time it
    turns a Python list into an array; Beam when it is imported."""
    code = """
import sys
from beam_pipelines.local.lean_import import UNUSED_IN_LOCAL_BATCH_JOBS, without_unused_libraries
with without_unused_libraries():
    import apache_beam
    import pyarrow as pa
    assert pa.array(["a", "b"], type=pa.string()).to_pylist() == ["a", "b"]
    assert pa.array([1, 2]).sum().as_py() == 3
print(sorted(name for name in UNUSED_IN_LOCAL_BATCH_JOBS if name in sys.modules))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]"]


@pytest.mark.parametrize("args, local", [
    ([], True), (["--direct_num_workers=1"], True), (["--direct_num_workers=2"], True),
    (["--runner=DirectRunner"], True), (["--streaming"], False), (["--runner=DataflowRunner"], False),
    (["--runner=DaskRunner"], False), (["--direct_num_workers=two"], False),
])
def test_only_local_batch_runs_are_lean(args, local):
    assert runs_locally(args) is local


@pytest.mark.slow
def test_the_commands_processes_import_none_of_them_and_the_output_is_valid(tokenizer_dir, tmp_path):
    """Stand-ins for pandas, boto3 and pymongo, first on the path of the command and of the processes it
    starts, record every process that imports them (and then fail as if absent)."""
    stand_ins, marks = tmp_path / "stand_ins", tmp_path / "marks"
    marks.mkdir()
    for name in ("pandas", "boto3", "pymongo"):
        (stand_ins / name).mkdir(parents=True)
        (stand_ins / name / "__init__.py").write_text(
            f"import os\nopen(os.path.join({str(marks)!r}, '{name}-' + str(os.getpid())), 'w').close()\n"
            f"raise ImportError('stand-in {name}')\n")
    write_jsonl(tmp_path / "d.jsonl", [{"text": t} for t in make_texts(60, seed=3)])
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(stand_ins), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "easydata", "tokenize", "--data-files", str(tmp_path / "d.jsonl"),
               "--tokenizer", str(tokenizer_dir), "--output", str(out), "--quiet", "--direct_num_workers=2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(p.name for p in marks.iterdir()) == []
    report = validate_output(str(out))
    assert report.ok, report.summary()
    assert sum(pq.read_metadata(p).num_rows for p in Path(out).rglob("*.parquet")) > 0

    probe = subprocess.run([sys.executable, "-c", "import pandas"], capture_output=True, text=True, env=env)
    assert "stand-in pandas" in probe.stderr and len(list(marks.iterdir())) == 1  # the stand-ins do record
