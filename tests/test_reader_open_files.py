"""Outputs with more shards than a process may open files: every reader keeps at most
`MAX_OPEN_SHARDS` shards open (it held every shard it had touched, so an output of 1,024 shards, a common
`num_shards`, failed with "Too many open files" under Linux's default limit, blamed on a shard)."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pytest

from easydata.reader.blocks import MAX_OPEN_SHARDS
from tests.conftest import write_synthetic_output

L = 4
SHARDS = MAX_OPEN_SHARDS + 86  # 150: more than the child may open
SCHEMA = pa.schema([(c, pa.list_(pa.int32())) for c in ("input_ids", "segment_ids", "positions")])

READ_ALL = f"""
import resource, sys
from easydata.reader import FollowReader, GrainSource, TokenReader
resource.setrlimit(resource.RLIMIT_NOFILE, ({MAX_OPEN_SHARDS + 48}, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
out = sys.argv[1]
for epoch in range(2):  # the second epoch opens shards the first one dropped
    firsts = sorted(int(b["input_ids"][i, 0]) for b in TokenReader(out, batch_size=4, num_epochs=1, seed=epoch)
                    for i in range(4))
    assert firsts == list(range({SHARDS * 2})), firsts[:10]
grain = GrainSource(out)
assert sorted(int(grain[i]["input_ids"][0]) for i in range(len(grain))) == list(range({SHARDS * 2}))
rows = len(grain)
del grain  # each reader keeps its own MAX_OPEN_SHARDS open
follow = sorted(int(x) for b in FollowReader(out, batch_size=4, timeout=0.0) for x in b["input_ids"][:, 0])
assert follow == list(range({SHARDS * 2})), follow[:10]
print("read", rows, "rows of", {SHARDS}, "shards")
"""


@pytest.mark.parametrize("fmt", ["parquet", "arrow", "tfrecord"])
def test_readers_read_more_shards_than_files_may_be_open(tmp_path, fmt):
    out = tmp_path / "out"
    rows = [[{"input_ids": [2 * s + r] + [1] * (L - 1), "segment_ids": [1] * L, "positions": list(range(L))}
             for r in range(2)] for s in range(SHARDS)]
    write_synthetic_output(str(out), {"train": rows}, SCHEMA, fmt=fmt, seq_length=L)
    result = subprocess.run([sys.executable, "-c", READ_ALL, str(out)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"read {SHARDS * 2} rows of {SHARDS} shards" in result.stdout


def test_a_limit_below_one_readers_shards_is_named_not_blamed_on_a_shard(tmp_path):
    """Where even `MAX_OPEN_SHARDS` files cannot be open, the error says so (it said the shard was
    unreadable and to run `easydata validate`)."""
    out = tmp_path / "out"
    rows = [[{"input_ids": [s] + [1] * (L - 1), "segment_ids": [1] * L, "positions": list(range(L))}]
            for s in range(SHARDS)]
    write_synthetic_output(str(out), {"train": rows}, SCHEMA, seq_length=L)
    code = ("import resource, sys\nfrom easydata.errors import EnvironmentFailure\nfrom easydata.reader import TokenReader\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (40, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))\n"
            "try:\n    TokenReader(sys.argv[1], batch_size=4)\nexcept EnvironmentFailure as e:\n    print(e.message)\n")
    result = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("the process's limit of open files is reached (ulimit -n) (Too many open files)"
                                    f" at '{out}/train/part-"), result.stdout


READ_BIN = f"""
import resource, sys
from easydata.reader import TokenReader
from easydata.reader.bin_reader import WindowReader
resource.setrlimit(resource.RLIMIT_NOFILE, ({MAX_OPEN_SHARDS + 48}, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
out = sys.argv[1]
firsts = sorted(int(b["input_ids"][i, 0]) for b in TokenReader(out, batch_size=2, seq_length={L}, num_epochs=1)
                for i in range(2))
assert firsts == [100 * s for s in range({SHARDS})], firsts[:10]
windows = WindowReader(out, batch_size=8, seq_length={L}, num_steps=40)
for batch in windows:  # every window is a slice of one shard's stream: consecutive ids
    assert (batch["targets"] - batch["input_ids"] == 1).all(), batch
print("read", len(firsts), "documents and 40 batches of windows of", {SHARDS}, "shards")
"""


def test_bin_readers_read_more_shards_than_files_may_be_open(tmp_path):
    """`WindowReader` held every shard's token stream mapped (a file descriptor each)."""
    out = tmp_path / "out"
    rows = [[{"input_ids": list(range(100 * s, 100 * s + 3 * L))}] for s in range(SHARDS)]
    write_synthetic_output(str(out), {"train": rows}, pa.schema([("input_ids", pa.list_(pa.int32()))]), fmt="bin")
    result = subprocess.run([sys.executable, "-c", READ_BIN, str(out)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"read {SHARDS} documents and 40 batches of windows of {SHARDS} shards" in result.stdout
