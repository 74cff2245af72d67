"""`GrainSource` in other processes: Grain's `DataLoader(worker_count > 0)` pickles the data source into
its workers, and pickling failed ("no default __reduce__ due to non-trivial __cinit__": the open shard files
and the lock), so only `worker_count=0` worked."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import pickle
import subprocess
import sys

import pyarrow as pa
import pytest

from easydata.reader import GrainSource
from tests.conftest import pip_site, write_synthetic_output

L = 4
SCHEMA = pa.schema([("input_ids", pa.list_(pa.int32())), ("segment_ids", pa.list_(pa.int32()))])


@pytest.fixture(scope="module", params=["parquet", "arrow"])
def output(request, tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp(f"grain-{request.param}") / "out"
    rows = [[{"input_ids": [10 * s + r] * L, "segment_ids": [1] * L} for r in range(5)] for s in range(3)]
    write_synthetic_output(str(out), {"train": rows}, SCHEMA, fmt=request.param, seq_length=L)
    return str(out)


def _first_tokens(source: GrainSource, indices: list[int]) -> list[int]:
    return [int(source[i]["input_ids"][0]) for i in indices]


def test_a_pickled_source_reads_the_same_rows(output):
    source = GrainSource(output)
    source[7]  # a block cached and shards open: not carried over
    copy = pickle.loads(pickle.dumps(source))
    assert len(copy) == len(source) == 15
    assert _first_tokens(copy, list(range(15))) == _first_tokens(source, list(range(15)))


def test_spawned_worker_processes_read_rows(output):
    source = GrainSource(output)
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        parts = list(pool.map(_first_tokens, [source] * 3, [[0, 5, 10], [1, 6, 11], [14, 13, 12]]))
    assert parts == [[0, 10, 20], [1, 11, 21], [24, 23, 22]]


GRAIN_LOADER = """
import sys
import grain.python as grain
from easydata.reader import GrainSource
if __name__ == "__main__":
    from absl import flags  # with JAX installed Grain reads its absl flags: parsed as under `absl.app.run`
    flags.FLAGS.mark_as_parsed()
    source = GrainSource(sys.argv[1])
    sampler = grain.IndexSampler(len(source), shard_options=grain.NoSharding(), shuffle=True, num_epochs=1, seed=0)
    loader = grain.DataLoader(data_source=source, sampler=sampler, worker_count=2,
                              operations=[grain.Batch(batch_size=5)])
    print(sorted(int(x) for batch in loader for x in batch["input_ids"][:, 0]))
"""


@pytest.mark.slow
def test_grain_data_loader_with_worker_processes(output, tmp_path):
    """The real Grain (installed beside the test environment, not into it) with two worker processes."""
    site = pip_site("grain==0.2.18", "portpicker==1.6.0", no_deps=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    script = tmp_path / "load.py"  # a file: spawned workers import the main module again
    script.write_text(GRAIN_LOADER)
    result = subprocess.run([sys.executable, str(script), output], capture_output=True, text=True, env=env,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == str(sorted(10 * s + r for s in range(3) for r in range(5)))
