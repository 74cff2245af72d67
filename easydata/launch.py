"""Launching Beam jobs from the core's entry points (the `easydata` command and the Python API).

The one module of `easydata/` that imports `beam_pipelines`, and only inside its functions: the
core stays importable without Beam (`import easydata.reader` in a training job never loads it),
while the command and `easydata.compat.Pipeline` can still start a job (docs/architecture.md).
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Sequence

__all__ = ["run_batch_job", "run_streaming_job", "stop_local_workers"]


def run_batch_job(config: Any, beam_args: Sequence[str], *, show_progress: bool, resume: bool = False,
                  whole_process: bool = False) -> Any:
    """Runs a batch job and returns its `BatchResult` (`beam_pipelines.batch.run_batch`).

    `whole_process`: the caller is the `easydata` command, which ends with the job: local worker
    processes start while this process imports Beam, and a local job runs without the optional
    libraries it never uses (`beam_pipelines.local.lean_import`) and with glibc mapping large blocks on
    their own (`easydata.memory.map_large_blocks`). A Python API caller goes on after the job, so
    none of this applies.
    """
    beam_args = list(beam_args)
    if not whole_process:
        from beam_pipelines.batch import run_batch

        return run_batch(config, beam_args, show_progress=show_progress, resume=resume)
    from beam_pipelines.local.lean_import import without_unused_libraries
    from beam_pipelines.local.worker_pool import prestart, runs_locally
    from easydata.memory import map_large_blocks

    local = runs_locally(beam_args)
    if local:
        map_large_blocks()
    prestart(beam_args, config)  # local worker processes, if any, start while this process imports Beam
    with without_unused_libraries() if local else contextlib.nullcontext():
        from beam_pipelines.batch import run_batch

        return run_batch(config, beam_args, show_progress=show_progress, resume=resume)


def run_streaming_job(config: Any, beam_args: Sequence[str]) -> None:
    """Runs the streaming pipeline until it is cancelled (`beam_pipelines.streaming.run_streaming`)."""
    from beam_pipelines.streaming import run_streaming

    run_streaming(config, list(beam_args))


def stop_local_workers() -> None:
    """No local worker outlives an interrupted command (only if the worker pool was ever imported)."""
    pool = sys.modules.get("beam_pipelines.local.worker_pool")
    if pool is not None:
        pool.stop_all_workers()
