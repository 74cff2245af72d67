"""What this machine offers a local run: the cores this process may use and its physical memory.

Read by the local worker pool (how many worker processes, how many tokenizer threads each) and by
input planning (how many splits keep every worker busy); how a local job's processes hand memory back is
`easydata.memory`. Standard library only.
"""

from __future__ import annotations

import math
import os
from typing import Optional

__all__ = ["usable_cores", "physical_memory_bytes", "splits_per_dataset", "parallel_readers"]


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity (`taskset`, Slurm's cpusets), else the machine's, and no
    more than its control group's CPU quota (a container's `--cpus`, a Kubernetes pod's CPU limit: a pod
    limited to 2 CPUs on a 64-core node started 64 workers)."""
    try:
        cores = max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        cores = max(1, os.cpu_count() or 1)
    quota = _cgroup_cpu_quota()
    return cores if quota is None else max(1, min(cores, math.ceil(quota)))


def physical_memory_bytes() -> Optional[int]:
    """The memory this process may use: the machine's physical memory, or its control group's limit where
    that is lower (a container's `--memory`, a pod's memory limit, a Slurm job's `--mem`); None where the
    system reports neither."""
    try:
        memory: Optional[int] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        memory = None
    return min((m for m in (memory, _cgroup_memory_limit()) if m is not None), default=None)


#: Where Linux mounts control groups.
CGROUP_ROOT = "/sys/fs/cgroup"


def _cgroup_dirs(controller: str) -> list[str]:
    """The directories of this process's control group for `controller` (cgroup v1) or of its unified group
    (v2), its own first, then each ancestor: a limit set on any of them holds."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and controllers == "":  # v2
            mounts = [CGROUP_ROOT]
        elif controller in controllers.split(","):  # v1, mounted as `cpu,cpuacct` or `cpu`
            mounts = [os.path.join(CGROUP_ROOT, controllers), os.path.join(CGROUP_ROOT, controller)]
        else:
            continue
        for mount in mounts:
            if not os.path.isdir(mount):
                continue
            parts = [p for p in path.split("/") if p]
            dirs = [os.path.join(mount, *parts[:i]) for i in range(len(parts), -1, -1)]
            found.extend(d for d in dirs if os.path.isdir(d))  # a namespaced container sees its group as the root
            break
    return found


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip()
    except (OSError, ValueError):
        return None


def _cgroup_cpu_quota() -> Optional[float]:
    """CPUs' worth of time the control group may use (quota / period), the lowest up its tree; None: no quota."""
    quotas = []
    for directory in _cgroup_dirs("cpu"):
        v2 = _read(os.path.join(directory, "cpu.max"))  # "max 100000" or "200000 100000"
        if v2 is not None:
            quota, _, period = v2.partition(" ")
        else:
            quota, period = _read(os.path.join(directory, "cpu.cfs_quota_us")), _read(
                os.path.join(directory, "cpu.cfs_period_us"))
        try:
            if quota not in (None, "max", "-1") and period and int(quota) > 0 and int(period) > 0:
                quotas.append(int(quota) / int(period))
        except ValueError:
            continue
    return min(quotas) if quotas else None


def _cgroup_memory_limit() -> Optional[int]:
    """The control group's memory limit in bytes, the lowest up its tree; None: no limit (v1 reports no limit as
    a number near 2**63)."""
    limits = []
    for directory in _cgroup_dirs("memory"):
        value = _read(os.path.join(directory, "memory.max")) or _read(os.path.join(directory, "memory.limit_in_bytes"))
        if value and value.isdigit() and int(value) < 2**60:
            limits.append(int(value))
    return min(limits) if limits else None


def splits_per_dataset() -> int:
    """Input splits a run plans per dataset on this machine: 16, or 4 per usable core on machines with
    more than 4 (a local run has one worker process per core, and 4 splits each even out their
    shares). Passed to `easydata.io.sources.plan_input` by the run's planning."""
    return max(16, 4 * usable_cores())


def parallel_readers() -> int:
    """Workers that read a run's inputs at once on this machine: one per usable core (a local run's worker
    processes). A large compressed line file is read in as many parts (`easydata.io.sources.plan_input`)."""
    return usable_cores()
