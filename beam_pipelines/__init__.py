"""Runnable pipelines composed from `transforms/`: batch now; streaming and Flex Template entries follow."""

from beam_pipelines.batch import BatchResult, build_batch_pipeline, run_batch
from beam_pipelines.runners import OfflineDirectRunner, make_runner_and_options

__all__ = ["run_batch", "build_batch_pipeline", "BatchResult", "OfflineDirectRunner", "make_runner_and_options"]
