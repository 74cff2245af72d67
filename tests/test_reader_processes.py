"""The reader across real processes: two JAX processes joined by `jax.distributed.initialize` on CPU (a
local coordinator, 4 devices each) read one output into global arrays. The rest of the suite simulates
process indexes; this keeps the real thing true while the reader changes.

Checked: each process's rows are disjoint from the other's and together cover every row once per
epoch; a jitted reduction over the global batch agrees in both processes (and equals the sum of the
rows they fed); resuming from `state_dict()` in fresh processes gives exactly the batches that followed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from tests.conftest import REPO_ROOT, free_port, write_synthetic_output

pytestmark = pytest.mark.slow

L, ROWS, BATCH = 8, 96, 16
TOKENS = pa.list_(pa.int32())

WORKER = """
import json, os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax
jax.config.update("jax_cpu_collectives_implementation", "gloo")
out, port, index, steps, state = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=index,
                           initialization_timeout=120)
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec
from easydata.reader import TokenReader

mesh = Mesh(np.array(jax.devices()), ("data",))
reader = TokenReader(out, batch_size=%(batch)d, shuffle=True, seed=3, num_epochs=None,
                     process_index=jax.process_index(), process_count=jax.process_count())
if state != "-":
    reader.load_state_dict(json.loads(state))
total = jax.jit(lambda x: jnp.sum(x.astype(jnp.int64)))
result = {"process": jax.process_index(), "devices": jax.device_count(), "local_devices": jax.local_device_count(),
          "rows": [], "sums": [], "states": []}
for step, batch in zip(range(steps), reader.as_jax(mesh, PartitionSpec("data"))):
    ids = batch["input_ids"]
    assert ids.shape == (%(batch)d, %(length)d) and not ids.is_fully_addressable
    local = np.concatenate([np.asarray(s.data) for s in sorted(ids.addressable_shards, key=lambda s: s.index[0].start)])
    result["rows"].append([int(r[0]) for r in local])
    result["sums"].append(int(total(ids)))
    result["states"].append(reader.state_dict())
print("RESULT " + json.dumps(result))
jax.distributed.shutdown()
""" % {"batch": BATCH, "length": L}


def _run_pair(out: Path, steps: int, states: tuple[str, str] = ("-", "-")) -> list[dict]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(out), str(port), str(i), str(steps), states[i]],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    results = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr[-3000:]
        results.append(json.loads(next(line for line in stdout.splitlines() if line.startswith("RESULT "))[7:]))
    return sorted(results, key=lambda r: r["process"])


def test_two_real_processes_read_disjoint_rows_into_agreeing_global_arrays(tmp_path: Path) -> None:
    out = tmp_path / "out"
    rows = [{"input_ids": [i] + [i % 7] * (L - 1), "segment_ids": [1] * L, "positions": list(range(L))}
            for i in range(ROWS)]
    write_synthetic_output(str(out), {"web": [rows[:40], rows[40:70], rows[70:]]},
                           pa.schema([("input_ids", TOKENS), ("segment_ids", TOKENS), ("positions", TOKENS)]),
                           seq_length=L)
    epoch = ROWS // BATCH  # steps per epoch (every row once)
    first = _run_pair(out, 2 * epoch)
    assert [r["devices"] for r in first] == [8, 8] and [r["local_devices"] for r in first] == [4, 4]
    for step in range(2 * epoch):  # the reduction over the global array agrees, and is over both processes' rows
        a, b = first[0]["rows"][step], first[1]["rows"][step]
        assert len(a) == len(b) == BATCH // 2 and not set(a) & set(b)
        expected = sum(r + (r % 7) * (L - 1) for r in a + b)
        assert first[0]["sums"][step] == first[1]["sums"][step] == expected
    for e in range(2):  # every row once per epoch, the epochs in a different order
        seen = sorted(r for p in first for step in range(e * epoch, (e + 1) * epoch) for r in p["rows"][step])
        assert seen == list(range(ROWS))
    assert first[0]["rows"][:epoch] != first[0]["rows"][epoch:]
    k = 3  # fresh processes resumed from the states after step k give exactly the batches that followed
    resumed = _run_pair(out, 4, (json.dumps(first[0]["states"][k - 1]), json.dumps(first[1]["states"][k - 1])))
    for p in range(2):
        assert resumed[p]["rows"] == first[p]["rows"][k:k + 4] and resumed[p]["sums"] == first[p]["sums"][k:k + 4]
