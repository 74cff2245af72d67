"""Runnable pipelines composed from `transforms/`: batch, streaming, and the Dataflow Flex Template entry.

Submodules load lazily, so `python -m beam_pipelines.local.local_worker` (and the dask worker preload
`beam_pipelines.dask.dask_worker`) can set up logging before Beam loads.
"""

import importlib
from typing import Any

__all__ = ["run_batch", "build_batch_pipeline", "BatchResult", "OfflineDirectRunner", "make_runner_and_options",
           "ManagedDaskRunner", "build_batch_job", "launch_batch"]

_HOMES = {"run_batch": "batch", "build_batch_pipeline": "batch", "BatchResult": "batch",
          "OfflineDirectRunner": "runners", "make_runner_and_options": "runners",
          "ManagedDaskRunner": "dask.dask_runner", "build_batch_job": "batch", "launch_batch": "batch"}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"beam_pipelines.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'beam_pipelines' has no attribute {name!r}")
