"""How this process's C library (glibc's malloc) hands memory back, for a local job's processes.

`map_large_blocks` (the `easydata` command and its worker server, whose forked workers inherit it) maps every
large block on its own so that it leaves when freed; `return_free_memory` trims the heap after the steps
that free a lot at once; `tokenizer_scratch` opens a window around a tokenizer call whose large scratch is
better kept in the heap. Where `map_large_blocks` did not apply (a Dataflow or dask worker, another C
library, the user's own `MALLOC_MMAP_THRESHOLD_`) the other two do nothing. A leaf module (standard library
only) below every package that allocates, so that the core's packages can call it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Callable, Iterator, Optional

__all__ = ["map_large_blocks", "return_free_memory", "tokenizer_scratch"]

#: Blocks at least this big are mapped on their own by `map_large_blocks`.
MMAP_THRESHOLD_BYTES = 1 << 20
#: Inside `tokenizer_scratch`: blocks up to this size come from glibc's heap (its own largest threshold) ...
SCRATCH_MMAP_THRESHOLD_BYTES = 32 << 20
#: ... and a heap keeps up to this much free at its top instead of handing it back at once.
SCRATCH_TRIM_THRESHOLD_BYTES = 64 << 20
_DEFAULT_TRIM_THRESHOLD_BYTES = 128 << 10  # glibc's
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h

#: glibc's `malloc_trim`, once `map_large_blocks` applied in this process (or in the process it forked from).
_malloc_trim: Optional[Callable[[int], int]] = None
#: glibc's `mallopt` and the thresholds `map_large_blocks` set, for `tokenizer_scratch` to change and restore.
_mallopt: Optional[Callable[[int, int], int]] = None
_thresholds = (MMAP_THRESHOLD_BYTES, _DEFAULT_TRIM_THRESHOLD_BYTES)
_scratch_lock = threading.Lock()
_scratch_depth = 0


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
    global _malloc_trim, _mallopt, _thresholds
    applied = bool(mallopt(_M_MMAP_THRESHOLD, threshold))
    if applied:
        _malloc_trim = ctypes.CDLL(None).malloc_trim
        _mallopt = mallopt
        trim = os.environ.get("MALLOC_TRIM_THRESHOLD_", "")
        _thresholds = (threshold, int(trim) if trim.isdigit() else _DEFAULT_TRIM_THRESHOLD_BYTES)
    return applied


@contextlib.contextmanager
def tokenizer_scratch() -> Iterator[None]:
    """Within: glibc serves blocks of up to 32 MiB from its heap and keeps up to 64 MiB free at a heap's top,
    where `map_large_blocks` applied (a no-op elsewhere); around a tokenizer's call that allocates large
    scratch and frees it before returning (gigatoken's encoding).

    gigatoken allocates and frees blocks of 8 and 16 MiB per call, zeroed. Mapped on their own (the job's
    1 MiB threshold), each is mapped to the zero page, copied on its first write page by page and unmapped
    at the end of the call, and in a worker, whose other threads run on the other core, every such fault also
    interrupts that core to flush its TLB: a tenth of a local Mistral run's CPU went there. From the heap,
    and not trimmed at the call's end, the same pages serve the next call. Both thresholds matter: with the
    mmap threshold alone the freed blocks are trimmed off the heap's top at once and faulted in again.
    Outside, the job keeps `map_large_blocks`' settings (its arrays and buffers go back to the system when
    freed: a lower peak). Nested and concurrent uses (threads) share one window: the settings are restored
    when the last one leaves; a child forked meanwhile starts outside it. Figures: docs/performance.md (the
    tokenizer's scratch, seventh session).
    """
    global _scratch_depth
    if _mallopt is None:
        yield
        return
    with _scratch_lock:
        _scratch_depth += 1
        if _scratch_depth == 1:
            _mallopt(_M_TRIM_THRESHOLD, SCRATCH_TRIM_THRESHOLD_BYTES)
            _mallopt(_M_MMAP_THRESHOLD, SCRATCH_MMAP_THRESHOLD_BYTES)
    try:
        yield
    finally:
        with _scratch_lock:
            _scratch_depth -= 1
            if _scratch_depth == 0:
                _restore_thresholds()


def _restore_thresholds() -> None:
    _mallopt(_M_MMAP_THRESHOLD, _thresholds[0])
    _mallopt(_M_TRIM_THRESHOLD, _thresholds[1])


def _leave_window_in_child() -> None:
    """A process forked while another of its parent's threads was inside `tokenizer_scratch` (a worker server
    forking a worker) starts outside it: the job's thresholds, no window open, a lock no thread holds."""
    global _scratch_lock, _scratch_depth
    _scratch_lock = threading.Lock()
    if _scratch_depth and _mallopt is not None:
        _restore_thresholds()
    _scratch_depth = 0


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_leave_window_in_child)


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
