"""What this machine offers a local run: the cores this process may use and its physical memory.

Read by the local worker pool (how many worker processes, how many tokenizer threads each) and by
input planning (how many splits keep every worker busy); how a local job's processes hand memory back is
`easydata.memory`. Standard library only.
"""

from __future__ import annotations

import os
from typing import Optional

__all__ = ["usable_cores", "physical_memory_bytes", "splits_per_dataset", "parallel_readers"]


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, e.g. under `taskset`, else the machine's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def physical_memory_bytes() -> Optional[int]:
    """The machine's physical memory, or None where the system does not report it."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def splits_per_dataset() -> int:
    """Input splits a run plans per dataset on this machine: 16, or 4 per usable core on machines with
    more than 4 (a local run has one worker process per core, and 4 splits each even out their
    shares). Passed to `easydata.io.sources.plan_input` by the run's planning."""
    return max(16, 4 * usable_cores())


def parallel_readers() -> int:
    """Workers that read a run's inputs at once on this machine: one per usable core (a local run's worker
    processes). A large compressed line file is read in as many parts (`easydata.io.sources.plan_input`)."""
    return usable_cores()
