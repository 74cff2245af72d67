"""What a local run may use of this machine, under the limits containers and schedulers set.

A Kubernetes pod's CPU limit, `docker run --cpus` and a Slurm job's `--mem` are control-group limits, which the
CPU affinity and `SC_PHYS_PAGES` do not show: a pod limited to 2 CPUs on a 64-core node started 64 workers, each
sized for memory the pod did not have. The test puts a real process in real control groups (cgroup v1 or v2, as
root; skipped where this machine cannot make them).
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from easydata.run.machine import CGROUP_ROOT, usable_cores

GiB = 2**30


def _make_group(controller: str, settings: dict[str, str]) -> Path:
    """A new control group with `settings` written, under the v1 `controller` hierarchy or the v2 root."""
    v1 = Path(CGROUP_ROOT) / controller
    base = v1 if (v1 / "cgroup.procs").exists() else Path(CGROUP_ROOT)
    group = base / f"easydata-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
        for name, value in settings.items():
            (group / name).write_text(value)
    except OSError as e:
        if group.exists():
            group.rmdir()
        pytest.skip(f"cannot make a {controller} control group here: {e}")
    return group


def test_a_control_groups_cpu_quota_and_memory_limit_bound_the_local_run() -> None:
    if os.geteuid() != 0 or not Path(CGROUP_ROOT).is_dir():
        pytest.skip("making control groups needs root and a cgroup file system")
    v2 = (Path(CGROUP_ROOT) / "cgroup.controllers").exists()
    cpu = _make_group("cpu", {"cpu.max": "100000 100000"} if v2 else
                      {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "100000"})  # one CPU's worth
    memory = cpu if v2 else _make_group("memory", {"memory.limit_in_bytes": str(3 * GiB)})
    if v2:
        (cpu / "memory.max").write_text(str(3 * GiB))
    probe = ("import os, sys\n"
             "for group in sys.argv[1:]: open(os.path.join(group, 'cgroup.procs'), 'w').write(str(os.getpid()))\n"
             "from easydata.run.machine import usable_cores, physical_memory_bytes\n"
             "from beam_pipelines.local.worker_pool import default_worker_count\n"
             "print(usable_cores(), physical_memory_bytes(), default_worker_count())")
    try:
        out = subprocess.run([sys.executable, "-c", probe, str(cpu), *([] if v2 else [str(memory)])],
                             capture_output=True, text=True, timeout=120, check=True).stdout.split()
    finally:
        for group in {cpu, memory}:
            group.rmdir()
    cores, memory_bytes, workers = map(int, out)
    assert cores == 1 and memory_bytes == 3 * GiB and workers == 1, out
    assert usable_cores() >= 1  # this process, outside the groups, is not bound by them
