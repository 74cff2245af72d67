"""What this machine offers a local run: the cores this process may use and its physical memory.

Read by the local worker pool (how many worker processes, how many tokenizer threads each) and by
input planning (how many splits keep every worker busy); a local job's processes also set how glibc
hands memory back (`map_large_blocks`, `return_free_memory`). Standard library only.
"""

from __future__ import annotations

import os
from typing import Callable, Optional

__all__ = ["usable_cores", "physical_memory_bytes", "splits_per_dataset", "map_large_blocks", "return_free_memory"]

#: Blocks at least this big are mapped on their own by `map_large_blocks`.
MMAP_THRESHOLD_BYTES = 1 << 20

#: glibc's `malloc_trim`, once `map_large_blocks` applied in this process (or in the process it forked from).
_malloc_trim: Optional[Callable[[int], int]] = None


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, e.g. under `taskset`, else the machine's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def map_large_blocks(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Makes glibc's malloc map every block of `threshold` bytes or more on its own, so that it goes
    back to the system when freed; returns whether it applied. For processes that only run a local
    job: the `easydata` command and its worker server (whose forked workers inherit it).

    By default glibc raises its threshold after each such free, up to 32 MiB, so later blocks of that
    size (Arrow buffers, numpy arrays, staged batches) come from the heap, which fragments and keeps its
    high-water mark; with this a local job's peak memory is lower at no measurable cost in time
    (figures: docs/performance.md#figures-behind-design-choices). Left alone where the user set
    `MALLOC_MMAP_THRESHOLD_`, and a no-op on other C libraries (False).
    """
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no mallopt (macOS, Windows)
        return False
    m_mmap_threshold = -3  # glibc's malloc.h
    global _malloc_trim
    applied = bool(mallopt(m_mmap_threshold, threshold))
    if applied:
        _malloc_trim = ctypes.CDLL(None).malloc_trim
    return applied


def return_free_memory() -> None:
    """Hands the free pages inside glibc's heap back to the system (`malloc_trim(0)`), in processes
    where `map_large_blocks` applied (a local job's); a no-op elsewhere.

    Called by the steps that free a lot at once, after each input work unit, tokenize bundle, sorted or
    packed group and assembled shard (a few ms each). Blocks below the mmap threshold (Python objects,
    small arrays, the tokenizer's) come from the heap; what a step frees is scattered between what
    stays, so the heap cannot shrink and the next step adds on top: trimming at these points lowers a
    job's peak memory at no cost in time, where trimming on a timer costs time (the measurements:
    docs/performance.md, "Memory and local limits").
    """
    if _malloc_trim is not None:
        _malloc_trim(0)


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
