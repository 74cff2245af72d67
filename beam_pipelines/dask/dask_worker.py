"""Start-up of the worker processes of the local dask cluster `--runner=DaskRunner` starts: quiet stderr.

Loaded by each worker as a dask preload, before any task imports Beam. As in
`beam_pipelines.local.local_worker`, only errors reach the worker's stderr (the terminal of a local run):
Beam's import-time warnings about optional GCP libraries do not. A task that failed with a user error
(`EasyDataError`) is not logged either: the launching process reports it in one line, as it does for
the local runner. Other task failures keep dask's full report.
"""

import logging

from easydata import errors

__all__ = ["dask_setup"]


class _DropUserErrors(errors.DropUserErrors):
    """Drops the reports of an `EasyDataError` raised by a task: Beam's log of the failed DoFn and
    dask's "Compute Failed" (which holds the exception's repr, and so its marker)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not super().filter(record):
            return False
        if str(record.msg).startswith("Compute Failed") and isinstance(record.args, tuple) and len(record.args) > 3:
            return errors.from_text(str(record.args[3])) is None
        return True


def dask_setup(worker: object) -> None:  # noqa: ARG001 - dask's preload hook signature
    quiet = _DropUserErrors()
    handler = logging.StreamHandler()
    handler.setLevel(logging.ERROR)
    handler.addFilter(quiet)
    logging.basicConfig(handlers=[handler], format="%(levelname)s:%(name)s:%(message)s")
    logging.getLogger("distributed.worker").addFilter(quiet)  # dask logs it through its own handler
