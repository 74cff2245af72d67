"""`benchmarks/bench_pipeline.py`'s memory sampler: a process tree's memory, with PSS read at most once per
`pss_interval` (reading it walks every page table, and the sampler shares the cores it measures)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_pipeline  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/proc/self/smaps_rollup").is_file(), reason="needs Linux /proc")

# A child that starts a grandchild holding 200 MiB of private pages, then waits.
HOLDER = """
import subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c",
    "import sys, time; b = bytearray(200 << 20); b[::4096] = b'x' * len(b[::4096]); print('ready', flush=True); time.sleep(30)"],
    stdout=subprocess.PIPE)
print(grandchild.stdout.readline().decode().strip(), flush=True)
time.sleep(30)
"""


def test_the_tree_is_measured_and_pss_is_read_at_most_once_per_interval(monkeypatch):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert holder.stdout.readline().strip() == b"ready"
        sampler = bench_pipeline.TreeRssSampler(holder.pid, interval=0.05, pss_interval=0.5)
        reads = []
        real_open = open

        def counting_open(path, *args, **kwargs):
            if str(path).endswith("/smaps_rollup"):
                reads.append(time.monotonic())
            return real_open(path, *args, **kwargs)

        monkeypatch.setattr("builtins.open", counting_open)
        sampler.start()
        time.sleep(1.3)
        sampler.stop()
        monkeypatch.undo()
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # the grandchild too
        holder.wait()
    # the grandchild's 200 MiB count: in the tree's RSS, its own high-water mark and the tree's PSS
    assert sampler.peak >= 200 << 20
    assert sampler.peak_single >= 200 << 20
    assert sampler.peak_pss >= 190 << 20
    # ~26 passes at 0.05 s, but PSS read (for both processes each time) only at about 0, 0.5 and 1.0 s
    assert 2 <= len(reads) <= 2 * 3, reads
