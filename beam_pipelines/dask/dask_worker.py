"""Start-up of the worker processes of the local dask cluster `--runner=DaskRunner` starts: quiet stderr.

Loaded by each worker as a dask preload, before any task imports Beam. As in
`beam_pipelines.local.local_worker`, only errors reach the worker's stderr (the terminal of a local run):
Beam's import-time warnings about optional GCP libraries do not. A task that failed with a user error
(`EasyDataError`) is not logged either: the launching process reports it in one line, as it does for
the local runner. Other task failures keep dask's full report.
"""

from easydata.logs import quiet_dask_worker

__all__ = ["dask_setup"]


def dask_setup(worker: object) -> None:  # noqa: ARG001 - dask's preload hook signature
    quiet_dask_worker()
